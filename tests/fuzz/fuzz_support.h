// Shared by the libFuzzer targets of tests/fuzz: the input as text or JSON,
// the real Mistral tokenizer (the demo model's, embedded), and running a
// parser that may refuse the input only with its own error type. Any other
// exception escapes, and libFuzzer reports it as a crash.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "embedded_files.h"
#include "engine/text/tokenizer.h"
#include "server/openai_request.h"

inline std::string fuzz_text(const uint8_t* data, size_t size) {
    return std::string(reinterpret_cast<const char*>(data), size);
}

// Calls f(); an exception of type E is a refusal and is handed to on_error.
template <class E, class F, class G>
void fuzz_expect(F f, G on_error) {
    try {
        f();
    } catch (const E& e) {
        on_error(e);
    }
}

// A model file reader's input: the head of a file, checked by
// check(head, file_size) both as the whole file and as the head of a 1 TiB
// one (so checks of offsets past the head run without the data being there).
template <class F>
void fuzz_file_head(const uint8_t* data, size_t size, F check) {
    std::string_view head(reinterpret_cast<const char*>(data), size);
    check(head, uint64_t(size));
    check(head, uint64_t(1) << 40);
}

// The input parsed as JSON the way the model-file readers parse it; a
// discarded value when it is not JSON.
inline nlohmann::json fuzz_json(const uint8_t* data, size_t size) {
    return nlohmann::json::parse(data, data + size, nullptr, false);
}

// ids (valid for t) decoded whole and streamed through a Detokenizer; a
// stream that is not valid UTF-8 is a finding (abort).
inline void fuzz_decode_and_stream(const Tokenizer& t, const std::vector<int>& ids, bool strip_leading_space = true) {
    t.decode(ids);
    Detokenizer detok(t, strip_leading_space);
    std::string streamed;
    for (int id : ids) streamed += detok.push(id);
    streamed += detok.flush();
    if (!utf8_valid(streamed)) std::abort();
}

// The Mistral v1 SentencePiece model embedded in the binary, loaded once.
inline const Tokenizer& fuzz_tokenizer_model() {
    static const Tokenizer t = Tokenizer::from_bytes(embedded_file("mistral-v1.model"), "mistral-v1.model");
    return t;
}
