// Test-only tokenizers and readers shared by the tokenizer, template and
// reply tests (see tokenizer_fixtures.h).
#include "tokenizer_fixtures.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/errors.h"
#include "embedded_files.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/protobuf_wire.h"
#include "test_support.h"

namespace tokenizer_test {

// ---- SentencePiece models built in tests ------------------------------------

// One ModelProto.pieces entry: {piece, score, type}.
std::string spm_piece(std::string_view piece, float score, int type) {
    std::string p;
    pb_put_bytes_field(&p, 1, piece);
    pb_put_float_field(&p, 2, score);
    pb_put_varint_field(&p, 3, static_cast<uint64_t>(type));
    std::string field;
    pb_put_bytes_field(&field, 1, p);
    return field;
}

constexpr int SPM_CONTROL = 3;

// A serialized model plus CONTROL pieces appended (ids vocab_size, +1, ...):
// protobuf concatenation appends to the repeated pieces field.
std::string spm_with_control_pieces(std::string model, const std::vector<std::string>& pieces) {
    for (const auto& piece : pieces) model += spm_piece(piece, 0.0f, SPM_CONTROL);
    return model;
}

// The strings of a llama.cpp .inp file (separated by "\n__ggml_vocab_test__\n").
std::vector<std::string> read_vocab_test_inputs(const std::filesystem::path& path) {
    const std::string text = read_file(path);
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t pos = 0;
    for (size_t next; (next = text.find(sep, pos)) != std::string::npos; pos = next + sep.size())
        out.push_back(text.substr(pos, next - pos));
    return out;
}

// llama.cpp's expected ids: one line per case, ids separated by spaces.
std::vector<std::vector<int>> read_vocab_test_outputs(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::vector<std::vector<int>> out;
    for (std::string line; std::getline(in, line);) {
        std::vector<int> ids;
        std::istringstream words(line);
        for (int id; words >> id;) ids.push_back(id);
        out.push_back(ids);
    }
    return out;
}

const Tokenizer& mistral() {
    static const Tokenizer tok = Tokenizer::load(shared_data_dir() / "tokenizers/mistral-v1.model");
    return tok;
}

// The Mixtral vocabulary plus the markers of the other chat families as
// control pieces (the chat template and chat reply tests).
const Tokenizer& extended() {
    static const Tokenizer tok =
        Tokenizer::from_bytes(spm_with_control_pieces(read_file(shared_data_dir() / "tokenizers/mistral-v1.model"),
                                                      {"<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
                                                       "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                                       "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"}),
                              "mistral-v1+markers");
    return tok;
}

// Strict UTF-8 check, written independently of the engine's.
bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = 0;
        uint32_t cp = 0;
        if (c < 0x80)
            n = 1, cp = c;
        else if ((c & 0xE0) == 0xC0)
            n = 2, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0)
            n = 3, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0)
            n = 4, cp = c & 0x07;
        else
            return false;
        if (i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            const auto t = static_cast<unsigned char>(s[i + k]);
            if ((t & 0xC0) != 0x80) return false;
            cp = cp << 6 | (t & 0x3F);
        }
        const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return false;
        i += n;
    }
    return true;
}

// Streams ids through a Detokenizer; every push() output must be valid UTF-8.
std::string stream(const Tokenizer& tok, const std::vector<int>& ids, bool strip) {
    Detokenizer detok(tok, strip);
    std::string out;
    for (int id : ids) {
        const std::string piece = detok.push(id);
        INFO("push(" << id << ") = " << piece);
        REQUIRE(valid_utf8(piece));
        out += piece;
    }
    const std::string tail = detok.flush();
    REQUIRE(valid_utf8(tail));
    return out + tail;
}

const std::vector<std::string>& sample_texts() {
    static const std::vector<std::string> texts = [] {
        std::vector<std::string> t = {
            "Hello world",
            "The quick brown fox jumps over the lazy dog.",
            "café crème brûlée, naïve façade, Ærøskøbing",
            "Ελληνικά и русский текст",
            "日本語のテキストと中文文本，还有한국어",
            "emoji 😀 🦙 👍🏽 and flags 🇫🇷🇯🇵",
            "family 👨‍👩‍👧‍👦 and 🏳️‍🌈 (ZWJ sequences)",
            " leading space",
            "   three leading spaces",
            "multiple     inner    spaces",
            "trailing spaces   ",
            "line one\nline two\n\nline four\n",
            "\ttab\tseparated\tvalues",
            "\n starts with a newline",
            "mixed\r\nline endings\r",
            "math: ∀x ∈ ℝ, x² ≥ 0; ∑ 1/n² = π²/6",
            "code: int main() { return 0; }  // done",
            "ZWJ alone: a\u200db, combining: e\u0301",
            "rare: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 𒀭 \U0010FFFD",
            "</s> <s> [INST] <unk> [/INST]",
            "5 + 5 = 10",
            "x",
            " ",
            "\n",
        };
        // llama.cpp's tokenizer test strings: many whitespace runs, scripts, emoji.
        for (auto& s :
             read_vocab_test_inputs(shared_data_dir() / "reference/llama-cpp-vocab/ggml-vocab-llama-spm.gguf.inp"))
            t.push_back(s);
        return t;
    }();
    return texts;
}

// ---- GGUF metadata edits ------------------------------------------------------

GgufKeyValue* find_key(std::vector<GgufKeyValue>& md, std::string_view key) {
    for (auto& kv : md)
        if (kv.key == key) return &kv;
    return nullptr;
}

// md with `key` set to `value` (added when absent).
std::vector<GgufKeyValue> with(std::vector<GgufKeyValue> md, const std::string& key, GgufValue value) {
    if (GgufKeyValue* kv = find_key(md, key))
        kv->value = std::move(value);
    else
        md.push_back({key, std::move(value)});
    return md;
}

std::vector<GgufKeyValue> without(std::vector<GgufKeyValue> md, std::string_view key) {
    std::erase_if(md, [&](const GgufKeyValue& kv) { return kv.key == key; });
    return md;
}

}  // namespace tokenizer_test

namespace {

using ojson = nlohmann::ordered_json;

// Byte-level BPE: the 256 byte characters, merges "Ġ t", "h e", "Ġt he", and
// Qwen's added tokens from id 259 (<think> not special, as in Qwen3's
// tokenizer.json).
ojson byte_level_tokenizer_json() {
    ojson vocab = ojson::object();
    for (int b = 0; b < 256; b++) vocab[byte_level_char(static_cast<unsigned char>(b))] = b;
    const std::string space = byte_level_char(' ');
    vocab[space + "t"] = 256;
    vocab["he"] = 257;
    vocab[space + "the"] = 258;
    ojson added = ojson::array();
    int id = 259;
    for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"}) {
        const bool special = std::string_view(t).starts_with("<|");
        added.push_back({{"id", id++}, {"content", t}, {"special", special}});
    }
    return {{"added_tokens", added},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model",
             {{"type", "BPE"}, {"vocab", vocab}, {"merges", ojson::array({space + " t", "h e", space + "t he"})}}}};
}

}  // namespace

std::string byte_level_tokenizer_json_text() {
    return byte_level_tokenizer_json().dump();
}
