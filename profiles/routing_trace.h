// Routing traces: per token, which experts each MoE layer chose and with
// what weights, for prefill and decode, per request -- what `moe-server
// profile --trace` records and `bench cache` replays against the expert
// cache's policies. Owns the in-memory trace, its versioned JSON-lines file
// (documented in profiles/README.md; written atomically, read with a
// validator whose every refusal names the file and line), the profile tables
// a trace sums to, a trace drawn at random from a profile's aggregate
// counts, and the RoutingObserver the forward pass reports to. Plain data
// and files only: never runs a model.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "profiles/profile.h"

inline constexpr const char* TRACE_FORMAT = "moe-server-routing-trace";  // the header's "format"
inline constexpr int TRACE_VERSION = 1;                                  // the "version" this build reads and writes
// Weights are written rounded to this many decimals (they sum to 1 per
// token and layer when the router renormalises; 4 decimals keep a line short).
inline constexpr int TRACE_WEIGHT_DECIMALS = 4;

enum class TracePhase : uint8_t { PREFILL, DECODE };

struct RoutingTrace {
    ModelFingerprint model;
    std::vector<int> layers;  // the MoE layers, ascending (model.moe_layers()); the trace's layer index i is layers[i]
    int top_k = 0;            // model.n_experts_active
    // Per token, in the order they ran:
    std::vector<int> request;       // 0, 1, ...: the request (prompt) it belongs to, non-decreasing
    std::vector<TracePhase> phase;  // prefill tokens of a request, then its decode tokens
    std::vector<int> position;      // its position in the sequence
    std::vector<int> experts;       // (tokens, layers.size(), top_k): the chosen experts, in routing order
    std::vector<float> weights;     // the same shape: their weights

    size_t n_tokens() const { return request.size(); }
    size_t row(size_t token, size_t layer_index) const { return (token * layers.size() + layer_index) * size_t(top_k); }
};

// An empty trace for the model.
RoutingTrace routing_trace_empty(const ModelFingerprint& model);

// The file: a header line, one line per token, an end line (see
// profiles/README.md). routing_trace_write replaces `path` atomically.
void routing_trace_write(const RoutingTrace& trace, const std::filesystem::path& path);
// Reads and validates: format and version, the fingerprint, every token line
// (request non-decreasing, prefill before decode within a request, expert
// ids in range and distinct per layer, weights finite and non-negative),
// and the end line's token count; a file without its end line is refused as
// truncated. MoeError "<path>:<line>: <what>".
RoutingTrace routing_trace_read(const std::filesystem::path& path);

// The trace summed into a profile's tables over all n_layers (dense layers
// stay 0): prefill, decode and counts, and the workload's token counts
// (prefill_tokens, decode_tokens; generated_tokens = decode + requests).
Profile routing_trace_profile(const RoutingTrace& trace);

// The shape of a drawn trace: `requests` requests, each `prefill` prefill
// tokens (positions 0..prefill-1) then `decode` decode tokens.
struct TraceDrawShape {
    int requests = 20;
    int prefill = 64;
    int decode = 64;
};
// The most tokens a drawn trace may hold (requests x (prefill + decode)).
inline constexpr int64_t TRACE_DRAW_MAX_TOKENS = int64_t(1) << 20;

// A trace for `model` drawn from `profile`'s counts (ours, or a Fiddler
// import; profile_check'ed against `model`, `source` naming it in
// messages): for each token and MoE layer independently, top_k distinct
// experts with inclusion probabilities proportional to that layer's counts
// (pi_i = top_k x count_i / layer sum; an expert whose pi would exceed 1 is
// chosen every token and the others share the rest, proportional to their
// counts), by randomised systematic sampling: the experts in a random order,
// one uniform u, the experts whose cumulative pi interval holds u, u+1, ...,
// u+top_k-1. So each expert's share of the drawn routing tends to its share
// of the counts exactly (not just approximately, as successive draws
// without replacement would give). Weights are equal (1 / top_k): the
// counts carry none. The generator is std::mt19937_64 seeded with `seed`
// (its output is fixed by the standard), uniforms from its top 53 bits: the
// same seed gives the same trace everywhere. No per-token order or recency:
// consecutive tokens are independent. MoeError for a profile of another
// model, a MoE layer with fewer than top_k experts that have counts, or a
// shape outside requests >= 1, prefill >= 1, decode >= 0, tokens <=
// TRACE_DRAW_MAX_TOKENS.
RoutingTrace routing_trace_draw(const Profile& profile, const ModelFingerprint& model, const TraceDrawShape& shape,
                                uint64_t seed, const std::string& source);

// What the forward pass reports while a RoutingObserver is set on it.
class RoutingObserver {
public:
    virtual ~RoutingObserver() = default;
    // A forward pass begins over these entries (their positions).
    virtual void on_pass(std::span<const int> positions) = 0;
    // MoE layer `layer` routed the pass's n entries: entry i chose
    // experts[i * k + j] with weights[i * k + j], j < k.
    virtual void on_route(int layer, int n, int k, const int* experts, const float* weights) = 0;
};

// Records every pass into a RoutingTrace: the caller says which request and
// phase the coming passes belong to, and drops an unfinished request.
class RoutingTraceRecorder final : public RoutingObserver {
public:
    explicit RoutingTraceRecorder(const ModelFingerprint& model);

    // The passes from now on belong to request `request` in `phase`.
    void set(int request, TracePhase phase);
    // Forget the tokens of the current request (it did not complete).
    void drop_request();
    void on_pass(std::span<const int> positions) override;
    void on_route(int layer, int n, int k, const int* experts, const float* weights) override;

    const RoutingTrace& trace() const { return trace_; }

private:
    RoutingTrace trace_;
    std::vector<int> layer_index_;  // model layer -> trace layer index, -1 for a dense layer
    int request_ = 0;
    TracePhase phase_ = TracePhase::PREFILL;
    size_t pass_begin_ = 0, request_begin_ = 0;  // token indices
};
