// ExecutionStats: where each routed expert ran (CPU, resident on the device,
// copied to the device), how many bytes the copies moved, and the predicted
// against the measured time of each MoE layer's expert phase. Filled by the
// HybridExpertExecutor when there is a device, merged by the engine per
// request and in total; without a device the engine builds them from the
// routing counts when asked (the CPU-only path plans and times nothing).
// execution_stats_fields() describes every figure once (name, help, value):
// /metrics, /v1/experts, the CLI's stats line and the bench walk it instead
// of naming members. Bookkeeping only: no words beyond those names and help.
#pragma once
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "placement/layer_plan.h"

struct ExecutionStats {
    int n_layers = 0, n_experts = 0;
    // (n_layers, n_experts) tokens computed per site, indexed by ExpertSite.
    std::vector<uint64_t> tokens[EXPERT_SITE_COUNT];
    uint64_t runs[EXPERT_SITE_COUNT] = {};  // expert executions per site
    uint64_t copy_bytes = 0;                // weights copied to the device (the layers' copies and the extra ones)
    uint64_t layers = 0;                    // MoE layers executed
    // The dynamic cache (placement/cached_placement.h): runs from a cache
    // slot (part of runs[DEVICE]), cached experts evicted, extra copies of
    // CPU-run misses (fills) and of predicted experts (prefetches), and the
    // prefetched experts the next layer then routed to.
    uint64_t cache_hits = 0, cache_evictions = 0, cache_fills = 0;
    uint64_t prefetch_copies = 0, prefetch_useful = 0;
    // The same two per layer (n_layers): prefetches made for the layer, and
    // those it then routed to.
    std::vector<uint64_t> layer_prefetch_copies, layer_prefetch_useful;
    // Sums over layers, in ms: the plan's prediction of each side and of the
    // makespan, and the measured wall time of each side and of the phase.
    // Without a device: all 0.
    double predicted_cpu_ms = 0, predicted_device_ms = 0, predicted_ms = 0;
    double measured_cpu_ms = 0, measured_device_ms = 0, measured_ms = 0;
    double planner_ms = 0;  // wall time of LayerPlanner::plan, summed over layers
    // The same per layer (n_layers each): what the plan predicted and what
    // was measured for each side, summed over the layer's executions.
    std::vector<double> layer_predicted_cpu_ms, layer_predicted_device_ms;
    std::vector<double> layer_measured_cpu_ms, layer_measured_device_ms;

    ExecutionStats() = default;
    ExecutionStats(int n_layers, int n_experts);
    void clear();
    void merge(const ExecutionStats& other);     // this += other (same shape)
    void subtract(const ExecutionStats& other);  // this -= other, an earlier state of this

    uint64_t tokens_at(ExpertSite site, int layer, int expert) const {
        return tokens[int(site)][size_t(layer) * n_experts + expert];
    }
    uint64_t total_tokens(ExpertSite site) const;
    uint64_t total_tokens() const;
    // Share of routed tokens whose expert was resident on the device.
    double hit_rate() const;
    // Share of routed tokens computed on the device (resident or copied).
    double device_share() const;
    // The layer and side whose predicted time is furthest from the
    // measured one: |predicted - measured| in ms; layer -1 when none ran.
    struct WorstLayer {
        int layer = -1;
        bool device = false;
        double predicted_ms = 0, measured_ms = 0;
    };
    WorstLayer worst_layer() const;

private:
    template <class Op>
    void combine(const ExecutionStats& other, Op op);  // this = op(this, other), member by member
};

// One figure of ExecutionStats, as every renderer names and reads it.
struct ExecutionField {
    // Its value: a count per site; one count (of things or of bytes); one
    // time in ms; or a time in ms per layer, with its side ("cpu",
    // "device") and kind ("predicted", "measured").
    using PerSite = uint64_t (*)(const ExecutionStats&, ExpertSite);
    struct Count {
        uint64_t ExecutionStats::*member;
        bool bytes;
    };
    using Ms = double ExecutionStats::*;
    struct PerLayer {
        std::vector<double> ExecutionStats::*ms;
        const char* side;
        const char* kind;
    };
    // A count per layer, with its kind ("copies", "useful").
    struct PerLayerCount {
        std::vector<uint64_t> ExecutionStats::*counts;
        const char* kind;
    };

    const char* key;     // JSON key: "runs", "copy_bytes", "predicted_cpu_ms"
    const char* label;   // words in a text line: "runs", "copied", "cpu predicted"
    const char* metric;  // Prometheus counter: "moe_expert_runs_total" (the per-layer fields of a kind share one)
    const char* help;    // its HELP text
    std::variant<PerSite, Count, Ms, PerLayer, PerLayerCount> value;
};

// Every figure, in output order: the per-site counts, the other counts and
// the times, then the per-layer times (cpu predicted, cpu measured, device
// predicted, device measured) and the per-layer prefetch counts (copies,
// useful). Every member of ExecutionStats but its shape, tokens and runs
// (the per-site figures' source) is one field's.
std::span<const ExecutionField> execution_stats_fields();
