// ExecutionStats arithmetic (see execution_stats.h).
#include "engine/devices/execution_stats.h"

#include <algorithm>
#include <cassert>
#include <cmath>

ExecutionStats::ExecutionStats(int n_layers_, int n_experts_) : n_layers(n_layers_), n_experts(n_experts_) {
    for (auto& t : tokens) t.assign(size_t(n_layers) * n_experts, 0);
    for (auto* v : {&layer_predicted_cpu_ms, &layer_predicted_device_ms, &layer_measured_cpu_ms,
                    &layer_measured_device_ms})
        v->assign(size_t(n_layers), 0.0);
}

void ExecutionStats::clear() {
    for (auto& t : tokens) std::fill(t.begin(), t.end(), 0);
    std::fill(std::begin(runs), std::end(runs), 0);
    copy_bytes = layers = 0;
    predicted_cpu_ms = predicted_device_ms = predicted_ms = 0;
    measured_cpu_ms = measured_device_ms = measured_ms = 0;
    for (auto* v : {&layer_predicted_cpu_ms, &layer_predicted_device_ms, &layer_measured_cpu_ms,
                    &layer_measured_device_ms})
        std::fill(v->begin(), v->end(), 0.0);
}

void ExecutionStats::merge(const ExecutionStats& o) {
    assert(o.n_layers == n_layers && o.n_experts == n_experts);
    for (int s = 0; s < 3; s++) {
        for (size_t i = 0; i < tokens[s].size(); i++) tokens[s][i] += o.tokens[s][i];
        runs[s] += o.runs[s];
    }
    copy_bytes += o.copy_bytes;
    layers += o.layers;
    predicted_cpu_ms += o.predicted_cpu_ms;
    predicted_device_ms += o.predicted_device_ms;
    predicted_ms += o.predicted_ms;
    measured_cpu_ms += o.measured_cpu_ms;
    measured_device_ms += o.measured_device_ms;
    measured_ms += o.measured_ms;
    for (size_t l = 0; l < layer_measured_cpu_ms.size(); l++) {
        layer_predicted_cpu_ms[l] += o.layer_predicted_cpu_ms[l];
        layer_predicted_device_ms[l] += o.layer_predicted_device_ms[l];
        layer_measured_cpu_ms[l] += o.layer_measured_cpu_ms[l];
        layer_measured_device_ms[l] += o.layer_measured_device_ms[l];
    }
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
    return total_tokens(ExpertSite::CPU) + total_tokens(ExpertSite::DEVICE) + total_tokens(ExpertSite::COPY);
}

double ExecutionStats::hit_rate() const {
    uint64_t all = total_tokens();
    return all ? double(total_tokens(ExpertSite::DEVICE)) / double(all) : 0.0;
}

double ExecutionStats::device_share() const {
    uint64_t all = total_tokens();
    return all ? double(total_tokens(ExpertSite::DEVICE) + total_tokens(ExpertSite::COPY)) / double(all) : 0.0;
}
