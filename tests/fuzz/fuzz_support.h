// Shared by the libFuzzer targets of tests/fuzz: the input as text or JSON,
// the real Mistral tokenizer (the demo model's, embedded), and running a
// parser that may refuse the input only with its own error type. Any other
// exception escapes, and libFuzzer reports it as a crash.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_bounded.h"
#include "base/utf8.h"
#include "embedded_files.h"
#include "engine/text/grammar.h"
#include "engine/text/tokenizer.h"
#include "server/openai.h"

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
    try {
        return json_parse_bounded(std::string_view(reinterpret_cast<const char*>(data), size), JSON_FILE_LIMITS, "input");
    } catch (const JsonError&) {
        return nlohmann::json(nlohmann::json::value_t::discarded);
    }
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

// The Mistral v1 vocabulary as a grammar's, built once.
inline const std::shared_ptr<const GrammarVocab>& fuzz_grammar_vocab() {
    static const auto vocab = std::make_shared<const GrammarVocab>(fuzz_tokenizer_model());
    return vocab;
}

// Walks up to 24 tokens of `grammar`, each the allowed token the input's
// bytes pick: mask() allows at least one token (or throws MoeError), an
// end token only where the text is complete, and accept() takes any token
// mask() allowed. A finding aborts.
inline void fuzz_grammar_walk(const std::shared_ptr<const Grammar>& grammar, const uint8_t* data, size_t size) {
    const int end_token = fuzz_tokenizer_model().eos_id();
    GrammarMatcher matcher(grammar, std::span<const int>(&end_token, 1), size > 0 && (data[0] & 1));
    std::vector<float> logits(size_t(fuzz_grammar_vocab()->vocab_size()));
    for (int step = 0; step < 24 && !matcher.must_end(); step++) {
        std::fill(logits.begin(), logits.end(), 0.0f);
        matcher.mask(logits.data());
        std::vector<int> allowed;
        for (size_t id = 0; id < logits.size(); id++)
            if (!std::isinf(logits[id])) allowed.push_back(int(id));
        if (allowed.empty()) std::abort();
        const int pick = allowed[(size ? size_t(data[size_t(step) % size]) * 131 + size_t(step) : size_t(step)) %
                                 allowed.size()];
        if (pick == end_token) {
            if (!matcher.can_end()) std::abort();
            return;
        }
        if (!matcher.allows(pick)) std::abort();
        matcher.accept(pick);
    }
}
