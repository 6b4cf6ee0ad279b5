// The per-layer execution plan: given each routed expert's token count and
// whether it is resident on the device, choose for every non-resident expert
// "run on the CPU" or "copy to the device and run there" so that the layer's
// makespan max(cpu side, device side) is smallest: both sides run at the same
// time. Resident experts always run on the device.
//
// Cost of a side = the sum of its experts' times (each side runs its experts
// one after another; a copy is paid before the copied expert computes).
//
// An expert with no tokens costs nothing and runs nowhere: the planners
// give it DEVICE when resident, CPU otherwise, and the executor skips it.
//
// plan() is polynomial with a proven bound: for the m routed
// non-resident experts of a layer it returns a plan of makespan
//     <= min(per-expert rule, OPT + PLAN_EPSILON * L) <= (1 + PLAN_EPSILON) OPT
// where OPT is the best of the 2^m assignments and L <= OPT the lower bound
// max(D0, (D0 + sum_k min(cpu_k, copy_k)) / 2, max_k min(cpu_k, copy_k))
// (D0: the resident experts' device time). Time O(m^2 / PLAN_EPSILON).
// Sketch: a DP over the CPU side's time on a grid of cells eps L / m wide
// finds, for every number of cells, the smallest device side; the optimal
// plan's CPU costs rounded up fill at most C* / cell + m cells, so the DP
// sees a plan with device side <= D* and CPU side <= C* + eps L. See
// placement/README.md. No allocation per call: scratch is sized in the
// constructor.
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
const char* expert_site_name(ExpertSite site);  // "cpu", "device", "copy"

// The relative bound of LayerPlanner::plan (1 %).
constexpr double PLAN_EPSILON = 0.01;

struct PlanInput {
    int n_tokens = 0;
    bool resident = false;
};

struct PlanCost {
    double cpu_ms = 0;
    double device_ms = 0;
    double makespan_ms() const { return cpu_ms > device_ms ? cpu_ms : device_ms; }
};

// The cost of a given assignment (sites[i] for inputs[i]), priced as given
// (a COPY pays the copy even for zero tokens). std::invalid_argument when
// the spans differ in size, here and in the planners.
PlanCost plan_cost(std::span<const PlanInput> inputs, std::span<const ExpertSite> sites, const LatencyModel& model,
                   double expert_bytes);

// Fiddler's rule, each expert alone: copy when copy + device time beats the
// CPU time for that expert's tokens, regardless of the rest of the layer.
// Without a device everything is CPU.
PlanCost plan_layer_per_expert(std::span<const PlanInput> inputs, std::span<ExpertSite> sites,
                               const LatencyModel& model, double expert_bytes);

class LayerPlanner {
public:
    // max_experts: the most inputs one plan() takes (n_experts of the model).
    LayerPlanner(const LatencyModel& model, double expert_bytes, int max_experts);

    // Writes sites[i] for inputs[i]; returns the plan's cost (what
    // plan_cost gives for those sites). Without a device (model.has_device
    // false) everything is CPU, resident flags included: they are ignored,
    // not an error. More than max_experts inputs: std::invalid_argument.
    PlanCost plan(std::span<const PlanInput> inputs, std::span<ExpertSite> sites);

    const LatencyModel& model() const { return model_; }
    double expert_bytes() const { return expert_bytes_; }

private:
    LatencyModel model_;
    double expert_bytes_;
    int max_experts_;
    std::vector<double> cpu_cost_, dev_cost_;  // per DP item (routed non-resident expert)
    std::vector<int> items_;                   // DP item -> input index
    std::vector<ExpertSite> floor_sites_;      // the per-expert rule's plan
    std::vector<double> best_, cpu_sum_;       // DP table over CPU-time cells
    std::vector<uint8_t> choice_;              // DP back-pointers (item, cell): 1 = CPU
};
