// ExecutionStats arithmetic and the one description of its figures (see
// execution_stats.h). Shaping, clearing and merging walk the same table as
// the renderers, so a figure added there is carried everywhere.
#include "engine/devices/execution_stats.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <functional>

namespace {

using S = ExecutionStats;
using F = ExecutionField;

constexpr const char* LAYER_PREFETCH_HELP =
    "Experts prefetched for each MoE layer (copies), and those the layer then routed to (useful).";
constexpr const char* LAYER_HELP =
    "Expert phase per MoE layer and side (cpu, device): the latency model's prediction and the measurement.";

const ExecutionField FIELDS[] = {
    {"runs", "runs", "moe_expert_runs_total", "Expert executions, by site (cpu, device = resident, copy).",
     F::PerSite([](const S& s, ExpertSite site) { return s.runs[int(site)]; })},
    {"tokens", "tokens", "moe_expert_tokens_total", "Routed tokens computed, by site.",
     F::PerSite([](const S& s, ExpertSite site) { return s.total_tokens(site); })},
    {"copy_bytes", "copied", "moe_expert_copy_bytes_total", "Expert weights copied to the device.",
     F::Count{&S::copy_bytes, true}},
    {"layers", "layers", "moe_moe_layers_total", "MoE layer executions.", F::Count{&S::layers, false}},
    {"cache_hits", "cache hits", "moe_expert_cache_hits_total",
     "Expert runs from a cache slot (an expert copied in earlier and kept).", F::Count{&S::cache_hits, false}},
    {"cache_evictions", "evictions", "moe_expert_cache_evictions_total",
     "Cached experts evicted to make room for another.", F::Count{&S::cache_evictions, false}},
    {"cache_fills", "fills", "moe_expert_cache_fills_total",
     "CPU-run misses copied into the cache in the copy stream's idle time.", F::Count{&S::cache_fills, false}},
    {"prefetch_copies", "prefetched", "moe_expert_prefetch_copies_total",
     "Experts copied ahead of their layer from the next-layer prediction.", F::Count{&S::prefetch_copies, false}},
    {"prefetch_useful", "prefetch useful", "moe_expert_prefetch_useful_total",
     "Prefetched experts their layer then routed to.", F::Count{&S::prefetch_useful, false}},
    {"predicted_ms", "phase predicted", "moe_expert_phase_predicted_ms_total",
     "Latency model's prediction of the expert phases.", &S::predicted_ms},
    {"measured_ms", "phase measured", "moe_expert_phase_measured_ms_total", "Measured wall time of the expert phases.",
     &S::measured_ms},
    {"predicted_cpu_ms", "cpu predicted", "moe_expert_cpu_predicted_ms_total", "Predicted time of the CPU side.",
     &S::predicted_cpu_ms},
    {"measured_cpu_ms", "cpu measured", "moe_expert_cpu_measured_ms_total", "Measured time of the CPU side.",
     &S::measured_cpu_ms},
    {"predicted_device_ms", "device predicted", "moe_expert_device_predicted_ms_total",
     "Predicted time of the device side.", &S::predicted_device_ms},
    {"measured_device_ms", "device measured", "moe_expert_device_measured_ms_total",
     "Measured busy time of the device side.", &S::measured_device_ms},
    {"planner_ms", "planner", "moe_expert_planner_ms_total",
     "Time the expert planner spent choosing the layers' plans (part of the expert phases).", &S::planner_ms},
    {"predicted_cpu_ms", "cpu predicted", "moe_expert_layer_ms_total", LAYER_HELP,
     F::PerLayer{&S::layer_predicted_cpu_ms, "cpu", "predicted"}},
    {"measured_cpu_ms", "cpu measured", "moe_expert_layer_ms_total", LAYER_HELP,
     F::PerLayer{&S::layer_measured_cpu_ms, "cpu", "measured"}},
    {"predicted_device_ms", "device predicted", "moe_expert_layer_ms_total", LAYER_HELP,
     F::PerLayer{&S::layer_predicted_device_ms, "device", "predicted"}},
    {"measured_device_ms", "device measured", "moe_expert_layer_ms_total", LAYER_HELP,
     F::PerLayer{&S::layer_measured_device_ms, "device", "measured"}},
    {"prefetch_copies", "prefetched", "moe_expert_layer_prefetch_total", LAYER_PREFETCH_HELP,
     F::PerLayerCount{&S::layer_prefetch_copies, "copies"}},
    {"prefetch_useful", "prefetch useful", "moe_expert_layer_prefetch_total", LAYER_PREFETCH_HELP,
     F::PerLayerCount{&S::layer_prefetch_useful, "useful"}},
};

}  // namespace

std::span<const ExecutionField> execution_stats_fields() {
    return FIELDS;
}

ExecutionStats::ExecutionStats(int n_layers_, int n_experts_) : n_layers(n_layers_), n_experts(n_experts_) {
    for (auto& t : tokens) t.assign(size_t(n_layers) * n_experts, 0);
    for (const ExecutionField& f : FIELDS) {
        if (auto* layer = std::get_if<F::PerLayer>(&f.value)) (this->*layer->ms).assign(size_t(n_layers), 0.0);
        if (auto* layer = std::get_if<F::PerLayerCount>(&f.value)) (this->*layer->counts).assign(size_t(n_layers), 0);
    }
}

void ExecutionStats::clear() {
    for (auto& t : tokens) std::fill(t.begin(), t.end(), 0);
    std::fill(std::begin(runs), std::end(runs), 0);
    for (const ExecutionField& f : FIELDS) {
        if (auto* layer = std::get_if<F::PerLayerCount>(&f.value))
            std::fill((this->*layer->counts).begin(), (this->*layer->counts).end(), 0);
        if (auto* count = std::get_if<F::Count>(&f.value)) this->*count->member = 0;
        if (auto* ms = std::get_if<F::Ms>(&f.value)) this->*(*ms) = 0;
        if (auto* layer = std::get_if<F::PerLayer>(&f.value))
            std::fill((this->*layer->ms).begin(), (this->*layer->ms).end(), 0.0);
    }
}

template <class Op>
void ExecutionStats::combine(const ExecutionStats& o, Op op) {
    assert(o.n_layers == n_layers && o.n_experts == n_experts);
    for (int s = 0; s < EXPERT_SITE_COUNT; s++) {
        for (size_t i = 0; i < tokens[s].size(); i++) tokens[s][i] = op(tokens[s][i], o.tokens[s][i]);
        runs[s] = op(runs[s], o.runs[s]);
    }
    for (const ExecutionField& f : FIELDS) {
        if (auto* count = std::get_if<F::Count>(&f.value))
            this->*count->member = op(this->*count->member, o.*count->member);
        if (auto* ms = std::get_if<F::Ms>(&f.value)) this->*(*ms) = op(this->*(*ms), o.*(*ms));
        if (auto* layer = std::get_if<F::PerLayer>(&f.value)) {
            std::vector<double>& mine = this->*layer->ms;
            const std::vector<double>& theirs = o.*layer->ms;
            for (size_t l = 0; l < mine.size(); l++) mine[l] = op(mine[l], theirs[l]);
        }
        if (auto* layer = std::get_if<F::PerLayerCount>(&f.value)) {
            std::vector<uint64_t>& mine = this->*layer->counts;
            const std::vector<uint64_t>& theirs = o.*layer->counts;
            for (size_t l = 0; l < mine.size(); l++) mine[l] = op(mine[l], theirs[l]);
        }
    }
}

void ExecutionStats::merge(const ExecutionStats& o) {
    combine(o, std::plus<>());
}

void ExecutionStats::subtract(const ExecutionStats& o) {
    combine(o, std::minus<>());
}

ExecutionStats::WorstLayer ExecutionStats::worst_layer() const {
    WorstLayer w;
    double worst = -1;
    for (size_t l = 0; l < layer_measured_cpu_ms.size(); l++)
        for (bool device : {false, true}) {
            double p = device ? layer_predicted_device_ms[l] : layer_predicted_cpu_ms[l];
            double m = device ? layer_measured_device_ms[l] : layer_measured_cpu_ms[l];
            if (p == 0 && m == 0) continue;
            if (std::abs(p - m) > worst) {
                worst = std::abs(p - m);
                w = {int(l), device, p, m};
            }
        }
    return w;
}

uint64_t ExecutionStats::total_tokens(ExpertSite site) const {
    uint64_t sum = 0;
    for (uint64_t v : tokens[int(site)]) sum += v;
    return sum;
}

uint64_t ExecutionStats::total_tokens() const {
    uint64_t sum = 0;
    for (int s = 0; s < EXPERT_SITE_COUNT; s++) sum += total_tokens(ExpertSite(s));
    return sum;
}

double ExecutionStats::hit_rate() const {
    uint64_t all = total_tokens();
    return all ? double(total_tokens(ExpertSite::DEVICE)) / double(all) : 0.0;
}

double ExecutionStats::device_share() const {
    uint64_t all = total_tokens();
    return all ? double(total_tokens(ExpertSite::DEVICE) + total_tokens(ExpertSite::COPY)) / double(all) : 0.0;
}
