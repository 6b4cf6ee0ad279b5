// Sampling: penalties, then temperature / top-k / top-p / min-p truncation,
// then a seeded draw. Greedy when temperature is 0. Buffers are allocated
// once per vocabulary size: sample() never allocates. Also owns stop-string
// matching over streamed text. Knows nothing about models or tokenizers.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct SamplingParams {
    float temperature = 0.8f;         // 0 = greedy
    int top_k = 40;                   // 0 = off
    float top_p = 0.95f;              // 1 = off
    float min_p = 0.05f;              // 0 = off; keep p >= min_p * p_max
    float repetition_penalty = 1.0f;  // 1 = off; divides positive logits, multiplies negative
    float presence_penalty = 0.0f;    // subtracted once per token seen
    float frequency_penalty = 0.0f;   // subtracted per occurrence
    int penalty_last_n = 64;          // window of history the penalties look at; -1 = all
    uint64_t seed = 0;
};

class Sampler {
public:
    // Throws MoeError for a vocab_size < 1 or a parameter out of range
    // (NaN temperature, top_k < 0, top_p or min_p outside [0, 1],
    // repetition_penalty <= 0, penalty_last_n < -1).
    Sampler(const SamplingParams& params, int vocab_size);

    // Picks the next token. logits (vocab_size,) are modified in place
    // (penalties applied, NaN turned into -inf); history is every token of
    // the sequence so far (prompt included). Throws MoeError for a history
    // token outside the vocabulary or when every logit is -inf / NaN.
    int sample(float* logits, std::span<const int> history);

    // Log-probabilities (after penalties and temperature, before truncation;
    // temperature 1 when greedy) of the last sample() call, for logprobs in
    // the API. Throws MoeError before the first sample() or for a bad token.
    // Worked out on the first call after sample() (greedy decoding that asks
    // for none never pays for a softmax over the vocabulary).
    float last_logprob(int token);
    // The k most likely tokens of the last sample() call and their
    // log-probabilities (as last_logprob), most likely first, into out
    // (cleared; k capped at the vocabulary). Allocates nothing beyond out's
    // growth: it sorts in the sampler's own buffer.
    void last_top_logprobs(int k, std::vector<std::pair<int, float>>& out);

    const SamplingParams& params() const { return params_; }

private:
    SamplingParams params_;
    int vocab_size_;
    std::mt19937_64 rng_;
    std::vector<int> candidates_;  // token ids, vocab_size; scratch between sample() calls
    std::vector<float> probs_;     // vocab_size
    std::vector<int> counts_;      // occurrences per token in the penalty window, all 0 between calls
    std::vector<int> touched_;     // tokens with counts_ > 0 (capacity vocab_size)
    std::vector<float> logprobs_;  // vocab_size: the last logits until ensure_logprobs()
    bool sampled_ = false;         // sample() has run
    bool logprobs_ready_ = false;  // logprobs_ holds log-probabilities
    double max_logit_ = 0.0, inv_temp_ = 1.0;
    double log_sum_ = 0.0;  // NaN until a softmax sum is known (greedy skips it)

    void ensure_logprobs();

    void apply_penalties(float* logits, std::span<const int> history);
    int draw(int n_keep);
};

// Finds stop strings across token boundaries. push() takes newly decoded text
// and returns what may be emitted now: text that could still be the start of
// a stop string is held back until it is certain either way, and so is an
// incomplete UTF-8 sequence at the end (never emitted half a character).
// Matching is bytewise, so a stop split inside a character still matches.
// Empty stop strings are ignored; when several stops match, the earliest
// start wins. After a stop, push() emits nothing and reports stopped.
class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops);
    struct Result {
        std::string emit;  // safe to show the user
        bool stopped = false;
    };
    Result push(std::string_view text);
    // Held-back text at the end of generation (no stop matched); empty after a stop.
    std::string flush();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};
