// Hugging Face tokenizer.json as a Tokenizer: the BPE model (byte-level
// GPT-2 style, or SentencePiece-flavoured with byte_fallback and Metaspace),
// its normalizer, pre-tokenizer, added tokens and decoder, read with
// nlohmann::json into the shared vocabulary table (tokenizer.h) and a BPE
// backend. Regexes run through PCRE2 (Unicode properties), normalization
// forms through utf8proc. What is read (and everything else is refused,
// naming the key and type):
//   model         BPE: vocab, merges ("a b" or ["a", "b"]) by rank, unk_token,
//                 byte_fallback, fuse_unk, ignore_merges
//   normalizer    NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence, null
//   pre_tokenizer Split (String or Regex pattern, behavior Removed, Isolated,
//                 MergedWithPrevious, MergedWithNext, Contiguous; invert),
//                 ByteLevel (add_prefix_space, use_regex: the GPT-2 regex),
//                 Metaspace (replacement, prepend_scheme first/always/never
//                 or the older add_prefix_space, split; the "▁" is prepended
//                 even to a text that starts with a space, as SentencePiece
//                 does, so Mistral's tokenizer.json gives its
//                 tokenizer.model's ids), Digits
//                 (individual_digits), Sequence, null
//   added_tokens  matched in text before the model (special ones only when
//                 the caller parses specials); lstrip, rstrip, single_word
//   decoder       ByteLevel, Metaspace, ByteFallback, Fuse, Replace,
//                 Strip (of one leading space), Sequence, null: turned into
//                 every id's bytes, so the Detokenizer streams them
// Tokenizer::encode's add_dummy_prefix switches the prefix steps: Prepend,
// Metaspace's prepend_scheme and ByteLevel's add_prefix_space.
// post_processor, truncation and padding are not the tokenizer's concern
// here: callers insert BOS themselves. Errors are one MoeError line
// "SOURCE: KEY: what is wrong", e.g. "tokenizer.json: model.merges[3]: ...".
#pragma once
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engine/text/tokenizer.h"

// The pieces that are the BOS and EOS tokens (tokenizer_config.json's
// bos_token / eos_token); empty: none. add_bos: its add_bos_token (absent:
// BOS is added when there is one, as Hugging Face's Llama tokenizers do).
struct HfSpecialTokens {
    std::string bos;
    std::string eos;
    std::optional<bool> add_bos = std::nullopt;
};

// A parsed tokenizer.json document. `source` names it in errors.
Tokenizer hf_tokenizer_from_json(const nlohmann::json& doc, const std::string& source,
                                 const HfSpecialTokens& specials = {});

// tokenizer.json's text (parse errors name the file and position).
Tokenizer hf_tokenizer_parse(std::string_view text, const std::string& source, const HfSpecialTokens& specials = {});

// A model folder's tokenizer.json, with the BOS and EOS pieces of its
// tokenizer_config.json (bos_token / eos_token: a string or
// {"content": ...}) and its add_bos_token when that file exists.
Tokenizer hf_tokenizer_load_dir(const std::filesystem::path& dir);

// The GPT-2 byte-level alphabet: the character (UTF-8) that byte b is
// written as in a byte-level vocabulary.
const std::string& byte_level_char(unsigned char b);

// The chat_template of a parsed tokenizer_config.json: a string, or a list of
// {name, template} objects of which "default" is taken. Empty when absent;
// *note explains a list without "default". MoeError naming `where` for a
// value of the wrong type.
std::string chat_template_from_config(const nlohmann::json& config, const std::string& where, std::string* note);
