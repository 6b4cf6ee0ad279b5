// Expert FFN timing (see expert_timing.h).
#include "engine/devices/expert_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "cpu_kernels/kernels.h"

LatencyCurve expert_ffn_curve_fit(const std::vector<TimingPoint>& points) {
    return latency_curve_fit(points, kernel_table(isa_active()).ffn_packed_min_m);
}

std::vector<ExpertWeights> expert_cycle(const ModelWeights& w, double expert_bytes, int stride, int phase,
                                        double cycle_bytes) {
    std::vector<ExpertWeights> all;
    int index = 0;
    for (const LayerWeights& layer : w.layers)
        for (const ExpertWeights& e : layer.experts)
            if (index++ % stride == phase) all.push_back(e);
    size_t keep = std::max<size_t>(2, size_t(std::ceil(cycle_bytes / expert_bytes)));
    if (all.size() <= keep) return all;
    std::vector<ExpertWeights> out;
    for (size_t i = 0; i < keep; i++) out.push_back(all[i * all.size() / keep]);
    return out;
}

std::vector<std::vector<TimingPoint>> measure_expert_ffn(const ModelConfig& c,
                                                         const std::vector<std::vector<ExpertWeights>>& cycles,
                                                         const std::vector<int>& ns, int reps, ThreadPool& pool) {
    int max_n = ns.back();
    std::vector<float> x(size_t(max_n) * c.dim), y(size_t(max_n) * c.dim), scratch(2 * size_t(max_n) * c.hidden_dim);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (float& v : x) v = d(rng);
    std::vector<size_t> next(cycles.size(), 0);
    auto run = [&](size_t cycle, int n) {
        const std::vector<ExpertWeights>& experts = cycles[cycle];
        const ExpertWeights& e = experts[next[cycle]++ % experts.size()];
        expert_ffn(y.data(), x.data(), e.w1, e.w3, e.w2, n, scratch.data(), pool, e.spec);
    };
    for (size_t k = 0; k < cycles.size(); k++) {
        for (size_t i = 0; i < cycles[k].size(); i++) run(k, 1);
        for (int n : ns) run(k, n);
    }
    // ms[cycle][point][rep]
    std::vector<std::vector<std::vector<double>>> ms(cycles.size(), std::vector<std::vector<double>>(ns.size()));
    for (int r = 0; r < reps; r++)
        for (size_t k = 0; k < cycles.size(); k++)
            for (size_t i = 0; i < ns.size(); i++) {
                auto t0 = std::chrono::steady_clock::now();
                run(k, ns[i]);
                ms[k][i].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            }
    std::vector<std::vector<TimingPoint>> out(cycles.size());
    for (size_t k = 0; k < cycles.size(); k++)
        for (size_t i = 0; i < ns.size(); i++) {
            std::vector<double>& v = ms[k][i];
            std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
            out[k].push_back({double(ns[i]), v[v.size() / 2]});
        }
    return out;
}

