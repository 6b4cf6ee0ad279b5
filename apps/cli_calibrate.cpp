// calibrate and bench latency (see cli_calibrate.h): their flags, the
// calibration cache, and the printing. The measuring (the CPU expert FFN
// over the model's real expert weights at n = 1, 2, 4, ..., 256 tokens,
// medians of repeated sweeps, the fits, and with a CUDA device (built with
// CUDA, --gpu-device, default 0) the device side: copies from pinned
// memory and the expert FFN with its weights resident) is
// engine/devices/calibration.h's; this file prints its results: the table,
// the device's ceilings, the JSON lines.
#include "apps/cli_calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/cli.h"
#include "base/errors.h"
#include "base/files.h"
#include "cpu_kernels/bench.h"
#include "cpu_kernels/isa.h"
#include "engine/devices/calibration.h"
#include "engine/devices/calibration_key.h"
#include "engine/model/model_source.h"
#include "placement/latency_model.h"
#include "profiles/calibration.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr double LATENCY_TARGET_PCT = 15.0;

// --model's config and weights (loaded: the source's weights when a bench
// suite loaded them, else null).
struct LoadedModel {
    ModelConfig config;
    std::shared_ptr<const ModelWeights> weights;
};

LoadedModel calibration_load(const ModelSource& source, ThreadPool& pool, std::shared_ptr<const ModelWeights> loaded) {
    LoadedModel m;
    m.config = model_source_config(source);
    m.weights = model_source_shared_weights(source, m.config, pool.size(), std::move(loaded));
    return m;
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
    if (!cal.has_side_by_side) {
        std::printf("  side by side: not measured (the planner prices each side alone)\n");
        return;
    }
    // Side by side: each measurement against the fit, and against the same
    // work alone (the idle fit), the slowdown the planner prices.
    std::printf("  cpu beside copies: ms(n) = %.4f + max(%.4f, n * %.5f)\n", model.cpu_beside_copies->fixed_ms,
                model.cpu_beside_copies->stream_ms, model.cpu_beside_copies->per_token_ms);
    std::printf("  %6s %12s %12s %9s %12s\n", "n", "measured_ms", "fitted_ms", "error_%", "x_alone");
    for (const TimingPoint& p : cal.cpu_beside_copies_points) {
        const double fit = model.cpu_ms(int(p.x), true);
        std::printf("  %6d %12.4f %12.4f %+9.2f %12.2f\n", int(p.x), p.ms, fit, error_pct(fit, p.ms),
                    p.ms / model.cpu_ms(int(p.x)));
    }
    std::printf("  copy beside cpu: ms(bytes) = %.4f + bytes / %.3g per ms (%.2f GB/s, alone %.2f)\n",
                model.copy_beside_cpu->latency_ms, model.copy_beside_cpu->bytes_per_ms,
                model.copy_beside_cpu->bytes_per_ms / 1e6, model.copy.bytes_per_ms / 1e6);
    for (const TimingPoint& p : cal.copy_beside_cpu_points)
        std::printf("  %12.0f bytes %10.4f ms measured %10.4f fitted %+7.2f %%\n", p.x, p.ms, model.copy_ms(p.x, true),
                    error_pct(model.copy_ms(p.x, true), p.ms));
}

// The ceilings of the device a calibration measured, one line before its table.
void print_device_ceilings(const std::string& device_name, const GpuCeilings& c) {
    std::printf(
        "device %s: host-to-device %.2f GB/s pinned, %.2f GB/s pageable, %.2f GB/s registered; device "
        "memory %.0f GB/s; cuBLAS bf16 %.1f TFLOP/s\n",
        device_name.c_str(), c.h2d_pinned_gbs, c.h2d_pageable_gbs, c.h2d_registered_gbs, c.device_gbs, c.bf16_tflops);
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
    int reps = int(args.get_int("--reps", CALIBRATION_REPS, 1, 1000));
    args.finish();
    if (out) file_check_output("--out", *out);  // refused before measuring

    // The weights first: the key names the experts' types (memory-mapped
    // files cost nothing here; synthetic ones are generated).
    ThreadPool pool(threads);
    LoadedModel model = calibration_load(source, pool, std::move(loaded));
    std::string key = engine_calibration_key(model.config, weights_expert_dtypes(*model.weights), threads, gpu_device);
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

    CalibrationResult measured = calibration_measure(model.config, *model.weights, pool, gpu_device, reps);
    const Calibration& cal = measured.calibration;
    if (measured.device_ceilings) print_device_ceilings(cal.device_name, *measured.device_ceilings);
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
    int reps = int(args.get_int("--reps", CALIBRATION_REPS, 1, 1000));  // sweeps over n (more: steadier medians)
    args.finish();

    ThreadPool pool(threads);
    LoadedModel model = calibration_load(source, pool, std::move(loaded));
    LatencyCheck check = latency_check_measure(model.config, *model.weights, pool, reps);
    bench_ceiling_print(check.ceiling);
    const LatencyCurve& fit = check.fit;
    const Ceiling& ceiling = check.ceiling;
    double worst = 0;
    for (size_t i = 0; i < check.ns.size(); i++) {
        const int n = check.ns[i];
        const double measured = check.check_points[i].ms;
        double predicted = fit.ms(n), err = error_pct(predicted, measured);
        worst = std::max(worst, std::abs(err));
        std::printf("%s\n", json{{"bench", "latency"},
                                 {"isa", isa_name(isa_active())},
                                 {"threads", threads},
                                 {"n", n},
                                 {"measured_ms", measured},
                                 {"predicted_ms", predicted},
                                 {"error_pct", err},
                                 {"fit_pass_ms", check.fit_points[i].ms},
                                 {"roofline_ms", check.roofline.ms(n)},
                                 {"read_gbs", ceiling.read_gbs},
                                 {"fma_gflops", ceiling.fma_gflops}}
                                .dump()
                                .c_str());
    }
    std::printf("%s\n", json{{"bench", "latency"},
                             {"summary", true},
                             {"isa", isa_name(isa_active())},
                             {"threads", threads},
                             {"dim", model.config.dim},
                             {"hidden_dim", model.config.hidden_dim},
                             {"fit", curve_json(fit)},
                             {"roofline", curve_json(check.roofline)},
                             {"independent_experts", check.independent_experts},
                             {"max_abs_error_pct", worst},
                             {"target_pct", LATENCY_TARGET_PCT},
                             {"within_target", worst <= LATENCY_TARGET_PCT},
                             {"read_gbs", ceiling.read_gbs},
                             {"fma_gflops", ceiling.fma_gflops}}
                            .dump()
                            .c_str());
    return 0;
}
