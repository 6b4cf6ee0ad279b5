// calibrate and bench latency (see cli_calibrate.h). The CPU expert FFN is
// timed over the model's real expert weights at n = 1, 2, 4, ..., 256
// tokens; every call takes the next (layer, expert) of a cycle far larger
// than the caches, so the weights stream from memory as in decoding. The
// sweep over n is repeated and each n keeps its median, so every n sees the
// same moments of a noisy machine. With a CUDA device (built with CUDA,
// --gpu-device, default 0) it also measures the device side: host-to-device
// copies from pinned memory (pageable beside them, printed), and the expert
// FFN on the device at the same n with the weights resident; both are fitted
// (has_device) and the placement planner uses them.
#include "apps/cli_calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "apps/cli.h"
#include "base/errors.h"
#include "base/files.h"
#include "cpu_kernels/bench.h"
#include "cpu_kernels/kernels.h"
#include "engine/devices/calibration_key.h"
#include "engine/devices/expert_timing.h"
#include "engine/model/cost.h"
#include "engine/model/model_source.h"
#include "placement/latency_model.h"
#include "profiles/calibration.h"
#ifdef MOE_HAVE_CUDA
#include "gpu_kernels/bench_gpu.h"
#include "gpu_kernels/device.h"
#include "gpu_kernels/gpu_runtime.h"
#endif

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int CALIBRATE_MAX_N = 256;
constexpr int CALIBRATE_REPS = 21;  // sweeps over n; each n keeps the median
constexpr double LATENCY_TARGET_PCT = 15.0;
constexpr double CYCLE_BYTES = 2e9;  // weights one cycle of experts streams through: far more than any cache

// 1, 2, 4, ..., CALIBRATE_MAX_N.
std::vector<int> token_counts() {
    std::vector<int> ns;
    for (int n = 1; n <= CALIBRATE_MAX_N; n *= 2) ns.push_back(n);
    return ns;
}

// A loaded model, this machine's ceiling and the expert's roofline curve.
struct CalibrationRun {
    ModelConfig config;
    std::shared_ptr<const ModelWeights> weights;
    Ceiling ceiling;
    LatencyCurve roofline;
};

// loaded: the source's weights when a bench suite loaded them, else null.
CalibrationRun calibration_load(const ModelSource& source, ThreadPool& pool,
                                std::shared_ptr<const ModelWeights> loaded) {
    CalibrationRun run;
    run.config = model_source_config(source);
    run.weights = model_source_shared_weights(source, run.config, pool.size(), std::move(loaded));
    return run;
}

void calibration_start(CalibrationRun& run, ThreadPool& pool, bool print_ceiling) {
    run.ceiling = bench_ceiling(pool, print_ceiling);
    StageCost one = cost_expert(run.config, 1, weight_format(*run.weights));
    run.roofline = latency_curve_roofline(one.bytes, one.flops, run.ceiling.read_gbs, run.ceiling.fma_gflops);
}

// Where the active kernels switch to their blocked path: the fit's second
// segment (the scalar path never switches; its INT_MAX leaves one segment).
int kernel_large_from() {
    return kernel_table(isa_active()).ffn_packed_min_m;
}

json curve_json(const LatencyCurve& c) {
    return {{"fixed_ms", c.fixed_ms},     {"stream_ms", c.stream_ms}, {"per_token_ms", c.per_token_ms},
            {"large_from", c.large_from}, {"pack_ms", c.pack_ms},     {"large_per_token_ms", c.large_per_token_ms}};
}

double error_pct(double predicted, double measured) {
    return 100.0 * (predicted - measured) / measured;
}

void print_table(const Calibration& cal) {
    LatencyModel model = latency_model_from_calibration(cal);
    LatencyCurve roof =
        latency_curve_roofline(cal.expert_bytes, cal.expert_flops_per_token, cal.read_gbs, cal.fma_gflops);
    std::printf("calibration %s\n", calibration_key(cal).c_str());
    std::printf("  cpu %s, isa %s, %d threads, device %s, expert %dx%d %s\n", cal.cpu_name.c_str(), cal.isa.c_str(),
                cal.threads, cal.device_name.c_str(), cal.dim, cal.hidden_dim, cal.dtype.c_str());
    std::printf("  ceiling: read %.2f GB/s, FMA %.1f GFLOP/s (roofline: %.4f ms to stream, %.5f ms per token)\n",
                cal.read_gbs, cal.fma_gflops, roof.stream_ms, roof.per_token_ms);
    std::printf("  cpu fit: ms(n) = %.4f + max(%.4f, n * %.5f)", model.cpu.fixed_ms, model.cpu.stream_ms,
                model.cpu.per_token_ms);
    if (model.cpu.large_from > 0)
        std::printf("; from n = %d: %.4f + %.4f + n * %.5f", model.cpu.large_from, model.cpu.fixed_ms,
                    model.cpu.pack_ms, model.cpu.large_per_token_ms);
    std::printf("\n");
    std::printf("  %6s %12s %12s %9s %12s\n", "n", "measured_ms", "fitted_ms", "error_%", "roofline_ms");
    double worst = 0;
    for (const TimingPoint& p : cal.cpu_points) {
        double fit = model.cpu_ms(int(p.x)), err = error_pct(fit, p.ms);
        worst = std::max(worst, std::abs(err));
        std::printf("  %6d %12.4f %12.4f %+9.2f %12.4f\n", int(p.x), p.ms, fit, err, roof.ms(p.x));
    }
    std::printf("  max |fit error| %.2f %%\n", worst);
    if (!cal.has_device) {
        std::printf("  device: %s\n", cal.device_name == "none" ? "none (CPU only)" : "not measured; has_device false");
        return;
    }
    std::printf("  device fit: ms(n) = %.4f + max(%.4f, n * %.5f)\n", model.device.fixed_ms, model.device.stream_ms,
                model.device.per_token_ms);
    std::printf("  %6s %12s %12s %9s\n", "n", "measured_ms", "fitted_ms", "error_%");
    worst = 0;
    for (const TimingPoint& p : cal.device_points) {
        double fit = model.device_ms(int(p.x)), err = error_pct(fit, p.ms);
        worst = std::max(worst, std::abs(err));
        std::printf("  %6d %12.4f %12.4f %+9.2f\n", int(p.x), p.ms, fit, err);
    }
    std::printf("  max |device fit error| %.2f %%\n", worst);
    std::printf("  copy fit: ms(bytes) = %.4f + bytes / %.3g per ms (%.2f GB/s)\n", model.copy.latency_ms,
                model.copy.bytes_per_ms, model.copy.bytes_per_ms / 1e6);
    for (const TimingPoint& p : cal.copy_points)
        std::printf("  %12.0f bytes %10.4f ms measured %10.4f fitted %+7.2f %%\n", p.x, p.ms, model.copy_ms(p.x),
                    error_pct(model.copy_ms(p.x), p.ms));
}

// The device side of a calibration: the expert FFN at each n (weights
// resident) and copies of expert-sized blocks from pinned memory, fitted.
// Nothing without a CUDA device.
void measure_device(Calibration& cal, const ExpertWeights& expert, int gpu_device, int reps) {
#ifdef MOE_HAVE_CUDA
    std::vector<GpuDevice> devices = gpu_devices();
    if (gpu_device < 0 || gpu_device >= int(devices.size())) return;
    gpu_set_device(gpu_device);
    const int device_reps = std::max(5, reps);
    std::vector<int> ns = token_counts();
    std::vector<double> ffn = gpu_time_expert_ffn(expert.w1, expert.w3, expert.w2, ns, device_reps);
    std::vector<TimingPoint> points;
    for (size_t i = 0; i < ns.size(); i++) points.push_back({double(ns[i]), std::max(ffn[i], 1e-6)});
    LatencyCurve fit = latency_curve_fit(points, 0);
    std::vector<size_t> sizes;
    for (double f : {0.25, 0.5, 1.0, 2.0}) sizes.push_back(size_t(f * cal.expert_bytes));
    std::vector<double> copy_ms = gpu_time_h2d_pinned(sizes, device_reps);
    std::vector<TimingPoint> copies;
    for (size_t i = 0; i < sizes.size(); i++) copies.push_back({double(sizes[i]), std::max(copy_ms[i], 1e-6)});
    CopyCurve copy = copy_curve_fit(copies);
    GpuCeilings ceil = gpu_measure_ceilings(size_t(64) << 20, 4096);
    std::printf("device %s: host-to-device %.2f GB/s pinned, %.2f GB/s pageable, %.2f GB/s registered; device "
                "memory %.0f GB/s; cuBLAS bf16 %.1f TFLOP/s\n",
                cal.device_name.c_str(), ceil.h2d_pinned_gbs, ceil.h2d_pageable_gbs, ceil.h2d_registered_gbs,
                ceil.device_gbs, ceil.bf16_tflops);
    cal.has_device = true;
    cal.device_points = points;
    cal.device = fit;
    cal.copy_points = copies;
    cal.copy = copy;
#else
    (void)cal, (void)expert, (void)gpu_device, (void)reps;
#endif
}

}  // namespace

int cli_calibrate(const std::vector<std::string>& words) {
    Args args(words);
    return calibrate_run(args, nullptr);
}

int calibrate_run(Args& args, std::shared_ptr<const ModelWeights> loaded) {
    ModelSource source = parse_model_flag(args, "calibrate: ");
    int threads = bench_threads_flag(args);
    apply_isa_flag(args);
    const int gpu_device = parse_gpu_device_flag(args);
    auto out = args.get("--out");
    bool force = args.flag("--force");
    // Hidden (not in the usage text), for quick tests: fewer sweeps.
    int reps = int(args.get_int("--reps", CALIBRATE_REPS, 1, 1000));
    args.finish();
    if (out) file_check_output("--out", *out);  // refused before measuring

    // The weights first: the key names the experts' types (memory-mapped
    // files cost nothing here; synthetic ones are generated).
    ThreadPool pool(threads);
    CalibrationRun run = calibration_load(source, pool, std::move(loaded));
    std::string key = engine_calibration_key(run.config, weights_expert_dtypes(*run.weights), threads, gpu_device);
    fs::path path = calibration_cache_path(key);
    if (!force) {
        std::optional<Calibration> cached;
        try {
            cached = calibration_find_cached(key);
        } catch (const MoeError& e) {
            std::printf("calibration: the cached file is unusable (%s); measuring again\n", e.what());
        }
        if (cached) {
            std::printf("calibration: reusing %s (same key; --force measures again)\n", path.c_str());
            print_table(*cached);
            if (out) calibration_write(*cached, *out), std::printf("wrote %s\n", out->c_str());
            return 0;
        }
    }

    calibration_start(run, pool, false);
    std::vector<TimingPoint> points = measure_expert_ffn(
        run.config,
        {expert_cycle(*run.weights, cost_expert(run.config, 1, weight_format(*run.weights)).bytes, 1, 0, CYCLE_BYTES)},
        token_counts(), reps, pool)[0];
    LatencyCurve fit = latency_curve_fit(points, kernel_large_from());

    Calibration cal = calibration_key_fields(run.config, weights_expert_dtypes(*run.weights), threads, gpu_device);
    cal.read_gbs = run.ceiling.read_gbs;
    cal.fma_gflops = run.ceiling.fma_gflops;
    StageCost one = cost_expert(run.config, 1, weight_format(*run.weights));
    cal.expert_bytes = one.bytes;
    cal.expert_flops_per_token = one.flops;
    cal.cpu_points = points;
    cal.cpu = fit;
    measure_device(cal, run.weights->layers.at(0).experts.at(0), gpu_device, reps);
    print_table(cal);
    calibration_write(cal, path);
    std::printf("wrote %s\n", path.c_str());
    if (out) calibration_write(cal, *out), std::printf("wrote %s\n", out->c_str());
    return 0;
}

int bench_latency(Args& args, std::shared_ptr<const ModelWeights> loaded) {
    ModelSource source = parse_model_flag(args, "bench latency: ");
    int threads = bench_threads_flag(args);
    apply_isa_flag(args);
    int reps = int(args.get_int("--reps", CALIBRATE_REPS, 1, 1000));  // sweeps over n (more: steadier medians)
    args.finish();

    ThreadPool pool(threads);
    CalibrationRun run = calibration_load(source, pool, std::move(loaded));
    calibration_start(run, pool, true);
    // Fit on the even (layer, expert) pairs, check on the odd ones (their
    // sweeps interleaved, so both see the same load on a shared machine); a
    // model with a single expert checks on the same one (said in the output).
    double bytes = cost_expert(run.config, 1, weight_format(*run.weights)).bytes;
    std::vector<ExpertWeights> fit_set = expert_cycle(*run.weights, bytes, 2, 0, CYCLE_BYTES);
    std::vector<ExpertWeights> check_set = expert_cycle(*run.weights, bytes, 2, 1, CYCLE_BYTES);
    bool independent = !check_set.empty();
    if (!independent) check_set = fit_set;
    std::vector<int> ns = token_counts();
    std::vector<std::vector<TimingPoint>> passes = measure_expert_ffn(run.config, {fit_set, check_set}, ns, reps, pool);
    const std::vector<TimingPoint>&fit_points = passes[0], &check = passes[1];
    LatencyCurve fit = latency_curve_fit(fit_points, kernel_large_from());

    double worst = 0;
    for (size_t i = 0; i < ns.size(); i++) {
        double predicted = fit.ms(ns[i]), err = error_pct(predicted, check[i].ms);
        worst = std::max(worst, std::abs(err));
        std::printf("%s\n", json{{"bench", "latency"},
                                 {"isa", isa_name(isa_active())},
                                 {"threads", threads},
                                 {"n", ns[i]},
                                 {"measured_ms", check[i].ms},
                                 {"predicted_ms", predicted},
                                 {"error_pct", err},
                                 {"fit_pass_ms", fit_points[i].ms},
                                 {"roofline_ms", run.roofline.ms(ns[i])},
                                 {"read_gbs", run.ceiling.read_gbs},
                                 {"fma_gflops", run.ceiling.fma_gflops}}
                                .dump()
                                .c_str());
    }
    std::printf("%s\n", json{{"bench", "latency"},
                             {"summary", true},
                             {"isa", isa_name(isa_active())},
                             {"threads", threads},
                             {"dim", run.config.dim},
                             {"hidden_dim", run.config.hidden_dim},
                             {"fit", curve_json(fit)},
                             {"roofline", curve_json(run.roofline)},
                             {"independent_experts", independent},
                             {"max_abs_error_pct", worst},
                             {"target_pct", LATENCY_TARGET_PCT},
                             {"within_target", worst <= LATENCY_TARGET_PCT},
                             {"read_gbs", run.ceiling.read_gbs},
                             {"fma_gflops", run.ceiling.fma_gflops}}
                            .dump()
                            .c_str());
    return 0;
}
