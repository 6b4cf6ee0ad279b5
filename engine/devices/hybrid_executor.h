// HybridExpertExecutor: the MoE layer's expert phase with placement. For
// each layer its CachedPlacement (placement/cached_placement.h) says where
// every routed expert runs: pinned or cached -> the device; otherwise the
// CPU or copy-to-device (into a cache slot when one is admitted, else a
// staging slot), whichever makes the layer's makespan smallest; then which
// extra copies (prefetches of the next layer's predicted experts, fills of
// this layer's CPU-run misses) fit in the copy stream's idle time. It starts
// the device's experts and extra copies, runs the CPU's on the thread pool
// at the same time, then waits for the device's computes. Outputs go to
// each task's own rows, so results never depend on where or when an expert
// ran. Records ExecutionStats (sites, copies, cache and prefetch counts,
// predicted vs measured time) per step. The engine uses it only with a
// device (without one the forward pass calls the CPU executor directly);
// with a null device (tests) every expert runs on the CPU through the
// planner.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/devices/backend.h"
#include "engine/devices/execution_stats.h"
#include "engine/devices/expert_device.h"
#include "engine/devices/expert_executor.h"
#include "placement/cached_placement.h"

// The placement over the model's MoE layers (compacted, as the planner and
// the cache see them) from a residency over all layers: pinned, popularity
// ((n_layers, n_experts) counts of all layers, or empty) and the cache
// configuration.
std::unique_ptr<CachedPlacement> make_cached_placement(const ModelConfig& config, const LatencyModel& model,
                                                       double expert_bytes, const Residency& pinned,
                                                       std::span<const uint64_t> popularity,
                                                       const CachedPlacementConfig& cache);
// What each device slot of `placement` holds now, in model layers (the
// device's upload at start-up).
std::vector<SlotExpert> device_slots(const ModelConfig& config, const CachedPlacement& placement);

class HybridExpertExecutor final : public ExpertExecutor {
public:
    // device may be null (CPU only). placement: over the model's MoE layers
    // (make_cached_placement); its latency model must have has_device set
    // when device is not null, and the device's resident slots must be
    // placement's (device_slots). backend: where the rows live; the CPU
    // experts' rows cross to the host through it.
    HybridExpertExecutor(const ModelConfig& config, Backend& backend, ExpertExecutor& cpu, ExpertDevice* device,
                         std::unique_ptr<CachedPlacement> placement);
    // rows in the backend's memory.
    void run_layer(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                   const NextLayerGuess& next) override;
    const char* name() const override { return device_ ? "hybrid" : "cpu"; }
    bool wants_next_layer() const override { return device_ && placement_->prefetch(); }

    ExpertDevice* device() const { return device_; }
    const LayerPlanner& planner() const { return placement_->planner(); }
    const CachedPlacement& placement() const { return *placement_; }
    // Whether (layer, expert) (model layer) is in a pinned / a cache slot now.
    bool pinned(int layer, int expert) const;
    bool cached(int layer, int expert) const;
    // What ran where since the last clear_step(); the engine merges it per forward pass.
    const ExecutionStats& step() const { return step_; }
    void clear_step() { step_.clear(); }

private:
    Backend& backend_;
    ExpertExecutor& cpu_;
    ExpertDevice* device_;
    std::unique_ptr<CachedPlacement> placement_;
    std::vector<int> moe_index_;   // model layer -> MoE layer (placement's), -1 for a dense layer
    std::vector<int> moe_layers_;  // MoE layer -> model layer
    double expert_bytes_;
    uint64_t now_ = 0;  // layer steps so far (the cache's clock)
    ExecutionStats step_;
    CachedPlacementStats seen_;  // placement stats at the last layer, for the deltas
    // Per-layer scratch, sized once (n_experts).
    std::vector<StepExpert> experts_, predicted_;
    std::vector<StepSite> sites_;
    std::vector<ExpertTask> cpu_tasks_;
    std::vector<DeviceTask> device_tasks_;
    std::vector<SlotCopy> extra_;
};
