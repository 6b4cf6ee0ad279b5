// The per-layer execution plan: given each routed expert's token count and
// whether it is resident on the device, choose for every non-resident expert
// "run on the CPU" or "copy to the device and run there" so that the layer's
// makespan max(cpu side, device side) is smallest: both sides run at the same
// time. Resident experts always run on the device.
//
// CPU side: the sum of its experts' CPU times (one after another).
//
// Device side: the device runs a layer's device tasks as a two-stage
// pipeline (the contract the CUDA and emulated devices follow):
//   1. resident (DEVICE) tasks first, in input order, on the compute stream;
//   2. then COPY tasks in input order: copied expert j (j = 0, 1, ... in
//      that order) is copied on a separate copy stream into staging slot
//      j mod S (S = LatencyModel::staging_slots >= 1). Its copy starts when
//      the copy stream is free (copy j-1 done) and the compute that used the
//      slot before (copied expert j-S) has finished; the first S copies wait
//      for no compute, so the first copy overlaps the resident computes. Its
//      compute starts when the compute stream is free and its copy is done.
//   Device side = when the last compute finishes. Copy c = copy_ms(
//   expert_bytes) (the same for every expert), compute d_j = device_ms(n_j),
//   resident compute device_ms(n). S = 1: copies and computes alternate (the
//   first copy still overlaps the residents); S >= 2: copy j+1 overlaps
//   compute j. plan_cost simulates exactly that.
//
// Side by side: in a layer that both copies experts and runs experts with
// tokens on the CPU, the two read host memory at once, so the CPU side is
// priced with LatencyModel::cpu_beside_copies and every copy with
// copy_beside_cpu (each the idle curve where the model has none). A layer
// with only one of the two pays the idle curves.
//
// An expert with no tokens costs nothing and runs nowhere: the planners
// give it DEVICE when resident, CPU otherwise, and the executor skips it.
//
// plan() is polynomial with a proven bound; for the m routed non-resident
// experts of a layer it returns a plan of makespan at most the per-expert
// rule's and at most
//     S = 1, 2:  OPT + eps L <= (1 + eps) OPT
//     S >= 3:    2 OPT + eps L <= (2 + eps) OPT
// with eps = plan_epsilon(m) (PLAN_EPSILON = 1 % up to 12 such experts)
// where OPT is the best of the 2^m assignments under the exact pipeline cost
// and L <= OPT the lower bound max(R, (R + sum_k min(cpu_k, c + d_k)) / 3,
// max_k min(cpu_k, c + d_k)) (R: the resident experts' device time).
// With side-by-side curves the DP prices every item as in a mixed plan (both
// sides on those curves, L and OPT over that pricing) and the two plans
// that are not mixed, all on the CPU and all copied, are priced exactly as
// candidates of their own: the best plan is one of those two, found
// exactly, or mixed, where the DP's pricing is its true cost, so the bound
// holds with L taken over the mixed pricing (at most OPT then).
// Measured against a brute force on 20 000 random layers per S (m <= 10):
// worst plan / OPT 1.0019 (S = 1), 1.0010 (S = 2), 1.034 (S = 3).
// Time O(m^2 / eps), at most O(PLAN_FULL_ITEMS^2 / PLAN_EPSILON). Sketch: with S <= 2 the pipeline's device side
// is exactly a sum of per-copy terms in which only the first and the last
// copy are special, so a DP over the items in reverse input order (states:
// no copy yet / copies after the first / complete) on a grid of CPU-time
// cells eps L / m wide holds, for every number of cells, the smallest exact
// device side; the optimal plan's CPU costs rounded up fill at most
// C* / cell + m cells, so the DP sees a plan with device side <= D* and CPU
// side <= C* + eps L. With S >= 3 the same DP runs on the S = 2 cost, an
// upper bound within 2x of the S-slot cost, and every cell's plan is then
// priced exactly, the cheapest kept. See placement/README.md. No allocation
// per call: scratch is sized in the constructor.
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
constexpr int EXPERT_SITE_COUNT = int(ExpertSite::COPY) + 1;  // the sites above, for per-site arrays and loops
const char* expert_site_name(ExpertSite site);                // "cpu", "device", "copy"

// The relative bound of LayerPlanner::plan with S <= 2 slots (1 %; with
// S >= 3, 1 + PLAN_EPSILON becomes 2 + PLAN_EPSILON) for up to
// PLAN_FULL_ITEMS routed non-resident experts. Beyond (beam search or
// prefill over 64-128 experts, top-8: 30-100 of them) the DP keeps the work
// it has at PLAN_FULL_ITEMS, O(PLAN_FULL_ITEMS^2 / PLAN_EPSILON), so its
// epsilon grows as (m / PLAN_FULL_ITEMS)^2: plan_epsilon(m). Planning a
// 128-expert layer then costs what a 12-expert one does (tens of us), and
// the plan is still never worse than the per-expert rule.
constexpr double PLAN_EPSILON = 0.01;
constexpr int PLAN_FULL_ITEMS = 12;
double plan_epsilon(int m);  // PLAN_EPSILON * max(1, (m / PLAN_FULL_ITEMS)^2)

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
// (a COPY pays the copy even for zero tokens): CPU side the sum of CPU
// times, device side the pipeline above with model.staging_slots slots;
// side by side (copies and CPU work in the layer) on the curves for that.
// std::invalid_argument when the spans differ in size or staging_slots is
// outside [1, MAX_STAGING_SLOTS], here and in the planners.
PlanCost plan_cost(std::span<const PlanInput> inputs, std::span<const ExpertSite> sites, const LatencyModel& model,
                   double expert_bytes);

// Fiddler's rule, each expert alone: copy when copy + device time beats the
// CPU time for that expert's tokens, regardless of the rest of the layer.
// Without a device everything is CPU. Priced with plan_cost.
PlanCost plan_layer_per_expert(std::span<const PlanInput> inputs, std::span<ExpertSite> sites,
                               const LatencyModel& model, double expert_bytes);

class LayerPlanner {
public:
    // max_experts: the most inputs one plan() takes (n_experts of the model).
    // The staging slots are model.staging_slots.
    LayerPlanner(const LatencyModel& model, double expert_bytes, int max_experts);

    // Writes sites[i] for inputs[i]; returns the plan's cost (what
    // plan_cost gives for those sites). Without a device (model.has_device
    // false) everything is CPU, resident flags included: they are ignored,
    // not an error. More than max_experts inputs: std::invalid_argument.
    PlanCost plan(std::span<const PlanInput> inputs, std::span<ExpertSite> sites);

    const LatencyModel& model() const { return model_; }
    double expert_bytes() const { return expert_bytes_; }

private:
    // Writes into sites_out the sites of the DP plan that ends in the
    // complete state at cell g of a grid of `cells` cells over m items (the
    // other inputs as in floor_sites_).
    void trace_plan(int g, int m, int cells, std::span<ExpertSite> sites_out) const;

    LatencyModel model_;
    double expert_bytes_;
    int max_experts_;
    // Per DP item (routed non-resident expert, input order): CPU time, its
    // whole cells, and its device-side terms as the first, a middle, the
    // last or the single copy of the layer (see layer_plan.cpp).
    std::vector<double> cpu_cost_, first_cost_, mid_cost_, last_cost_, single_cost_;
    std::vector<int> weight_cells_;
    std::vector<int> items_;                             // DP item -> input index
    std::vector<ExpertSite> floor_sites_, trial_sites_;  // the per-expert rule's plan; a plan being priced
    // DP tables over CPU-time cells: smallest device side and its exact CPU
    // side, for "copies after the first" (mid_) and "complete" (done_).
    std::vector<double> mid_dev_, mid_cpu_, done_dev_, done_cpu_;
    std::vector<uint8_t> choice_;  // DP back-pointers (item, cell), two 2-bit fields
};
