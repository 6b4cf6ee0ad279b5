// CachedPlacement: the per-layer placement decisions of a device whose
// expert memory is pinned slots plus a dynamic cache (expert_cache.h), as
// one piece of logic that the hybrid executor runs and the replay
// simulator (cache_replay.h) replays, so both move the same bytes. Per
// layer step it looks up the routed experts (pinned and cached ones are
// resident for the planner), plans the rest with LayerPlanner (CPU or copy),
// admits the copied ones into cache slots (never evicting an expert of the
// same step), and then, while the copy stream is predicted idle at that
// layer's end, adds extra copies: the next layer's predicted experts
// (prefetch) and this layer's CPU-run misses (fills). Without a policy (the static plan) there
// are no cache slots and no extra copies. Device slots are numbered pinned
// first ((layer, expert) order), then cache slots. Keys and layers are the
// caller's (the MoE layers, compacted). Sized in the constructor: no call
// allocates. See placement/README.md "The cache in the executor".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "placement/expert_cache.h"
#include "placement/latency_model.h"
#include "placement/layer_plan.h"
#include "placement/residency.h"

// One routed expert of a layer step and its tokens.
struct StepExpert {
    int expert = 0;
    int n_tokens = 0;
};

// Where a routed expert runs. slot: DEVICE, its device slot (pinned or
// cache); COPY, the device slot it is copied into (a cache slot), or -1
// for a staging slot (not admitted); CPU, -1.
struct StepSite {
    ExpertSite site = ExpertSite::CPU;
    int slot = -1;
};

// A copy beside the layer's own, into a cache slot: a prefetch of the next
// layer's predicted expert, or a fill of this layer's CPU-run miss.
struct ExtraCopy {
    int layer = 0, expert = 0;
    int slot = 0;  // device slot
    bool prefetch = false;
};

struct CachedPlacementConfig {
    std::optional<CachePolicy> policy;  // none: the static plan (no cache slots)
    int cache_slots = 0;                // with a policy
    CacheOptions options;
    bool prefetch = false;  // extra_copies takes the next layer's predicted experts (needs a policy)
};

// What the cache did, summed since construction.
struct CachedPlacementStats {
    CacheStats cache;                // lookups of routed experts (pinned and cache hits, misses), admissions, evictions
    uint64_t copies = 0;             // planned copies (into a cache or a staging slot)
    uint64_t fills = 0;              // extra copies of CPU-run misses
    uint64_t prefetches = 0;         // extra copies of predicted experts
    uint64_t prefetches_useful = 0;  // prefetched experts the layer then routed to (hit before anything else)
    std::vector<uint64_t> layer_prefetches, layer_prefetches_useful;  // (n_layers)
};

class CachedPlacement {
public:
    // pinned: the experts that never move; popularity: (n_layers,
    // n_experts) counts (the score policy's popularity and the cache's warm
    // start, the next most popular after the pinned; may be empty: then the
    // cache starts empty and the score is recency alone).
    // std::invalid_argument for shapes that differ, a policy of Belady with
    // prefetch, prefetch without a policy, or negative slots.
    CachedPlacement(const LatencyModel& model, double expert_bytes, const Residency& pinned,
                    std::span<const uint64_t> popularity, const CachedPlacementConfig& config);

    int n_layers() const { return pinned_.n_layers(); }
    int n_experts() const { return pinned_.n_experts(); }
    int n_pinned() const { return int(pinned_slot_key_.size()); }
    int cache_slots() const { return cache_ ? cache_->cache_slots() : 0; }
    int n_slots() const { return n_pinned() + cache_slots(); }
    // The key (layer * n_experts + expert) a device slot holds now, -1 when empty.
    int slot_key(int slot) const;
    // The device slot of a resident (pinned or cached) expert, -1 otherwise.
    int device_slot(int layer, int expert) const;
    bool pinned(int layer, int expert) const { return pinned_.resident(layer, expert); }
    bool cached(int layer, int expert) const { return cache_ && cache_->cached(layer, expert); }
    bool prefetch() const { return config_.prefetch; }
    const CachedPlacementConfig& config() const { return config_; }
    const LayerPlanner& planner() const { return planner_; }
    // The cache (Belady's first_use before a replay); null without a policy.
    ExpertCache* cache() { return cache_ ? &*cache_ : nullptr; }

    // Plans layer step `now` (advance once per forward pass and layer,
    // non-decreasing) of `layer`: experts distinct, at most n_experts;
    // sites[i] for experts[i]. future[i]: the expert's cache_future (Belady;
    // empty = unknown). Returns the plan's cost.
    PlanCost plan(int layer, std::span<const StepExpert> experts, uint64_t now, std::span<StepSite> sites,
                  std::span<const uint64_t> future = {});

    // After plan(): extra copies, each started while the copy stream is
    // predicted idle at that layer's end (the copies spilled over from
    // earlier layers plus this layer's, against its predicted makespan; so
    // at most one copy's time runs past the layer): first the predicted
    // experts of next_layer (with prefetch; most tokens first; -1 or empty:
    // none), then the layer's CPU-run misses (most valuable to the policy
    // first), each admitted into a cache slot (an expert the layer or the
    // prediction uses is never the victim). The span lives until the next
    // call.
    std::span<const ExtraCopy> extra_copies(int next_layer, std::span<const StepExpert> predicted, uint64_t now);

    const CachedPlacementStats& stats() const { return stats_; }

private:
    int key(int layer, int expert) const { return layer * n_experts() + expert; }
    bool admit_into(int layer, int expert, std::span<const int> protect, uint64_t now, int& slot);

    CachedPlacementConfig config_;
    Residency pinned_;
    std::optional<ExpertCache> cache_;
    LayerPlanner planner_;
    double copy_ms_;
    std::vector<int> pinned_slot_, pinned_slot_key_;  // key -> pinned slot (-1); slot -> key
    std::vector<uint8_t> prefetched_;                 // per cache slot: filled by a prefetch, not yet looked up
    CachedPlacementStats stats_;
    // The last plan()'s layer, the copy stream's predicted backlog at its end
    // (negative: idle for that long), routed experts and CPU-run misses.
    int last_layer_ = -1;
    double end_backlog_ms_ = 0;
    double spill_ms_ = 0;  // copy-stream work predicted to run on past the last layer's end
    std::vector<int> routed_, cpu_missed_;
    std::vector<int> order_, protect_;  // scratch: experts in the order handled; the prediction
    std::vector<int> index_of_;         // scratch: expert -> its index in plan()'s input
    // Scratch, sized once.
    std::vector<PlanInput> inputs_;
    std::vector<ExpertSite> sites_;
    std::vector<ExtraCopy> extra_;
};
