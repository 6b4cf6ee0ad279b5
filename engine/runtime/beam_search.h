// Beam search: the request, its result and the decode loop. All live beams
// run as one batch per step (one forward pass over w tokens of w KV
// sequences), so an MoE layer sees up to w tokens per expert; beams fork
// their sequences with SequenceState::fork (KV: shared blocks, copy-on-write)
// and never copy a whole cache. Scores are sums of log-softmax(raw logits):
// temperature, truncation and penalties do not apply. Knows nothing of HTTP;
// the prompt's prefill belongs to the Session (session.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cpu_kernels/thread_pool.h"
#include "engine/runtime/session.h"
#include "engine/runtime/forward.h"
#include "engine/state/sequence_state.h"
#include "engine/model/model_config.h"
#include "engine/text/tokenizer.h"
#include "profiles/routing_stats.h"

constexpr int BEAM_WIDTH_MAX = 32;

struct BeamRequest {
    std::vector<int> prompt;        // BOS included when wanted
    int beam_width = 4;             // beams kept per step, 1..BEAM_WIDTH_MAX
    float length_penalty = 1.0f;    // alpha >= 0: a finished hypothesis scores logprob / length^alpha
    int num_return = 1;             // best hypotheses returned, 1..beam_width
    int max_tokens = 256;           // generated tokens at most (EOS counted)
    std::vector<std::string> stop;  // a stop string ends a hypothesis (its text cut before it)
    bool ignore_eos = false;        // EOS is then an ordinary token
    bool reuse_prefix = true;       // reuse the KV cache of the previous request's common prefix
    bool continues_prompt = false;  // as GenerateRequest's: a raw completion keeps its first leading space
    // Empty: every token may be chosen. Otherwise only these ids are
    // candidates (tests, constrained decoding); scores stay the model's
    // log-softmax over the full vocabulary.
    std::vector<int> allowed_tokens;
};

struct BeamHypothesis {
    std::vector<int> tokens;  // generated ids (a stop string's tokens included, EOS excluded)
    std::string text;         // generated text, stop string removed
    double logprob = 0;       // sum of the log-probabilities of the scored tokens
    int length = 0;           // scored tokens: tokens.size(), + 1 when EOS ended it
    double score = 0;         // logprob / length^alpha
    FinishReason finish_reason = FinishReason::STOP;
};

// Tokens per routed expert in each decode step (one forward pass over the
// live beams): over the (layer, expert) pairs that got tokens, their most
// and their mean; and how many pairs got c tokens, over all steps.
struct ExpertLoad {
    std::vector<int> step_max;        // per step
    std::vector<double> step_mean;    // per step
    std::vector<uint64_t> histogram;  // [c], c = 0..BEAM_WIDTH_MAX; [0] stays 0
    void add_step(const RoutingStats& step);
    int max() const;      // over all steps
    double mean() const;  // routed (token, expert) pairs / (step, layer, expert) triples that got tokens
};

// What on_step sees after each decode step's forward pass.
struct BeamStep {
    int step = 0;           // 0-based
    int n_live = 0;         // beams in this step's batch
    int n_finished = 0;     // hypotheses kept so far (at most beam_width)
    int length = 0;         // generated tokens of every live beam, this step's included
    size_t state_bytes = 0;  // sequence state (KV-cache blocks) held by the prompt and the live beams
};

struct BeamResult {
    std::vector<BeamHypothesis> hypotheses;           // best first, num_return of them (fewer when fewer finished)
    FinishReason finish_reason = FinishReason::STOP;  // the best's, or CANCELLED
    int n_prompt = 0;
    int n_cached = 0;        // prompt tokens whose KV was reused
    int n_steps = 0;         // decode forward passes
    long n_beam_tokens = 0;  // tokens those passes ran (live beams summed over steps)
    double prefill_ms = 0;
    double decode_ms = 0;  // first to last decode step, selection included
    ExpertLoad expert_load;
    int n_generated() const { return hypotheses.empty() ? 0 : int(hypotheses[0].tokens.size()); }
    double prefill_tok_s() const { return per_second(n_prompt - n_cached, prefill_ms); }
    double steps_per_s() const { return per_second(n_steps, decode_ms); }
    // Tokens of the returned (best) sequence per second of decoding.
    double best_tok_s() const { return per_second(n_generated(), decode_ms); }
};

// A beam request with the prompt, max_tokens, stop strings, ignore_eos and
// reuse_prefix of a sampling request (its sampling parameters do not apply).
BeamRequest beam_request_from(const GenerateRequest& g, int beam_width, float length_penalty, int num_return);

// Throws MoeError naming the field when a parameter is out of range
// (width, penalty, num_return, max_tokens, allowed token ids).
void beam_request_check(const BeamRequest& request, int vocab_size);

// What the decode loop needs from the engine.
struct BeamModel {
    const ModelConfig& config;
    const Tokenizer& tokenizer;
    SequenceState& state;  // sequences first_seq .. first_seq + beam_width - 1 free
    int first_seq;
    // One forward pass; the routed counts of that pass are in step_stats after it.
    std::function<const float*(const Batch&)> forward;
    const RoutingStats& step_stats;
    ThreadPool& pool;  // ranks the beams' candidates in parallel
};

// The decode part of beam search. The prompt's keys and values are in
// sequence prompt_seq (never written), `logits` are its last token's.
// on_step returning false cancels before the next forward pass. Leaves the
// beams' sequences empty.
void beam_search_decode(BeamModel& model, const BeamRequest& request, int prompt_seq, const float* logits,
                        const std::function<bool(const BeamStep&)>& on_step, BeamResult& result);
