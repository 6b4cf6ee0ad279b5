// Calibration measurements (see calibration.h).
#include "engine/devices/calibration.h"

#include "engine/devices/calibration_key.h"
#include "engine/devices/expert_timing.h"
#include "engine/model/cost.h"

namespace {

constexpr int CALIBRATION_MAX_N = 256;
constexpr double CYCLE_BYTES = 2e9;  // weights one cycle of experts streams through: far more than any cache

}  // namespace

std::vector<int> calibration_token_counts() {
    std::vector<int> ns;
    for (int n = 1; n <= CALIBRATION_MAX_N; n *= 2) ns.push_back(n);
    return ns;
}

CalibrationResult calibration_measure(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool,
                                      int gpu_device, int reps) {
    const Ceiling ceiling = bench_ceiling(pool, false);
    const StageCost one = cost_expert(config, 1, weight_format(weights));
    const std::vector<ExpertWeights> cycle = expert_cycle(weights, one.bytes, 1, 0, CYCLE_BYTES);
    std::vector<TimingPoint> points = measure_expert_ffn(config, {cycle}, calibration_token_counts(), reps, pool)[0];

    CalibrationResult r;
    Calibration& cal = r.calibration;
    cal = calibration_key_fields(config, weights_expert_dtypes(weights), pool.size(), gpu_device);
    cal.read_gbs = ceiling.read_gbs;
    cal.fma_gflops = ceiling.fma_gflops;
    cal.expert_bytes = one.bytes;
    cal.expert_flops_per_token = one.flops;
    cal.cpu = expert_ffn_curve_fit(points);
    cal.cpu_points = std::move(points);
    r.device_ceilings = calibration_measure_device(cal, weights.layers.at(0).experts.at(0), gpu_device, reps);
    if (cal.has_device) calibration_measure_side_by_side(cal, config, cycle, pool, reps);
    return r;
}

LatencyCheck latency_check_measure(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool, int reps) {
    LatencyCheck r;
    r.ceiling = bench_ceiling(pool, false);
    const StageCost one = cost_expert(config, 1, weight_format(weights));
    r.roofline = latency_curve_roofline(one.bytes, one.flops, r.ceiling.read_gbs, r.ceiling.fma_gflops);
    std::vector<ExpertWeights> fit_set = expert_cycle(weights, one.bytes, 2, 0, CYCLE_BYTES);
    std::vector<ExpertWeights> check_set = expert_cycle(weights, one.bytes, 2, 1, CYCLE_BYTES);
    r.independent_experts = !check_set.empty();
    if (!r.independent_experts) check_set = fit_set;
    r.ns = calibration_token_counts();
    std::vector<std::vector<TimingPoint>> passes = measure_expert_ffn(config, {fit_set, check_set}, r.ns, reps, pool);
    r.fit_points = std::move(passes[0]);
    r.check_points = std::move(passes[1]);
    r.fit = expert_ffn_curve_fit(r.fit_points);
    return r;
}
