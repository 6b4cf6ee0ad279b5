// Sampling: penalties, then temperature / top-k / top-p / min-p truncation,
// then a seeded draw. Greedy when temperature is 0. Buffers are allocated
// once per vocabulary size: sample() never allocates.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

struct SamplingParams {
    float temperature = 0.8f;        // 0 = greedy
    int top_k = 40;                  // 0 = off
    float top_p = 0.95f;             // 1 = off
    float min_p = 0.05f;             // 0 = off; keep p >= min_p * p_max
    float repetition_penalty = 1.0f; // 1 = off; divides positive logits, multiplies negative
    float presence_penalty = 0.0f;   // subtracted once per token seen
    float frequency_penalty = 0.0f;  // subtracted per occurrence
    int penalty_last_n = 64;         // window of history the penalties look at; -1 = all
    uint64_t seed = 0;
};

class Sampler {
public:
    Sampler(const SamplingParams& params, int vocab_size);

    // Picks the next token. logits (vocab_size,) are modified in place;
    // history is every token of the sequence so far (prompt included).
    int sample(float* logits, std::span<const int> history);

    // Log-probabilities (after penalties and temperature, before truncation)
    // of the last sample() call, for logprobs in the API.
    float last_logprob(int token) const;

    const SamplingParams& params() const { return params_; }

private:
    SamplingParams params_;
    int vocab_size_;
    std::mt19937_64 rng_;
    std::vector<int> candidates_;     // token ids, vocab_size
    std::vector<float> probs_;        // vocab_size
    std::vector<int> counts_;         // occurrences per token in the penalty window
    std::vector<float> logprobs_;     // vocab_size
};

// Finds stop strings across token boundaries. push() takes newly decoded text
// and returns what may be emitted now: text that could still be the start of
// a stop string is held back until it is certain either way.
class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops);
    struct Result {
        std::string emit;   // safe to show the user
        bool stopped = false;
    };
    Result push(std::string_view text);
    // Held-back text at the end of generation (no stop matched).
    std::string flush();

private:
    std::vector<std::string> stops_;
    std::string held_;
};
