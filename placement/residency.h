// Residency and the static plan: which experts live on the device. The
// static plan fills a device's expert capacity in descending popularity
// (from a profile's counts), or spreads it evenly over layers without one;
// a seeded random plan is the baseline the benchmarks compare with. Pure
// logic over plain numbers: no tensors, no CUDA, no files.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "placement/latency_model.h"

class Residency {
public:
    Residency() = default;
    Residency(int n_layers, int n_experts);

    bool resident(int layer, int expert) const { return flags_[size_t(layer) * n_experts_ + expert] != 0; }
    void set(int layer, int expert, bool on);
    int n_resident() const;           // all layers
    int n_resident(int layer) const;  // one layer
    int n_layers() const { return n_layers_; }
    int n_experts() const { return n_experts_; }

private:
    int n_layers_ = 0, n_experts_ = 0;
    std::vector<uint8_t> flags_;  // (n_layers, n_experts)
};

// How many experts fit on the device: (budget - dense - kv - margin) /
// expert_bytes, minus `staging` slots kept free for copied experts; never
// negative, never more than n_layers * n_experts. Callers pass the device's
// staging slots, the same number as its LatencyModel::staging_slots (the
// planner prices the pipeline with that many); nothing here assumes one.
struct DeviceBudget {
    double budget_bytes = 0;              // the device memory given to moe-server
    double dense_bytes = 0;               // non-expert weights (attention, norms, router, embeddings, lm_head)
    double kv_bytes = 0;                  // KV cache
    double margin_bytes = 0;              // activations, workspace, fragmentation
    double expert_bytes = 0;              // one expert's w1 + w3 + w2
    int staging = DEFAULT_STAGING_SLOTS;  // slots a copied (non-resident) expert runs from
};
int expert_capacity(const DeviceBudget& budget, int n_layers, int n_experts);

// counts: (n_layers, n_experts) tokens routed, row-major. Most popular first;
// ties broken by (layer, expert) so a plan never depends on sort stability.
// The (layer, expert) keys (layer * n_experts + expert) of all experts, most
// popular first, ties by key: the order static_plan_popularity fills, and
// the dynamic cache's warm start continues (placement/expert_cache.h).
std::vector<int> popularity_order(std::span<const uint64_t> counts, int n_layers, int n_experts);
Residency static_plan_popularity(std::span<const uint64_t> counts, int n_layers, int n_experts, int capacity);
// capacity / n_layers experts per layer (the first capacity % n_layers layers
// get one more), experts 0, 1, ... of each layer.
Residency static_plan_even(int n_layers, int n_experts, int capacity);
// capacity experts drawn uniformly without replacement, reproducible from seed.
Residency static_plan_random(int n_layers, int n_experts, int capacity, uint64_t seed);

// Share of routed tokens whose expert is resident under `counts` (any
// workload, not only the one the plan came from). 0 when counts are all zero.
double hit_rate(const Residency& residency, std::span<const uint64_t> counts);
