// HybridExpertExecutor: the MoE layer's expert phase with placement. For
// each layer it asks the LayerPlanner where every routed expert runs
// (resident -> device; otherwise CPU or copy-to-device, whichever makes the
// layer's makespan smallest), starts the device's experts, runs the CPU's on
// the thread pool at the same time, then waits for the device. Outputs go to
// each task's own rows, so results never depend on where or when an expert
// ran. Records ExecutionStats (sites, copies, predicted vs measured time)
// per step. The engine uses it only with a device (without one the forward
// pass calls the CPU executor directly); with a null device (tests) every
// expert runs on the CPU through the planner.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/devices/backend.h"
#include "engine/devices/execution_stats.h"
#include "engine/devices/expert_device.h"
#include "engine/devices/expert_executor.h"
#include "placement/layer_plan.h"

class HybridExpertExecutor final : public ExpertExecutor {
public:
    // device may be null (CPU only). The planner's model must have
    // has_device set when device is not null. backend: where the rows live;
    // the CPU experts' rows cross to the host through it. expert_bytes: one
    // expert's weights, what a copy moves (cost_expert(...).bytes).
    HybridExpertExecutor(const ModelConfig& config, Backend& backend, ExpertExecutor& cpu, ExpertDevice* device,
                         const LatencyModel& model, double expert_bytes);
    // rows in the backend's memory.
    void run_layer(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks) override;
    const char* name() const override { return device_ ? "hybrid" : "cpu"; }

    ExpertDevice* device() const { return device_; }
    const LayerPlanner& planner() const { return planner_; }
    // What ran where since the last clear_step(); the engine merges it per forward pass.
    const ExecutionStats& step() const { return step_; }
    void clear_step() { step_.clear(); }

private:
    Backend& backend_;
    ExpertExecutor& cpu_;
    ExpertDevice* device_;
    LayerPlanner planner_;
    double expert_bytes_;
    ExecutionStats step_;
    // Per-layer scratch, sized once (n_experts).
    std::vector<PlanInput> inputs_;
    std::vector<ExpertSite> sites_;
    std::vector<ExpertTask> cpu_tasks_, device_tasks_;
    std::vector<uint8_t> device_copy_;
};
