// Tokenizer: text to token ids and back, for every kind of vocabulary the
// project reads. The vocabulary table (each id's piece, kind and bytes, the
// special ids, the added tokens matched in text) is shared; turning plain
// text into ids is a backend's (TokenizerModel): SentencePiece through
// libsentencepiece (tokenizer.model, GGUF "llama") here, BPE from a Hugging
// Face tokenizer.json or a GGUF "gpt2" vocabulary in hf_tokenizer.*.
// Special tokens (<s>, </s>, [INST], <|im_start|>) are inserted as ids by the
// caller; encode() treats its text as plain text unless the caller asks for
// specials (SpecialTokens::PARSE), so a user typing "</s>" gets the tokens of
// those characters, never id 2.
// A tokenizer file is untrusted input: every encode and decode runs under a
// WorkBudget (engine/text/work_budget.h) sized by its text (tokenize_limits),
// which the backend charges before it allocates, so a file whose steps
// amplify text (stacked byte-level steps, a Replace by a long string) fails
// that call with "SOURCE: tokenizing used more than N bytes", never
// exhausting memory or time; SIGTERM's work_budget_stop_all() ends it too.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/work_budget.h"

// What one encode or decode of `text_bytes` bytes (of text, or of the ids'
// bytes) may spend: generous for any real tokenizer (they use ~70 bytes of
// memory per byte of text), far below what amplification would.
WorkLimits tokenize_limits(size_t text_bytes);

// What an id is, for decoding and streaming.
enum class PieceKind : unsigned char {
    NORMAL,   // text (bytes_ holds it); byte-level vocabularies join its bytes with its neighbours'
    CONTROL,  // a control or special token: decodes to nothing
    UNKNOWN,  // <unk>: decodes to the model's unk surface
    BYTE,     // a byte-fallback piece <0xNN>: one byte, joined with neighbouring bytes
};

// A token matched in text as a whole before the backend sees the text (a
// Hugging Face added token, a GGUF control or user-defined token).
struct AddedToken {
    std::string content;
    int id = 0;
    bool special = false;      // matched only with SpecialTokens::PARSE
    bool lstrip = false;       // swallows the whitespace before it
    bool rstrip = false;       // swallows the whitespace after it
    bool single_word = false;  // matched only between word boundaries
};

// The shared vocabulary table every backend fills.
struct TokenizerVocab {
    std::vector<std::string> pieces;  // piece of every id, as the vocabulary spells it
    std::vector<std::string> bytes;   // what every id decodes to (token_bytes)
    std::vector<PieceKind> kinds;
    // The id loses a leading space when it is the first output of a text
    // (SentencePiece's and Metaspace's dummy prefix; a Strip decoder).
    std::vector<bool> space_first;
    // Bytes of NORMAL ids join with their neighbours before UTF-8 decoding
    // (GPT-2 byte-level BPE: a character may span several tokens).
    bool byte_level = false;
    int bos = -1, eos = -1;  // -1: the vocabulary has none
    // The tokenizer puts BOS before a plain-text prompt (SentencePiece's and
    // tokenizer_config.json's add_bos_token, GGUF's tokenizer.ggml.add_bos_token;
    // Qwen's are false). Only meaningful when bos >= 0.
    bool add_bos = true;
    std::vector<AddedToken> added;
};

// A byte-fallback piece's byte: "<0xAB>" (either case) -> 0xAB; -1 when the
// piece is not in that form.
int byte_piece_value(std::string_view piece);

// The encoding half of a tokenizer: plain text (no added token in it) to ids.
class TokenizerModel {
public:
    virtual ~TokenizerModel() = default;
    // Appends the ids of `text`. at_start: the text begins the input (a
    // prefix scheme of "first" applies only there); add_dummy_prefix: the
    // caller's switch for the model's dummy prefix / prefix space.
    virtual void encode(std::string_view text, bool at_start, bool add_dummy_prefix, std::vector<int>* ids) const = 0;
    // The backend's own decoding of ids already checked, or nullopt to
    // decode piece by piece from the vocabulary table (as the Detokenizer).
    virtual std::optional<std::string> decode(std::span<const int> ids) const;
};

enum class SpecialTokens {
    AS_TEXT,  // special tokens' text is plain text (user content: the default)
    PARSE,    // special added tokens written in the text become their ids
};

class Tokenizer {
public:
    // A SentencePiece tokenizer.model. Throws MoeError naming the file when
    // it is missing or not a valid model.
    static Tokenizer load(const std::filesystem::path& path);
    // From the serialized SentencePiece model bytes (e.g. the embedded demo tokenizer).
    static Tokenizer from_bytes(std::string_view serialized, std::string_view source);
    // From a backend and its vocabulary table (hf_tokenizer.*). Builds the
    // piece index (the first of repeated pieces wins); MoeError naming
    // `source` for a table of unequal lengths, a special or added-token id
    // outside it.
    static Tokenizer from_parts(std::string source, TokenizerVocab vocab, std::unique_ptr<const TokenizerModel> model);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Text -> ids, no BOS. With add_dummy_prefix (the model's own setting,
    // SentencePiece's default) a leading "▁" (or prefix space) is added as
    // the model does; without it the text is encoded with that step off.
    // Non-special added tokens are always matched; special ones only with
    // SpecialTokens::PARSE (never for user text). Thread-safe (const).
    std::vector<int> encode(std::string_view text, bool add_dummy_prefix = true,
                            SpecialTokens specials = SpecialTokens::AS_TEXT) const;
    // Ids -> text with the model's decoding rules (SentencePiece: the first
    // piece's leading space is dropped). Control ids decode to nothing.
    std::string decode(std::span<const int> ids) const;

    int vocab_size() const;
    int bos_id() const;  // -1 when the vocabulary has none
    // The id a plain-text prompt starts with: BOS when the tokenizer adds one
    // (SentencePiece, Mistral's), -1 when it adds none (Qwen's byte-level BPE).
    int prompt_bos() const;
    // Plain text as a prompt: prompt_bos() (when there is one), then encode(text).
    // The one place every plain-text prompt (CLI, server, benchmarks) is made.
    std::vector<int> encode_prompt(std::string_view text) const;
    void set_add_bos(bool add_bos) { vocab_.add_bos = add_bos; }
    int eos_id() const;  // -1 when the vocabulary has none
    // Id of an exact piece ("<s>", "[INST]", "<|im_start|>"), -1 if absent.
    int piece_to_id(std::string_view piece) const;
    std::string id_to_piece(int id) const;
    bool is_control(int id) const;
    // The added tokens matched in text (special ones only with PARSE).
    const std::vector<AddedToken>& added_tokens() const { return vocab_.added; }
    // The bytes one id stands for: "▁" -> " ", <0xNN> -> that byte, control -> "".
    // <unk> gives the model's unk surface (" ⁇ " for Mistral), as decode() does.
    // A byte-level BPE token gives its raw bytes (maybe part of a character).
    std::string token_bytes(int id) const;
    bool is_byte(int id) const;     // a byte-fallback piece <0xNN>
    bool is_unknown(int id) const;  // <unk>
    const std::string& source() const { return source_; }

private:
    friend class Detokenizer;

    Tokenizer();
    void check_id(int id) const;  // MoeError when id is outside the vocabulary
    void index_vocab();           // piece_ids_ and the added-token trie from vocab_
    // Appends the ids of `text` with added tokens matched first, under the text's budget.
    void encode_parts(std::string_view text, bool add_dummy_prefix, bool allow_special, std::vector<int>* ids) const;
    void encode_segments(std::string_view text, bool add_dummy_prefix, bool allow_special,
                         std::vector<int>* ids) const;

    std::unique_ptr<const TokenizerModel> model_;
    std::string source_;  // file name for error messages
    TokenizerVocab vocab_;
    struct Index;
    std::unique_ptr<Index> index_;  // piece -> id, the added-token trie
};

// Incremental detokenizer for streaming: push() returns only complete UTF-8
// text; bytes of a character split over byte-fallback pieces (<0xF0><0x9F>...)
// or over byte-level BPE tokens are held until the character is whole. The
// first piece of a stream loses its leading space when strip_leading_space is
// set and the vocabulary strips it (SentencePiece's rule for the start of a
// text, a Metaspace or Strip decoder; a reply after "[/INST]" starts this
// way; byte-level vocabularies never strip).
class Detokenizer {
public:
    explicit Detokenizer(const Tokenizer& tokenizer, bool strip_leading_space = true);
    std::string push(int id);
    // Whatever is held back at the end (an incomplete character becomes U+FFFD).
    std::string flush();
    void reset(bool strip_leading_space = true);

private:
    // Emits what pending_ holds that is decided: whole characters, and U+FFFD
    // for bytes that can never start one. With end_of_run (a non-byte piece
    // or flush) an incomplete tail is decided too, one U+FFFD per byte.
    std::string drain(bool end_of_run);

    const Tokenizer* tokenizer_;
    std::string pending_;  // bytes of a character not yet complete
    bool strip_ = true;
    bool at_start_ = true;
};
