// Tokenizer: SentencePiece (tokenizer.model) through libsentencepiece.
// Special tokens (<s>, </s>, [INST] control ids) are only ever inserted as
// ids by the caller; encode() treats its text as plain text, so a user typing
// "</s>" gets the tokens of those characters, never id 2.
#pragma once
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

class Tokenizer {
public:
    // Throws MoeError naming the file when it is missing or not a valid model.
    static Tokenizer load(const std::filesystem::path& path);
    // From the serialized model bytes (e.g. the embedded demo tokenizer).
    static Tokenizer from_bytes(std::string_view serialized, std::string_view source);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Text -> ids, no BOS. With add_dummy_prefix (SentencePiece's default)
    // a leading "▁" is added, as for every segment Mistral encodes; without
    // it the text is encoded as with the normalizer's add_dummy_prefix off.
    // Never yields a control id. Thread-safe (const).
    std::vector<int> encode(std::string_view text, bool add_dummy_prefix = true) const;
    // Ids -> text with SentencePiece's rules (the first piece's leading
    // space is dropped). Control ids decode to nothing.
    std::string decode(std::span<const int> ids) const;

    int vocab_size() const;
    int bos_id() const;
    int eos_id() const;
    // Id of an exact piece ("<s>", "[INST]", "<|im_start|>"), -1 if absent.
    int piece_to_id(std::string_view piece) const;
    std::string id_to_piece(int id) const;
    bool is_control(int id) const;
    // The bytes one id stands for: "▁" -> " ", <0xNN> -> that byte, control -> "".
    // <unk> gives the model's unk surface (" ⁇ " for Mistral), as decode() does.
    std::string token_bytes(int id) const;
    bool is_byte(int id) const;     // a byte-fallback piece <0xNN>
    bool is_unknown(int id) const;  // <unk>

private:
    friend class Detokenizer;
    enum class PieceKind : unsigned char { NORMAL, CONTROL, UNKNOWN, BYTE };

    Tokenizer();
    void check_id(int id) const;  // MoeError when id is outside the vocabulary

    // The model as stored: decode(), piece and id queries.
    std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
    // The same model with the normalizer's add_dummy_prefix flipped, so
    // encode() can honour both settings; which one sp_ has is model_dummy_prefix_.
    std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_flipped_;
    bool model_dummy_prefix_ = true;
    std::string source_;              // file name for error messages
    std::vector<std::string> bytes_;  // token_bytes for every id, built once
    std::vector<PieceKind> kinds_;    // piece type of every id
    std::vector<bool> space_first_;   // piece starts with "▁" (decode may strip it)
};

// Incremental detokenizer for streaming: push() returns only complete UTF-8
// text; bytes of a character split over byte-fallback pieces (<0xF0><0x9F>...)
// are held until the character is whole. The first piece of a stream loses
// its leading space when strip_leading_space is set (SentencePiece's rule for
// the start of a text; a reply after "[/INST]" starts this way).
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
