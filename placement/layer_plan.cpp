// The per-layer plan (see layer_plan.h): Fiddler's per-expert rule and the
// knapsack-style dynamic program over the CPU side's time. plan() runs in
// the decode loop: it allocates nothing, all scratch is sized once in the
// constructor for max_experts.
#include "placement/layer_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

// Grid cells the DP needs for m experts: the CPU side never exceeds the
// per-expert rule's makespan U <= 2 L, and a cell is eps L / m wide, so
// U / cell <= 2 m / eps; rounding each expert up adds at most m cells.
int plan_grid_cells(int m) {
    return int(std::ceil(2.0 * m / PLAN_EPSILON)) + m + 2;
}

void check_sizes(std::span<const PlanInput> inputs, size_t n_sites, const char* what) {
    if (n_sites != inputs.size())
        throw std::invalid_argument(std::string(what) + ": " + std::to_string(n_sites) + " sites for " +
                                    std::to_string(inputs.size()) + " experts");
}

}  // namespace

const char* expert_site_name(ExpertSite site) {
    switch (site) {
    case ExpertSite::CPU:
        return "cpu";
    case ExpertSite::DEVICE:
        return "device";
    case ExpertSite::COPY:
        return "copy";
    }
    return "?";
}

PlanCost plan_cost(std::span<const PlanInput> inputs, std::span<const ExpertSite> sites, const LatencyModel& model,
                   double expert_bytes) {
    check_sizes(inputs, sites.size(), "plan_cost");
    PlanCost cost;
    for (size_t i = 0; i < inputs.size(); i++) {
        int n = inputs[i].n_tokens;
        switch (sites[i]) {
        case ExpertSite::CPU:
            cost.cpu_ms += model.cpu_ms(n);
            break;
        case ExpertSite::DEVICE:
            cost.device_ms += model.device_ms(n);
            break;
        case ExpertSite::COPY:
            cost.device_ms += model.copy_ms(expert_bytes) + model.device_ms(n);
            break;
        }
    }
    return cost;
}

PlanCost plan_layer_per_expert(std::span<const PlanInput> inputs, std::span<ExpertSite> sites,
                               const LatencyModel& model, double expert_bytes) {
    check_sizes(inputs, sites.size(), "plan_layer_per_expert");
    PlanCost cost;
    for (size_t i = 0; i < inputs.size(); i++) {
        int n = inputs[i].n_tokens;
        if (!model.has_device) {
            sites[i] = ExpertSite::CPU;
            cost.cpu_ms += model.cpu_ms(n);
        } else if (inputs[i].resident) {
            sites[i] = ExpertSite::DEVICE;
            cost.device_ms += model.device_ms(n);
        } else {
            double cpu = model.cpu_ms(n), copy = n > 0 ? model.copy_ms(expert_bytes) + model.device_ms(n) : INF;
            sites[i] = copy < cpu ? ExpertSite::COPY : ExpertSite::CPU;
            (copy < cpu ? cost.device_ms : cost.cpu_ms) += std::min(cpu, copy);
        }
    }
    return cost;
}

LayerPlanner::LayerPlanner(const LatencyModel& model, double expert_bytes, int max_experts)
    : model_(model), expert_bytes_(expert_bytes), max_experts_(max_experts) {
    if (max_experts < 0) throw std::invalid_argument("LayerPlanner: negative max_experts");
    int cells = plan_grid_cells(max_experts);
    cpu_cost_.resize(max_experts);
    dev_cost_.resize(max_experts);
    items_.resize(max_experts);
    floor_sites_.resize(max_experts);
    best_.resize(cells);
    cpu_sum_.resize(cells);
    choice_.resize(size_t(max_experts) * cells);
}

PlanCost LayerPlanner::plan(std::span<const PlanInput> inputs, std::span<ExpertSite> sites) {
    check_sizes(inputs, sites.size(), "LayerPlanner::plan");
    if (inputs.size() > size_t(max_experts_))
        throw std::invalid_argument("LayerPlanner::plan: " + std::to_string(inputs.size()) +
                                    " experts, planner sized for " + std::to_string(max_experts_));
    const int n = int(inputs.size());
    std::span<ExpertSite> floor_sites(floor_sites_.data(), n);
    PlanCost floor = plan_layer_per_expert(inputs, floor_sites, model_, expert_bytes_);
    std::copy(floor_sites.begin(), floor_sites.end(), sites.begin());
    if (!model_.has_device) return floor;

    // Resident experts are fixed on the device (d0); each routed
    // non-resident expert k is an item: CPU (cpu_cost_[k] on the CPU side)
    // or COPY (dev_cost_[k] on the device side). L is a lower bound on the
    // optimal makespan.
    double d0 = 0, sum_min = 0, max_min = 0;
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (inputs[i].resident) {
            d0 += model_.device_ms(inputs[i].n_tokens);
        } else if (inputs[i].n_tokens > 0) {
            items_[m] = i;
            cpu_cost_[m] = model_.cpu_ms(inputs[i].n_tokens);
            dev_cost_[m] = model_.copy_ms(expert_bytes_) + model_.device_ms(inputs[i].n_tokens);
            double lo = std::min(cpu_cost_[m], dev_cost_[m]);
            sum_min += lo;
            max_min = std::max(max_min, lo);
            m++;
        }
    }
    double lower = std::max({d0, (d0 + sum_min) / 2, max_min});
    double upper = floor.makespan_ms();
    if (m == 0 || !(lower > 0) || !std::isfinite(upper)) return floor;

    // best_[g]: the smallest device side over assignments of the items seen
    // so far whose CPU costs, each rounded up to whole cells, fill g cells;
    // cpu_sum_[g]: that assignment's exact CPU side. choice_: 1 = CPU.
    const double cell = PLAN_EPSILON * lower / m;
    const int cells = int(std::min(double(best_.size()), std::floor(upper / cell) + m + 1));
    std::fill(best_.begin(), best_.begin() + cells, INF);
    std::fill(cpu_sum_.begin(), cpu_sum_.begin() + cells, 0.0);
    best_[0] = d0;
    for (int k = 0; k < m; k++) {
        double w_cells = std::ceil(cpu_cost_[k] / cell);
        int w = w_cells < cells ? int(w_cells) : cells;  // cells: never fits
        uint8_t* choice = choice_.data() + size_t(k) * cells;
        for (int g = cells - 1; g >= 0; g--) {
            double copy = best_[g] + dev_cost_[k];
            bool take_cpu = g >= w && best_[g - w] <= copy;
            choice[g] = take_cpu;
            if (take_cpu) {
                best_[g] = best_[g - w];
                cpu_sum_[g] = cpu_sum_[g - w] + cpu_cost_[k];
            } else {
                best_[g] = copy;
            }
        }
    }
    int pick = 0;
    double pick_ms = INF;
    for (int g = 0; g < cells; g++) {
        double ms = std::max(cpu_sum_[g], best_[g]);
        if (ms < pick_ms) pick_ms = ms, pick = g;
    }
    if (!(pick_ms < floor.makespan_ms())) return floor;

    // Walk the choices back from the picked cell.
    PlanCost cost{0, d0};
    for (int k = m - 1; k >= 0; k--) {
        double w_cells = std::ceil(cpu_cost_[k] / cell);
        if (choice_[size_t(k) * cells + pick]) {
            sites[items_[k]] = ExpertSite::CPU;
            cost.cpu_ms += cpu_cost_[k];
            pick -= int(w_cells);
        } else {
            sites[items_[k]] = ExpertSite::COPY;
            cost.device_ms += dev_cost_[k];
        }
    }
    return cost;
}
