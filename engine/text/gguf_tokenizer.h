// The tokenizer a GGUF file carries in its metadata.
// tokenizer.ggml.* describes the vocabulary: a "llama" one (SentencePiece:
// Mistral, Mixtral, Llama 2) becomes the SentencePiece model it was converted
// from (a ModelProto serialized here) and goes through Tokenizer::from_bytes,
// so encoding, decoding and streaming are exactly those of a tokenizer.model.
// A "gpt2" vocabulary (byte-level BPE) becomes the tokenizer.json document
// it came from (gguf_bpe_tokenizer_json); other types are refused, naming them.
// (tokenizer.chat_template is chat/'s: chat_template_from_gguf.) Reads metadata only: tensors, the
// model config and which file is opened are the caller's.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/formats/gguf.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/tokenizer.h"

// The serialized SentencePiece model of a "llama" vocabulary:
//   pieces      tokenizer.ggml.tokens, .scores and .token_type (ggml numbers
//               the types as SentencePiece does: 1 normal, 2 unknown,
//               3 control, 4 user-defined, 5 unused, 6 byte), with the
//               unknown token (tokenizer.ggml.unknown_token_id, else the
//               first token of type unknown) as the one UNKNOWN piece, other
//               unknown-typed tokens (padding) UNUSED, and the BOS and EOS
//               tokens CONTROL, so text never encodes to them;
//   trainer     BPE, byte fallback when there are byte tokens (then all 256),
//               whitespace-only pieces allowed (as Llama and Mistral train),
//               the special ids and pieces (bos_token_id and eos_token_id
//               required, padding_token_id optional);
//   normalizer  identity, add_dummy_prefix from tokenizer.ggml.add_space_prefix
//               (default true), remove_extra_whitespaces from
//               tokenizer.ggml.remove_extra_whitespaces (default false),
//               whitespace escaped as "▁".
// Throws MoeError "SOURCE: KEY: what is wrong" for a missing or unsupported
// tokenizer.ggml.model, missing tokens or scores, arrays of different
// lengths, an unknown token type, an empty or repeated token, a malformed
// byte token, a control token of one character (SentencePiece finds it for
// that character in text and then fails to encode the text), a score that is
// not finite, a special id outside the vocabulary.
std::string gguf_sentencepiece_model(const GgufMetadata& metadata, std::string_view source);

// The tokenizer.json document of a "gpt2" vocabulary (byte-level BPE:
// tokens, merges, token types, the pre-tokenizer of tokenizer.ggml.pre;
// control tokens, BOS and EOS special added tokens, user-defined ones added
// tokens), and the BOS/EOS pieces into *specials. What tokenizer_from_gguf
// reads a gpt2 vocabulary as; synth-model's stand-in Qwen tokenizer starts
// from it. MoeError "SOURCE: KEY: what is wrong".
nlohmann::json gguf_bpe_tokenizer_json(const GgufMetadata& metadata, std::string_view source,
                                       HfSpecialTokens* specials);

// A "gpt2" vocabulary through gguf_bpe_tokenizer_json and the tokenizer.json
// reader; any other: Tokenizer::from_bytes(gguf_sentencepiece_model(metadata, source), source).
Tokenizer tokenizer_from_gguf(const GgufMetadata& metadata, std::string_view source);

// The ids that end generation, as llama.cpp reads a GGUF: EOS, then
// tokenizer.ggml.eot_token_id and eom_token_id when present, then every
// CONTROL token spelled as a known end of turn (<|im_end|>, <|endoftext|>,
// <|eot_id|>, <|eom_id|>, <|end|>, <end_of_turn>, <EOT>,
// <｜end▁of▁sentence｜>), each once. A GGUF carries one EOS id where a
// Hugging Face generation_config.json lists several (Qwen's <|im_end|> and
// <|endoftext|>). Empty when the file names no EOS.
std::vector<int> gguf_end_of_generation_ids(const GgufMetadata& metadata);

// The other direction, for writing GGUF files: a SentencePiece model
// (tokenizer.model's bytes) as the tokenizer.ggml.* keys llama.cpp's
// converter writes (model "llama", tokens, scores, token_type, the special
// ids, add_space_prefix, remove_extra_whitespaces, add_bos_token true,
// add_eos_token false), so that gguf_sentencepiece_model gives the model back
// and other readers tokenize as the original. bos and eos: the model's ids
// (its config's). MoeError "SOURCE: what is wrong" for bytes that are not a
// SentencePiece model.
std::vector<GgufKeyValue> gguf_tokenizer_metadata(std::string_view sentencepiece_model, std::string_view source,
                                                  int bos, int eos);

// The other direction for a byte-level BPE tokenizer.json document: the
// tokenizer.ggml.* keys of a "gpt2" vocabulary (tokens by id, the vocabulary's
// NORMAL, special added tokens CONTROL, other added tokens USER_DEFINED;
// merges as "a b"; tokenizer.ggml.pre the name llama.cpp gives its Split
// regexes: gpt-2, llama-bpe, qwen2, qwen35, deepseek-llm, deepseek-v3), so that
// tokenizer_from_gguf gives the same tokenizer back. bos and eos: the model's
// ids. MoeError "SOURCE: KEY: what is wrong" for another model type, a
// pre-tokenizer llama.cpp has no name for, an id without a token.
std::vector<GgufKeyValue> gguf_bpe_tokenizer_metadata(const nlohmann::json& doc, std::string_view source, int bos,
                                                      int eos);

// A vocabulary of fewer tokens than the model has embedding rows (Qwen pads
// its vocab_size) padded as llama.cpp's converter does: "[PAD<id>]" tokens
// of type UNUSED (score 0 where there are scores) up to vocab_size, so
// llama.cpp finds one token per row. kv holds tokenizer.ggml.* keys.
void gguf_pad_vocabulary(std::vector<GgufKeyValue>& kv, int vocab_size);
