// The per-layer execution plan: given each routed expert's token count and
// whether it is resident on the device, choose for every non-resident expert
// "run on the CPU" or "copy to the device and run there" so that the layer's
// makespan max(cpu side, device side) is smallest: both sides run at the same
// time. Resident experts always run on the device.
//
// Cost of a side = the sum of its experts' times (each side runs its experts
// one after another; a copy is paid before the copied expert computes).
//
// plan() is polynomial: an exact dynamic program over the CPU side's time,
// rounded to a grid fine enough that the result is within 1 % of optimal,
// plus the per-expert rule as a floor (the result is never worse than it).
// No allocation per call: scratch is sized in the constructor.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "placement/latency_model.h"

enum class ExpertSite : uint8_t {
    CPU,     // computed on the CPU from the memory-mapped weights
    DEVICE,  // resident on the device, computed there
    COPY,    // copied to the device for this layer, computed there
};
const char* expert_site_name(ExpertSite site);

struct PlanInput {
    int n_tokens = 0;
    bool resident = false;
};

struct PlanCost {
    double cpu_ms = 0;
    double device_ms = 0;
    double makespan_ms() const { return cpu_ms > device_ms ? cpu_ms : device_ms; }
};

// The cost of a given assignment (sites[i] for inputs[i]).
PlanCost plan_cost(std::span<const PlanInput> inputs, std::span<const ExpertSite> sites, const LatencyModel& model,
                   double expert_bytes);

// Fiddler's rule, each expert alone: copy when copy + device time beats the
// CPU time for that expert's tokens, regardless of the rest of the layer.
PlanCost plan_layer_per_expert(std::span<const PlanInput> inputs, std::span<ExpertSite> sites,
                               const LatencyModel& model, double expert_bytes);

class LayerPlanner {
public:
    // max_experts: the most inputs one plan() takes (n_experts of the model).
    LayerPlanner(const LatencyModel& model, double expert_bytes, int max_experts);

    // Writes sites[i] for inputs[i]; returns the plan's cost. Without a
    // device (model.has_device false) everything is CPU.
    PlanCost plan(std::span<const PlanInput> inputs, std::span<ExpertSite> sites);

    const LatencyModel& model() const { return model_; }
    double expert_bytes() const { return expert_bytes_; }

private:
    LatencyModel model_;
    double expert_bytes_;
    int max_experts_;
    std::vector<double> cpu_cost_, dev_cost_;  // per input
    std::vector<double> best_;                 // DP table
    std::vector<uint8_t> choice_;              // DP back-pointers
};
