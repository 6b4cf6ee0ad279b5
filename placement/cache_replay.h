// The replay simulator behind `moe-server bench cache`: a routing trace
// (profiles/routing_trace.h) run through the per-layer planner and the
// expert cache (expert_cache.h) as the hybrid executor would run it, priced
// with the latency model; nothing is computed or copied. A step is one
// request's prefill (its tokens in one batch) or one decode token; each MoE
// layer of a step looks up its routed experts, plans the misses (CPU or
// copy, LayerPlanner), and with a cache policy admits every miss into a
// cache slot (the planner's copy lands there; a miss the planner ran on the
// CPU is copied in beside it on the copy stream). See placement/README.md
// "Replaying a trace".
#pragma once
#include <cstdint>
#include <optional>
#include <span>

#include "placement/expert_cache.h"
#include "placement/latency_model.h"
#include "profiles/routing_trace.h"

struct CacheReplayConfig {
    // No policy: today's static placement (capacity experts pinned by
    // popularity, no cache slots).
    std::optional<CachePolicy> policy;
    int capacity = 0;     // experts the device holds: pinned + cache slots
    int cache_slots = 0;  // of those, cache slots (ignored without a policy)
    CacheOptions options;
};

struct CacheReplayResult {
    CacheStats cache;  // per (step, layer, routed expert): pinned / cached hits, misses
    uint64_t decode_lookups = 0, decode_hits = 0;
    uint64_t routed = 0, routed_hits = 0;  // (token, layer, expert) pairs, and those whose expert was resident
    uint64_t copies = 0;                   // experts copied to the device (planner copies + cache fills)
    double bytes_copied = 0;
    double expert_ms = 0;         // all steps: max(sum of layer makespans, copy-stream time) per step
    double decode_expert_ms = 0;  // decode steps only
    uint64_t steps = 0, decode_steps = 0;

    double hit_rate() const { return cache.hit_rate(); }
    double decode_hit_rate() const { return decode_lookups ? double(decode_hits) / double(decode_lookups) : 0.0; }
    double token_hit_rate() const { return routed ? double(routed_hits) / double(routed) : 0.0; }
    double decode_expert_ms_per_token() const { return decode_steps ? decode_expert_ms / double(decode_steps) : 0.0; }
};

// Replays `trace` over its MoE layers. popularity: the profile's counts
// over the same MoE layers ((layers.size(), n_experts), as table_rows gives
// them): the pinned experts are its capacity - cache_slots most popular, and
// the cache slots start warm with the next most popular (so a cache never
// starts below the static plan). Belady is told each access's future from
// the trace itself. std::invalid_argument for a popularity of another
// shape or cache slots outside [0, capacity].
CacheReplayResult cache_replay(const RoutingTrace& trace, std::span<const uint64_t> popularity,
                               const CacheReplayConfig& config, const LatencyModel& model, double expert_bytes);
