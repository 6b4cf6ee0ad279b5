// Server metrics in the Prometheus text format: HTTP requests by route and
// status, streams that ended in an error, prompt / cached / generated tokens, finished generations by reason,
// the last request's prompt and decode tok/s, queue depth, a
// time-to-first-token histogram, and for beam search its steps and the
// tokens each routed expert got per step (histogram, last request's max and
// mean). Thread-safe counters only; must not know
// about HTTP types or the engine's internals.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/devices/execution_stats.h"

// Where experts ran since start (filled by the caller from the engine's
// placement and execution statistics).
struct ExpertMetrics {
    std::string device = "none";  // "none", "emulated" or "cuda"
    std::string device_name;      // the GPU's name, or why the CPU serves
    int resident = 0, total = 0;  // resident experts (pinned and cache slots) of all experts
    int cache_slots = 0;          // of the resident, cache slots
    ExecutionStats execution;     // one counter per field of execution_stats_fields()
};

class Metrics {
public:
    // route: a known route ("/v1/chat/completions") or "other".
    void count_request(const std::string& route, int status);
    void add_prompt_tokens(long n_prompt, long n_cached);
    void add_generated_tokens(long n);
    void count_generation(const std::string& finish_reason, double prefill_tok_s, double decode_tok_s);
    void observe_ttft(double seconds);
    // A stream that ended in an error event after its 200 went out, by the
    // status that fits the error (503 shutdown, 500 engine failure).
    void count_stream_error(int status);
    // One beam search: its decode steps, how many (step, layer, expert)
    // triples got c tokens (histogram[c]), and the request's most and mean
    // tokens per routed expert per step.
    void observe_beam_search(int steps, const std::vector<uint64_t>& histogram, int max_tokens, double mean_tokens);

    // Prometheus exposition text; queue state is sampled by the caller.
    std::string render(size_t queue_waiting, bool running) const;
    // The expert-placement part of the exposition.
    static std::string render_experts(const ExpertMetrics& e);

    // Upper bounds of the time-to-first-token buckets, in seconds.
    static constexpr std::array<double, 12> TTFT_BUCKETS = {0.01, 0.025, 0.05, 0.1,  0.25, 0.5,
                                                            1.0,  2.5,   5.0,  10.0, 30.0, 60.0};
    // Upper bounds of the tokens-per-routed-expert-per-step buckets.
    static constexpr std::array<int, 6> EXPERT_TOKEN_BUCKETS = {1, 2, 4, 8, 16, 32};

private:
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, int>, uint64_t> requests_;
    std::map<std::string, uint64_t> generations_;
    std::map<int, uint64_t> stream_errors_;
    uint64_t prompt_tokens_ = 0;
    uint64_t cached_tokens_ = 0;
    uint64_t generated_tokens_ = 0;
    double last_prefill_tok_s_ = 0;
    double last_decode_tok_s_ = 0;
    std::array<uint64_t, TTFT_BUCKETS.size()> ttft_counts_{};  // per bucket, not cumulative
    uint64_t ttft_count_ = 0;
    double ttft_sum_ = 0;
    uint64_t beam_searches_ = 0;
    uint64_t beam_steps_ = 0;
    std::array<uint64_t, EXPERT_TOKEN_BUCKETS.size() + 1> expert_token_counts_{};  // per bucket, last = above
    uint64_t expert_token_sum_ = 0;
    int last_beam_max_ = 0;
    double last_beam_mean_ = 0;
};
