// Engine: the library entry point the CLI and the server use. It owns a
// loaded model (weights, tokenizer, chat template), the KV cache, the forward
// state, the expert executor, the thread pool and the chat replies it
// generated (for prompt-prefix reuse across chat turns), and runs one
// generation at a time on the calling thread. It knows nothing of HTTP or JSON.
//
// Threads. generate, beam_search and score run on one thread at a time (the
// server's engine thread): they alone touch the KV cache, the forward state
// and the pool. While one runs, any other thread (the server's HTTP threads)
// may call the rest:
// * config, ctx, threads, model_id, load_warning, placement: set at load,
//   never changed;
// * tokenizer, chat_template and the Jinja template: const objects set at
//   load, whose const methods are thread-safe (a Detokenizer is per caller);
// * check_prompt: reads only what loading fixed;
// * chat_prompt and remember_reply: the remembered replies are guarded by a
//   mutex (engine/runtime/chat_replies.h);
// * routing_counts and execution_stats: copies taken under the statistics mutex.
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
#include "engine/devices/execution_stats.h"
#include "engine/model/cost.h"
#include "engine/model/model_config.h"
#include "engine/runtime/sampler.h"
#include "engine/text/chat_template.h"
#include "engine/text/grammar.h"
#include "engine/text/tool_calls.h"
#include "engine/text/tokenizer.h"
#include "placement/expert_cache.h"

struct ModelWeights;  // engine/model/weights.h

// Where the model runs: a CUDA device when there is one (dense weights, KV
// cache and the popular experts on it), else the CPU; or the emulated device
// as a dry run of placement.
struct DeviceOptions {
    // CUDA: the device (-1 = none: CPU only) and the memory moe-server may
    // use on it in bytes (0 = its free memory at load). Without CUDA or a
    // device the CPU serves, said in one line.
    int gpu_device = 0;  // GPU_DEVICE_DEFAULT (engine/devices/calibration_key.h)
    double gpu_memory_bytes = 0;
    // Instead of a size: this share (0..1) of all experts resident, the
    // budget being what they, the staging slots and the dense part need.
    double gpu_expert_share = 0;
    // --gpu-device or --gpu-memory was given: a GPU that cannot be used is
    // an error (exit 2) instead of a fallback to the CPU.
    bool gpu_required = false;
    // Dry run of placement on an emulated device (a test double that computes
    // on the CPU, see engine/devices/emulated_device.h): its memory in bytes, or the
    // share of all experts it holds (0..1). Both 0 = no device.
    double emulate_gpu_bytes = 0;
    double emulate_gpu_expert_share = 0;
    // Popularity profile for the static plan (profiles/README.md); empty =
    // spread the device's experts evenly over layers.
    std::filesystem::path profile;
    // The dynamic cache (placement/cached_placement.h): no policy = the
    // static plan (every device expert pinned); with one, cache_share of the
    // device's experts are cache slots (the rest pinned) managed by it, per
    // layer or as one pool. prefetch: copy the next layer's predicted
    // experts into cache slots in the copy stream's idle time (needs a
    // policy). The defaults are the best measured (placement/README.md "The
    // cache in the executor"): LFU over one pool with prefetch.
    std::optional<CachePolicy> cache_policy = CachePolicy::LFU;
    double cache_share = 0.25;
    CacheScope cache_scope = CacheScope::GLOBAL;
    bool prefetch = true;
    // The placement flags the user gave (--profile, --cache-policy,
    // --cache-share, --cache-scope, --prefetch), in order: they place experts
    // on a device, so without one (no GPU, --gpu-device none, a dense model)
    // the load fails naming the first, as it does for a profile set here.
    std::vector<std::string> placement_flags;
};

struct EngineOptions {
    std::filesystem::path model_dir;  // a model folder, or synth:PRESET[:SEED] (engine/model/model_source.h)
    int threads = 0;   // 0 = physical cores
    int ctx = 4096;    // KV-cache positions per sequence (capped by max_position_embeddings)
    int max_batch = 512;  // prefill chunk size (tokens per forward pass)
    DeviceOptions device;
    // Predict each MoE layer's experts one layer ahead and count how often
    // the prediction is right (ForwardPass::set_predict_next_layer; the
    // figures are in routing_counts()). Changes no result.
    bool predict_next_layer = false;
    // model_dir's weights, already loaded (model_source_weights of the same
    // source): the engine reads them and loads nothing, so several engines
    // made one after another share one copy (`bench suite`). Null: the
    // engine loads them.
    std::shared_ptr<const ModelWeights> weights = nullptr;
};

// The device experts may run on. NONE: every expert on the CPU, with no
// planner, timing or execution bookkeeping on the way.
enum class DeviceKind : uint8_t { NONE, EMULATED, CUDA };
const char* device_kind_name(DeviceKind kind);  // "none", "emulated", "cuda"

// The static plan of which experts are resident: NONE without a device.
enum class PlanKind : uint8_t { NONE, EVEN, POPULARITY };
const char* plan_kind_name(PlanKind kind);  // "none", "even", "popularity"

// Where experts live: the device, its budget and the static plan. Facts
// only: the words for people are the caller's.
struct PlacementInfo {
    DeviceKind device = DeviceKind::NONE;
    std::string device_name;          // CUDA: "NVIDIA H100 80GB HBM3 (cuda:0)"; NONE: why the CPU serves
    int staging_slots = 0;            // device slots copied experts run from
    std::string copy_source;          // CUDA: how copies reach the device (pinned staging or registered mapping, measured)
    double budget_bytes = 0;          // device memory given to moe-server (GiB mode) or to experts (share mode)
    double dense_bytes = 0;           // non-expert weights a GPU would hold
    double kv_bytes = 0;              // the sequence state on the device (the fp32 KV cache; sequence_state_bytes)
    double activation_bytes = 0;      // activations, expert rows, batch metadata (CUDA)
    double margin_bytes = 0;          // workspace and fragmentation (emulated: activations too)
    double expert_bytes = 0;          // one expert
    int capacity = 0;                 // resident experts: pinned plus cache slots
    int cache_slots = 0;              // of those, cache slots (0: the static plan)
    std::string cache_policy;         // "static", "lru", "lfu", "score"
    bool prefetch = false;            // next-layer prefetch into cache slots
    PlanKind plan = PlanKind::NONE;
    std::string profile;              // the profile the plan came from
    double expected_hit_rate = -1;    // on the profile's workload; -1 without a profile
    std::string latency_source;       // where the latency model came from
    std::string warning;              // non-fatal (an unusable cached calibration); empty when none
    int n_layers = 0, n_experts = 0;
    std::vector<uint8_t> resident;  // (n_layers, n_experts) pinned at load (cache slots change: Engine::expert_slots)
};

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
    // Constrained decoding (Engine::grammar): every token the grammar does
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
    // With EngineOptions::predict_next_layer, per layer: expert choices
    // predicted one layer ahead, and those the layer then routed to.
    std::vector<uint64_t> predicted_total, predicted_right_total;  // (n_layers)
    std::vector<uint64_t> predicted_last, predicted_right_last;    // (n_layers)
};

class Engine {
public:
    // Loads everything; throws MoeError with a one-line reason.
    explicit Engine(const EngineOptions& options);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    const ModelConfig& config() const;
    // Bytes per weight of the loaded matrices (bf16: 2), for costs and rooflines.
    WeightFormat weight_format() const;
    const Tokenizer& tokenizer() const;
    const ChatTemplate& chat_template() const;
    std::string model_id() const;       // the model folder's name, or synth:PRESET:SEED
    int ctx() const;                    // usable positions per sequence
    int threads() const;
    // Non-fatal notes from loading (e.g. "no chat_template: using Mistral's"); empty when none.
    const std::string& load_warning() const;

    // The one check of a prompt: refuses one that is empty or holds an id
    // outside the vocabulary (MoeError), or leaves no room for a reply in
    // the context (ContextLengthError). generate() and beam_search() call
    // it; a server calls it before queueing, to answer at once. Reads only
    // what loading fixed: any thread may call it while a request runs.
    void check_prompt(const std::vector<int>& prompt) const;
    // The same for a request's grammar: starts its matcher and works out the
    // first token's mask as generate() would (the masks are cached in the
    // Grammar, so the generation reuses the work). Throws GrammarError for a
    // grammar that cannot be matched from the start (too ambiguous, an end
    // token as a <[piece]>, no first token); one that turns out too
    // ambiguous later throws it from generate(). Any thread may call it.
    void check_grammar(const GenerateRequest& request) const;

    // Chat: messages rendered with the model's chat template, once (BOS
    // first, ending where the reply begins); each assistant message that is a
    // reply this engine generated (remember_reply) is carried by the ids it
    // generated, so the KV cache of the turn that produced it is reused.
    // Throws MoeError as ChatTemplate::render does.
    ChatPrompt chat_prompt(std::span<const ChatMessage> messages) const;
    // A chat request's prompt. A model with a Jinja chat_template
    // (tokenizer_config.json, chat_template.jinja, a GGUF's
    // tokenizer.chat_template) is rendered by it as transformers does, and
    // the text tokenized with the model's rules: special tokens the template
    // writes become their ids (SpecialTokens::PARSE), no BOS is added (the
    // template writes its own). The prompt is then one span (message -1): no
    // reply is carried by its generated ids; the KV prefix is still reused.
    // Exception: a Mistral template (the built-in family detection knows it)
    // renders a plain conversation (no tools, tool messages or tool calls,
    // no extra variables) with the built-in renderer, whose ids are
    // mistral-common's; the Jinja template renders the rest. A model
    // without a template uses the built-in renderer (chat_prompt above).
    // Throws ChatTemplateError for a template error, MoeError as
    // ChatTemplate::render does.
    ChatPrompt chat_prompt(const ChatInput& chat) const;
    // The prompt text of chat_prompt(chat) (for /apply-template): the Jinja
    // rendering, or the built-in renderer's text with special tokens spelled
    // out.
    std::string chat_text(const ChatInput& chat) const;
    // How chats are rendered, for the UI: "jinja (tokenizer_config.json)",
    // "jinja (GGUF tokenizer.chat_template)", "mistral (built-in; jinja
    // (tokenizer_config.json) for tools)", "chatml (built-in)" ...
    std::string chat_template_name() const;
    // Whether the model has a Jinja chat template (which alone renders tools).
    bool has_jinja_template() const;
    // How the template's tool calls look in a reply (engine/text/tool_calls.h;
    // the NONE row without a Jinja template or a known format), and its
    // trigger's control-token id (-1: the trigger is text).
    const ToolCallFormat& tool_call_format() const;
    int tool_call_trigger_token() const;

    // A GBNF grammar (engine/text/grammar.h) parsed against this model's
    // vocabulary, for GenerateRequest::grammar. The newest
    // GRAMMAR_CACHE_SIZE grammars are kept by their text, with the token
    // masks their generations computed, so a grammar used again (the JSON
    // one, a schema a client repeats) starts warm. source names the grammar
    // in errors. Throws MoeError for a bad grammar. Thread-safe.
    std::shared_ptr<const Grammar> grammar(std::string_view gbnf, std::string_view source = "grammar") const;
    static constexpr size_t GRAMMAR_CACHE_SIZE = 16;
    // A finished chat reply, its text as sent to the client and the ids
    // generated for it, for later turns' chat_prompt (the newest
    // ChatReplies::MAX_REPLIES are kept).
    void remember_reply(const std::string& text, const std::vector<int>& tokens);

    // Runs one request on the calling thread. on_token is called for every
    // generated token; returning false cancels (finish CANCELLED) before the
    // next forward pass. Throws as check_prompt() does.
    GenerateResult generate(const GenerateRequest& request, const std::function<bool(const TokenEvent&)>& on_token);

    // Beam search on the calling thread: the prompt is prefilled once (with
    // prefix reuse), then all live beams decode as one batch per step.
    // on_step is called after each step's forward pass; returning false
    // cancels. Throws MoeError for bad parameters (named), and as
    // check_prompt() does. Afterwards the cache holds the prompt (for reuse).
    BeamResult beam_search(const BeamRequest& request, const std::function<bool(const BeamStep&)>& on_step);

    // Log-likelihood scoring for `perplexity`: returns the sum of -log p over
    // tokens[1..] given their prefixes, processed in windows of `window`
    // tokens that overlap by one (every token after the first scored once).
    // With chunks, llama.cpp's protocol instead: the tokens cut into whole
    // chunks of `window` (the remainder dropped), each chunk's first token
    // replaced by BOS when the tokenizer adds one (Tokenizer::prompt_bos),
    // and only the predictions of its second half scored (tokens window/2 + 1
    // .. window - 1 of each chunk).
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
