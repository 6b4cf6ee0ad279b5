// The per-layer plan (see layer_plan.h): the exact pipeline cost of an
// assignment, Fiddler's per-expert rule, and the knapsack-style dynamic
// program over the CPU side's time. plan() runs in the decode loop: it
// allocates nothing, all scratch is sized once in the constructor for
// max_experts.
#include "placement/layer_plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

// Grid cells the DP needs for m experts: the CPU side of the optimal plan
// never exceeds the per-expert rule's makespan U <= R + sum_k min(cpu_k,
// c + d_k) <= 3 L, and a cell is eps L / m wide, so U / cell <= 3 m / eps;
// rounding each expert up adds at most m cells.
int plan_grid_cells(int m) {
    return int(std::ceil(3.0 * m / plan_epsilon(m))) + m + 2;
}

}  // namespace

double plan_epsilon(int m) {
    double over = double(m) / PLAN_FULL_ITEMS;
    return over > 1 ? PLAN_EPSILON * over * over : PLAN_EPSILON;
}

namespace {

void check_sizes(std::span<const PlanInput> inputs, size_t n_sites, const char* what) {
    if (n_sites != inputs.size())
        throw std::invalid_argument(std::string(what) + ": " + std::to_string(n_sites) + " sites for " +
                                    std::to_string(inputs.size()) + " experts");
}

void check_slots(const LatencyModel& model, const char* what) {
    if (model.staging_slots < 1 || model.staging_slots > MAX_STAGING_SLOTS)
        throw std::invalid_argument(std::string(what) + ": staging_slots " + std::to_string(model.staging_slots) +
                                    " outside [1, " + std::to_string(MAX_STAGING_SLOTS) + "]");
}

// DP back-pointer fields, one byte per (item, cell): the low two bits for
// the "copies after the first" table, the next two for "complete".
constexpr uint8_t TAKE_CPU = 0;   // the item runs on the CPU, same state
constexpr uint8_t TAKE_COPY = 1;  // copied: a middle copy (mid_) / the first copy (done_, from mid_)
constexpr uint8_t TAKE_ONLY = 2;  // copied, every later item on the CPU: the last (mid_) / the single copy (done_)
constexpr int DONE_SHIFT = 2;

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
    check_slots(model, "plan_cost");
    PlanCost cost;
    // Side by side: the layer both copies and runs CPU experts with tokens.
    bool copies = false, cpu_work = false;
    for (size_t i = 0; i < inputs.size(); i++) {
        copies |= sites[i] == ExpertSite::COPY;
        cpu_work |= sites[i] == ExpertSite::CPU && inputs[i].n_tokens > 0;
    }
    double compute_free = 0;  // the compute stream: resident experts first
    for (size_t i = 0; i < inputs.size(); i++) {
        if (sites[i] == ExpertSite::CPU) cost.cpu_ms += model.cpu_ms(inputs[i].n_tokens, copies);
        if (sites[i] == ExpertSite::DEVICE) compute_free += model.device_ms(inputs[i].n_tokens);
    }
    // Copies in input order; slot_free[s]: when the compute that last used
    // slot s finished (0: never used), so copy j waits for copy j - S.
    const int slots = model.staging_slots;
    const double copy = model.copy_ms(expert_bytes, cpu_work);
    std::array<double, MAX_STAGING_SLOTS> slot_free;
    std::fill_n(slot_free.begin(), slots, 0.0);
    double copy_free = 0;
    int j = 0;
    for (size_t i = 0; i < inputs.size(); i++) {
        if (sites[i] != ExpertSite::COPY) continue;
        double& slot = slot_free[size_t(j++ % slots)];
        copy_free = std::max(copy_free, slot) + copy;
        compute_free = std::max(compute_free, copy_free) + model.device_ms(inputs[i].n_tokens);
        slot = compute_free;
    }
    cost.device_ms = compute_free;
    return cost;
}

PlanCost plan_layer_per_expert(std::span<const PlanInput> inputs, std::span<ExpertSite> sites,
                               const LatencyModel& model, double expert_bytes) {
    check_sizes(inputs, sites.size(), "plan_layer_per_expert");
    for (size_t i = 0; i < inputs.size(); i++) {
        int n = inputs[i].n_tokens;
        if (!model.has_device) {
            sites[i] = ExpertSite::CPU;
        } else if (inputs[i].resident) {
            sites[i] = ExpertSite::DEVICE;
        } else {
            double copy = n > 0 ? model.copy_ms(expert_bytes) + model.device_ms(n) : INF;
            sites[i] = copy < model.cpu_ms(n) ? ExpertSite::COPY : ExpertSite::CPU;
        }
    }
    return plan_cost(inputs, sites, model, expert_bytes);
}

LayerPlanner::LayerPlanner(const LatencyModel& model, double expert_bytes, int max_experts)
    : model_(model), expert_bytes_(expert_bytes), max_experts_(max_experts) {
    if (max_experts < 0) throw std::invalid_argument("LayerPlanner: negative max_experts");
    check_slots(model, "LayerPlanner");
    int cells = 0;  // the largest grid any m <= max_experts needs (it peaks near PLAN_FULL_ITEMS)
    for (int m = 0; m <= max_experts; m++) cells = std::max(cells, plan_grid_cells(m));
    for (std::vector<double>* v : {&cpu_cost_, &first_cost_, &mid_cost_, &last_cost_, &single_cost_})
        v->resize(max_experts);
    weight_cells_.resize(max_experts);
    items_.resize(max_experts);
    floor_sites_.resize(max_experts);
    trial_sites_.resize(max_experts);
    for (std::vector<double>* v : {&mid_dev_, &mid_cpu_, &done_dev_, &done_cpu_}) v->resize(cells);
    choice_.resize(size_t(max_experts) * cells);
}

// The DP (see layer_plan.h). With c the copy time, R the resident time and
// copies k_1 < ... < k_t in input order, the pipeline's device side is
//   t = 0:  R
//   t = 1:  single(d) = max(R, c) + d
//   t >= 2: first(d_k1) + sum_{1 < s < t} mid(d_ks) + last(d_kt)
// exactly, for
//   S = 1:  first(d) = max(R, c) + d,               mid(d) = last(d) = c + d
//   S = 2:  first(d) = max(R + d, c + max(c, d)),   mid(d) = max(c, d), last(d) = d
// (S = 2: let G_j = max(F_j, A_{j+1}), when compute j ends or copy j+1
// lands, whichever is later; then G_1 = max(max(R, c) + d_1, 2c) and
// G_j = G_{j-1} + max(c, d_j), and the device side is G_{t-1} + d_t.)
// More slots never delay anything (copy j's slot wait F_{j-S} only falls
// with S), so for S >= 3 the S = 2 terms are an upper bound, and the S = 2
// cost is at most max(R, c) + (t - 1) c + sum d <= 2 F_inf <= 2 F_S
// (F_inf, unlimited slots, is at least R + sum d and at least t c).
//
// Items are processed in reverse input order, so the first copy met is the
// last in input order. Tables per CPU cell g: mid_ (at least one copy in the
// suffix, none of them the first: the latest is `last`, the others `mid`)
// and done_ (complete: the first copy chosen, every earlier item on the
// CPU); the all-CPU suffix is a single plan (its cells and CPU time).
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

    // The DP prices every item as in a mixed plan (CPU experts beside copies:
    // the side-by-side curves); the two pure plans, all on the CPU and all
    // copied, are priced exactly as candidates of their own (see layer_plan.h).
    const double c = model_.copy_ms(expert_bytes_, true);
    const bool serial = model_.staging_slots == 1;
    double r = 0, sum_min = 0, max_min = 0, cpu_alone = 0;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (inputs[i].resident) r += model_.device_ms(inputs[i].n_tokens);
    for (int i = 0; i < n; i++) {
        if (inputs[i].resident || inputs[i].n_tokens <= 0) continue;
        double d = model_.device_ms(inputs[i].n_tokens);
        items_[m] = i;
        cpu_cost_[m] = model_.cpu_ms(inputs[i].n_tokens, true);
        cpu_alone += model_.cpu_ms(inputs[i].n_tokens);
        single_cost_[m] = std::max(r, c) + d;
        first_cost_[m] = serial ? std::max(r, c) + d : std::max(r + d, c + std::max(c, d));
        mid_cost_[m] = serial ? c + d : std::max(c, d);
        last_cost_[m] = serial ? c + d : d;
        double lo = std::min(cpu_cost_[m], c + d);
        sum_min += lo;
        max_min = std::max(max_min, lo);
        m++;
    }
    double lower = std::max({r, (r + sum_min) / 3, max_min});
    double upper = floor.makespan_ms();
    if (m == 0 || !(lower > 0) || !std::isfinite(upper)) return floor;

    const double cell = plan_epsilon(m) * lower / m;
    const int cells = int(std::min(double(mid_dev_.size()), std::floor(upper / cell) + m + 1));
    for (int k = 0; k < m; k++) {
        double w = std::ceil(cpu_cost_[k] / cell);
        weight_cells_[k] = w < cells ? int(w) : cells;  // cells: never fits
    }
    std::fill_n(mid_dev_.begin(), cells, INF);
    std::fill_n(done_dev_.begin(), cells, INF);
    std::fill_n(mid_cpu_.begin(), cells, 0.0);
    std::fill_n(done_cpu_.begin(), cells, 0.0);
    int cpu_cells = 0;  // the all-CPU suffix: its cells (>= cells: off the grid) and CPU time
    double cpu_time = 0;
    for (int k = m - 1; k >= 0; k--) {
        const int w = weight_cells_[k];
        const double cpu = cpu_cost_[k], mid_cost = mid_cost_[k], first_cost = first_cost_[k];
        uint8_t* choice = choice_.data() + size_t(k) * cells;
        // Descending g: [g - w] and [g] still hold the tables before item k.
        // Ties go to the CPU (fewer copies, less PCIe traffic).
        for (int g = cells - 1; g >= w; g--) {
            const double mid = mid_dev_[g], mid_copy = mid + mid_cost, done_copy = mid + first_cost;
            const bool copy_mid = mid_copy < mid_dev_[g - w], copy_done = done_copy < done_dev_[g - w];
            done_cpu_[g] = copy_done ? mid_cpu_[g] : done_cpu_[g - w] + cpu;
            done_dev_[g] = copy_done ? done_copy : done_dev_[g - w];
            mid_cpu_[g] = copy_mid ? mid_cpu_[g] : mid_cpu_[g - w] + cpu;
            mid_dev_[g] = copy_mid ? mid_copy : mid_dev_[g - w];
            choice[g] = uint8_t((copy_mid ? TAKE_COPY : TAKE_CPU) | (copy_done ? TAKE_COPY : TAKE_CPU) << DONE_SHIFT);
        }
        for (int g = std::min(w, cells) - 1; g >= 0; g--) {  // too few cells for item k on the CPU
            done_cpu_[g] = mid_cpu_[g];
            done_dev_[g] = mid_dev_[g] + first_cost;
            mid_dev_[g] += mid_cost;
            choice[g] = uint8_t(TAKE_COPY | TAKE_COPY << DONE_SHIFT);
        }
        // Item k the only copy so far: the last copy (mid_) or the single
        // one (done_), at the all-CPU suffix's cell.
        if (cpu_cells < cells) {
            uint8_t& take = choice[cpu_cells];
            if (last_cost_[k] < mid_dev_[cpu_cells]) {
                mid_dev_[cpu_cells] = last_cost_[k], mid_cpu_[cpu_cells] = cpu_time;
                take = uint8_t((take & ~3) | TAKE_ONLY);
            }
            if (single_cost_[k] < done_dev_[cpu_cells]) {
                done_dev_[cpu_cells] = single_cost_[k], done_cpu_[cpu_cells] = cpu_time;
                take = uint8_t((take & 3) | TAKE_ONLY << DONE_SHIFT);
            }
        }
        cpu_cells += w;
        cpu_time += cpu;
    }

    // The candidates: every complete cell (priced exactly: with S <= 2 its
    // table value is the exact cost, with S >= 3 the plan is traced and
    // simulated) and the all-CPU plan; the per-expert rule is the floor.
    std::span<ExpertSite> trial(trial_sites_.data(), n);
    constexpr int ALL_CPU = -1, ALL_COPIED = -2;
    int pick = ALL_CPU;
    double pick_ms = std::max(cpu_alone, r);  // all on the CPU
    if (model_.side_by_side_curves()) {
        // All copied: the DP priced its copies beside CPU work there is none of.
        std::copy(floor_sites.begin(), floor_sites.end(), trial.begin());
        for (int k = 0; k < m; k++) trial[items_[k]] = ExpertSite::COPY;
        const double ms = plan_cost(inputs, trial, model_, expert_bytes_).makespan_ms();
        if (ms < pick_ms) pick_ms = ms, pick = ALL_COPIED;
    }
    for (int g = 0; g < cells; g++) {
        if (!(done_dev_[g] < INF) || !(done_cpu_[g] < pick_ms)) continue;
        double ms = std::max(done_cpu_[g], done_dev_[g]);
        if (model_.staging_slots > 2) {
            trace_plan(g, m, cells, trial);
            ms = plan_cost(inputs, trial, model_, expert_bytes_).makespan_ms();
        }
        if (ms < pick_ms) pick_ms = ms, pick = g;
    }
    if (!(pick_ms < floor.makespan_ms())) return floor;
    if (pick < 0) {
        std::copy(floor_sites.begin(), floor_sites.end(), trial.begin());
        for (int k = 0; k < m; k++) trial[items_[k]] = pick == ALL_CPU ? ExpertSite::CPU : ExpertSite::COPY;
    } else {
        trace_plan(pick, m, cells, trial);
    }
    // Priced again by plan_cost, so the cost returned is exactly the cost of
    // the sites returned (the table sums may differ in the last bits).
    PlanCost cost = plan_cost(inputs, trial, model_, expert_bytes_);
    if (!(cost.makespan_ms() < floor.makespan_ms())) return floor;
    std::copy(trial.begin(), trial.end(), sites.begin());
    return cost;
}

void LayerPlanner::trace_plan(int g, int m, int cells, std::span<ExpertSite> sites_out) const {
    std::copy_n(floor_sites_.begin(), sites_out.size(), sites_out.begin());
    enum { DONE, MID, ALL_CPU } state = DONE;
    for (int k = 0; k < m; k++) {
        uint8_t both = state == ALL_CPU ? 0 : choice_[size_t(k) * cells + g];
        uint8_t take = state == DONE ? uint8_t(both >> DONE_SHIFT & 3) : state == MID ? uint8_t(both & 3) : TAKE_CPU;
        sites_out[items_[k]] = take == TAKE_CPU ? ExpertSite::CPU : ExpertSite::COPY;
        if (take == TAKE_CPU && state != ALL_CPU) g -= weight_cells_[k];
        if (take == TAKE_COPY) state = MID;
        if (take == TAKE_ONLY) state = ALL_CPU;
    }
}
