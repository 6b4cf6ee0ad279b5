// Session: what runs requests on a Model (engine/model/model.h): the
// sequence state (KV cache) of its context, the forward pass, the expert
// executor and the device experts may run on, the thread pool, the
// replies it generated (for prompt-prefix reuse across chat turns) and the
// statistics. It runs one generation at a time on the calling thread. The
// model is shared and immutable; several sessions may run one model. Knows
// nothing of HTTP or JSON. (llama.cpp splits llama_model / llama_context
// the same way.)
//
// Threads. generate, beam_search and score run on one thread at a time (the
// server's engine thread): they alone touch the sequence state, the forward
// pass and the pool. While one runs, any other thread (the server's HTTP
// threads) may call the rest:
// * model() (every Model method is const and thread-safe), ctx, threads,
//   placement: set at construction, never changed;
// * check_prompt and check_grammar: read only what construction fixed;
// * carry_replies: the remembered replies are guarded by a mutex
//   (engine/runtime/reply_memory.h);
// * routing_counts, execution_stats and expert_slots: copies taken under the
//   statistics mutex.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/errors.h"
#include "engine/devices/device_options.h"
#include "engine/devices/execution_stats.h"
#include "engine/model/cost.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/runtime/reply_memory.h"
#include "engine/runtime/sampler.h"
#include "engine/text/grammar.h"
#include "engine/text/tokenizer.h"
#include "placement/expert_cache.h"

struct SessionOptions {
    int threads = 0;   // 0 = physical cores
    int ctx = 4096;    // sequence-state positions per sequence (capped by max_position_embeddings)
    int max_batch = 512;  // prefill chunk size (tokens per forward pass)
    DeviceOptions device;
    // Predict each MoE layer's experts one layer ahead and count how often
    // the prediction is right (ForwardPass::set_predict_next_layer; the
    // figures are in routing_counts()). Changes no result.
    bool predict_next_layer = false;
};
// Throws OptionError for options no session accepts (a context under 16,
// a batch under 1), before anything is loaded.
void check_session_options(const SessionOptions& options);


struct GenerateRequest {
    std::vector<int> prompt;            // BOS included when wanted
    SamplingParams sampling;
    int max_tokens = 256;               // generated tokens at most (fewer where the context ends)
    std::vector<std::string> stop;      // stop strings, matched across token boundaries
    bool ignore_eos = false;
    int top_logprobs = -1;              // -1 = no logprobs; 0..20 = chosen token + that many alternatives
    bool reuse_prefix = true;           // reuse the KV cache of the previous request's common prefix
    // The reply continues the prompt's text (a raw completion): its first
    // token keeps its leading space ("Once upon" -> " a time"). Otherwise
    // (a chat reply, a prompt of control tokens only) the reply is a text
    // of its own and loses it, as SentencePiece decodes a text's start.
    bool continues_prompt = false;
    // Constrained decoding (Model::grammar): every token the grammar does
    // not allow next is masked before sampling, so the reply parses; an end
    // token only where the text is complete, and the reply ends (STOP) where
    // the grammar allows nothing more. With ignore_eos no end token is
    // allowed: the reply ends there or at max_tokens.
    std::shared_ptr<const Grammar> grammar;
};

// Whether a reply to `prompt` keeps its first token's leading space (see
// GenerateRequest::continues_prompt): it continues the prompt and the prompt
// holds some text (not only BOS or other control tokens).
bool reply_keeps_leading_space(const Tokenizer& tokenizer, std::span<const int> prompt, bool continues_prompt);

// A prompt that leaves no room for a reply. Prompt and reply together hold
// at most ctx tokens: a reply ends (LENGTH) where they fill the context.
struct ContextLengthError : MoeError {
    ContextLengthError(int n_prompt, int ctx);
    int n_prompt;
    int ctx;
};

// n things (tokens, steps) in ms milliseconds, per second (0 when no time was measured).
inline double per_second(double n, double ms) {
    return ms > 0 ? n * 1000.0 / ms : 0;
}

struct TokenEvent {
    int token = -1;
    std::string text;                   // text that may be shown now (may be empty: held back)
    float logprob = 0.0f;               // of the chosen token, when logprobs were asked
    std::vector<std::pair<int, float>> top_logprobs;
};

enum class FinishReason { STOP, LENGTH, CANCELLED };
const char* finish_reason_name(FinishReason reason);

struct GenerateResult {
    FinishReason finish_reason = FinishReason::STOP;
    std::vector<int> tokens;            // generated ids (the stop string's tokens included, EOS excluded)
    std::string text;                   // generated text, stop string removed
    int n_prompt = 0;
    int n_cached = 0;                   // prompt tokens whose KV was reused
    int n_generated = 0;
    double prefill_ms = 0;              // prompt processing (uncached part)
    double ttft_ms = 0;                 // from the call to the first token's event
    double decode_ms = 0;               // after the first token
    double prefill_tok_s() const { return per_second(n_prompt - n_cached, prefill_ms); }
    double decode_tok_s() const { return per_second(n_generated - 1, decode_ms); }
};

// Beam search (engine/runtime/beam_search.h).
struct BeamRequest;
struct BeamResult;
struct BeamStep;

class RoutingObserver;  // profiles/routing_trace.h

// Counts of tokens routed to each (layer, expert), since start and for the last request.
struct RoutingCounts {
    int n_layers = 0, n_experts = 0;
    std::vector<uint64_t> total;        // (n_layers, n_experts)
    std::vector<uint64_t> last;         // (n_layers, n_experts)
    // With SessionOptions::predict_next_layer, per layer: expert choices
    // predicted one layer ahead, and those the layer then routed to.
    std::vector<uint64_t> predicted_total, predicted_right_total;  // (n_layers)
    std::vector<uint64_t> predicted_last, predicted_right_last;    // (n_layers)
};

class Session {
public:
    // Sets up the device and the sequence state of one context for model;
    // throws MoeError with a one-line reason.
    Session(std::shared_ptr<const Model> model, const SessionOptions& options);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    const Model& model() const;
    const std::shared_ptr<const Model>& shared_model() const;
    int ctx() const;      // usable positions per sequence
    int threads() const;

    // The one check of a prompt: refuses one that is empty or holds an id
    // outside the vocabulary (MoeError), or leaves no room for a reply in
    // the context (ContextLengthError). generate() and beam_search() call
    // it; a server calls it before queueing, to answer at once. Reads only
    // what construction fixed: any thread may call it while a request runs.
    void check_prompt(const std::vector<int>& prompt) const;
    // The same for a request's grammar: starts its matcher and works out the
    // first token's mask as generate() would (the masks are cached in the
    // Grammar, so the generation reuses the work). Throws GrammarError for a
    // grammar that cannot be matched from the start (too ambiguous, an end
    // token as a <[piece]>, no first token); one that turns out too
    // ambiguous later throws it from generate(). Any thread may call it.
    void check_grammar(const GenerateRequest& request) const;

    // A prompt (a rendered chat: chat/model_chat.h) with each span that
    // encodes a reply this session generated carried by the ids it
    // generated, so the sequence state of the turn that produced it is
    // reused; the spans move with their ids (ReplyMemory::splice). Prefix
    // reuse is the session's own business: every finished reply of
    // generate() and beam_search() is remembered (the newest
    // ReplyMemory::MAX_REPLIES).
    std::vector<int> carry_replies(std::vector<int> ids, std::span<ReplySpan> replies) const;

    // Runs one request on the calling thread. on_token is called for every
    // generated token; returning false cancels (finish CANCELLED) before the
    // next forward pass. Throws as check_prompt() does. A finished reply
    // (not cancelled) is remembered for later turns' carry_replies.
    GenerateResult generate(const GenerateRequest& request, const std::function<bool(const TokenEvent&)>& on_token);

    // Beam search on the calling thread: the prompt is prefilled once (with
    // prefix reuse), then all live beams decode as one batch per step.
    // on_step is called after each step's forward pass; returning false
    // cancels. Throws MoeError for bad parameters (named), and as
    // check_prompt() does. Afterwards the state holds the prompt (for reuse);
    // the best hypothesis of a search that finished is remembered as generate()'s reply is.
    BeamResult beam_search(const BeamRequest& request, const std::function<bool(const BeamStep&)>& on_step);

    // Log-likelihood scoring for `perplexity`: returns the sum of -log p over
    // tokens[1..] given their prefixes, processed in windows of `window`
    // tokens that overlap by one (every token after the first scored once).
    // With chunks, llama.cpp's protocol instead: the tokens cut into whole
    // chunks of `window` (the remainder dropped), each chunk's first token
    // replaced by BOS when the tokenizer adds one (Tokenizer::prompt_bos),
    // and only the predictions of its second half scored (tokens window/2 + 1
    // .. window - 1 of each chunk). Throws OptionError (SCORE_WINDOW,
    // SCORE_CHUNKS) for a window under 2 tokens or a text shorter than one
    // chunk.
    struct Score {
        double nll_sum = 0;
        long n_scored = 0;
    };
    Score score(const std::vector<int>& tokens, int window, bool chunks = false);

    RoutingCounts routing_counts() const;
    // Every forward pass from now on reports its routing to observer (null:
    // none). Set it between requests, on the thread that runs them; it must
    // outlive its use (`profile --trace`'s recorder).
    void set_routing_observer(RoutingObserver* observer);

    const PlacementInfo& placement() const;
    // Where experts ran: since start, and for the last request. Without a
    // device, built from the routing counts when called (nothing is timed).
    struct Execution {
        ExecutionStats total, last;
    };
    Execution execution_stats() const;
    // Where each expert's weights are now, (n_layers, n_experts): EXPERT_CPU
    // (only in host memory), EXPERT_PINNED or EXPERT_CACHED on the device
    // (a cache slot's expert changes as the cache evicts). As of the last
    // forward pass; all EXPERT_CPU without a device.
    static constexpr uint8_t EXPERT_CPU = 0, EXPERT_PINNED = 1, EXPERT_CACHED = 2;
    std::vector<uint8_t> expert_slots() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};
