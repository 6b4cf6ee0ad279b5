// Test-only tokenizers and readers shared by the tokenizer tests
// (tests/text/), the chat-template tests (tests/chat/) and the reply tests
// (tests/engine/): SentencePiece models built in tests, llama.cpp's vocab
// test files, the Mixtral tokenizer with and without the other families'
// markers, a streaming helper. Defined in tokenizer_fixtures.cpp.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/formats/gguf.h"
#include "engine/text/tokenizer.h"

namespace tokenizer_test {

// One ModelProto.pieces entry: {piece, score, type}.
std::string spm_piece(std::string_view piece, float score, int type);
// A serialized model plus CONTROL pieces appended (ids vocab_size, +1, ...).
std::string spm_with_control_pieces(std::string model, const std::vector<std::string>& pieces);
// The strings of a llama.cpp .inp file (separated by "\n__ggml_vocab_test__\n").
std::vector<std::string> read_vocab_test_inputs(const std::filesystem::path& path);
// llama.cpp's expected ids: one line per case, ids separated by spaces.
std::vector<std::vector<int>> read_vocab_test_outputs(const std::filesystem::path& path);
// The Mixtral tokenizer (the shared data's tokenizer.model).
const Tokenizer& mistral();
// The Mixtral vocabulary plus the markers of the other chat families as
// control pieces (the chat template and chat reply tests).
const Tokenizer& extended();
// Strict UTF-8 check, written independently of the engine's.
bool valid_utf8(std::string_view s);
// Streams ids through a Detokenizer; every push() output must be valid UTF-8.
std::string stream(const Tokenizer& tok, const std::vector<int>& ids, bool strip = true);
// Texts of every kind the tokenizer tests encode.
const std::vector<std::string>& sample_texts();

// GGUF metadata edits: the entry named key (null when absent); md with key
// set to value (added when absent); md without key.
GgufKeyValue* find_key(std::vector<GgufKeyValue>& md, std::string_view key);
std::vector<GgufKeyValue> with(std::vector<GgufKeyValue> md, const std::string& key, GgufValue value);
std::vector<GgufKeyValue> without(std::vector<GgufKeyValue> md, std::string_view key);

}  // namespace tokenizer_test
