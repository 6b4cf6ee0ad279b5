// Device setup (see device_setup.h).
#include "engine/device_setup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "cpu_kernels/isa.h"
#include "cpu_kernels/kernels.h"
#include "engine/calibration_key.h"
#include "engine/cost.h"
#include "engine/emulated_device.h"
#include "engine/errors.h"
#include "engine/expert_timing.h"
#include "engine/fingerprint.h"
#include "placement/residency.h"
#include "profiles/calibration.h"
#include "profiles/profile.h"
#include "profiles/profile_error.h"

namespace {

constexpr double GIB = double(1u << 30);

// Activations, cuBLAS workspace and fragmentation: a tenth of the budget, at
// most 1 GiB.
double margin_for(double budget_bytes) { return std::min(0.1 * budget_bytes, GIB); }

// A quick measurement of the CPU expert curve when no calibration file
// exists: n = 1, 4, 16, 64, 128 over a 256 MB cycle of experts (so weights
// come from memory, as in decoding), median of 3 sweeps, fitted like
// `calibrate` does.
LatencyCurve probe_cpu_curve(const ModelConfig& c, const ModelWeights& w, ThreadPool& pool) {
    std::vector<ExpertWeights> cycle = expert_cycle(w, double(expert_bytes(c)), 1, 0, 256e6);
    std::vector<TimingPoint> points = measure_expert_ffn(c, {cycle}, {1, 4, 16, 64, 128}, 3, pool)[0];
    for (TimingPoint& p : points) p.ms = std::max(p.ms, 1e-6);
    return latency_curve_fit(points, kernel_table(isa_active()).ffn_packed_min_m);
}

// MemAvailable from /proc/meminfo; 0 when unknown.
double memory_available_bytes() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    double kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    std::fclose(f);
    return kib * 1024.0;
}

// The CPU curve from `moe-server calibrate`'s cached file for this machine,
// kernel path, thread count and expert shape; nothing when there is none.
// A cached file that does not validate is ignored with a warning: it must
// never keep the model from loading.
std::optional<LatencyCurve> cached_cpu_curve(const ModelConfig& c, int threads, std::string* source,
                                             std::string* warning) {
    std::string key = engine_calibration_key(c, threads, GPU_DEVICE_DEFAULT);
    std::optional<Calibration> cal;
    try {
        cal = calibration_find_cached(key);
    } catch (const ProfileError& e) {
        *warning = std::string("ignoring the cached calibration: ") + e.what() + " (run 'moe-server calibrate --force')";
    }
    if (!cal) return std::nullopt;
    *source = calibration_cache_path(key).string();
    return latency_model_from_calibration(*cal).cpu;
}

}  // namespace

DeviceSetup device_setup(const EngineOptions& o, const ModelConfig& c, const ModelWeights& weights, int ctx,
                         ThreadPool& pool) {
    DeviceSetup s;
    PlacementInfo& info = s.info;
    info.n_layers = c.n_layers;
    info.n_experts = std::max(1, c.n_experts);
    info.resident.assign(size_t(info.n_layers) * info.n_experts, 0);
    info.expert_bytes = double(expert_bytes(c));
    bool want_device = o.device.emulate_gpu_bytes > 0 || o.device.emulate_gpu_expert_share > 0;
    std::string calibration;
    std::optional<LatencyCurve> cpu_curve = c.is_moe() ? cached_cpu_curve(c, pool.size(), &calibration, &info.warning) : std::nullopt;
    if (!want_device) {
        if (!o.device.profile.empty()) throw MoeError("--profile: needs a device (--emulate-gpu) to place experts on");
        // Every expert runs on the CPU; a calibration, when there is one,
        // still gives the predicted times in the statistics.
        if (cpu_curve) s.latency.cpu = *cpu_curve;
        info.latency_source = cpu_curve ? "CPU: " + calibration : "none (no calibration: predictions are 0)";
        return s;
    }
    if (!c.is_moe()) throw MoeError("--emulate-gpu: the model has no experts to place (dense model)");
    if (o.device.emulate_gpu_bytes > 0 && o.device.emulate_gpu_expert_share > 0)
        throw MoeError("--emulate-gpu: give a size in GiB or a share of experts, not both");

    const int total = c.n_layers * c.n_experts;
    info.device = "emulated";
    info.dense_bytes = cost_dense_bytes(c);
    info.kv_bytes = double(c.n_layers) * ctx * c.n_kv_heads * c.head_dim * 2.0 * 2.0;
    double device_expert_bytes = 0;
    if (o.device.emulate_gpu_bytes > 0) {
        info.budget_bytes = o.device.emulate_gpu_bytes;
        info.margin_bytes = margin_for(o.device.emulate_gpu_bytes);
        DeviceBudget b{info.budget_bytes, info.dense_bytes, info.kv_bytes, info.margin_bytes, info.expert_bytes, 1};
        info.capacity = expert_capacity(b, c.n_layers, c.n_experts);
        device_expert_bytes = info.budget_bytes - info.dense_bytes - info.kv_bytes - info.margin_bytes;
        if (device_expert_bytes < info.expert_bytes) {
            char msg[256];
            std::snprintf(msg, sizeof msg,
                          "--emulate-gpu: %.2f GiB leaves no room for one expert (%.3f GiB) after the dense weights "
                          "(%.2f GiB), the KV cache (%.2f GiB) and the margin (%.2f GiB)",
                          info.budget_bytes / GIB, info.expert_bytes / GIB, info.dense_bytes / GIB, info.kv_bytes / GIB,
                          info.margin_bytes / GIB);
            throw MoeError(msg);
        }
    } else {
        if (o.device.emulate_gpu_expert_share > 1) throw MoeError("--emulate-gpu: a share of experts must be at most 100%");
        info.capacity = int(std::lround(o.device.emulate_gpu_expert_share * total));
        device_expert_bytes = double(info.capacity + 1) * info.expert_bytes;
        info.budget_bytes = device_expert_bytes;
    }

    Residency residency;
    if (!o.device.profile.empty()) {
        Profile profile = profile_read(o.device.profile);
        profile_check(profile, model_fingerprint(c), o.device.profile.string());
        residency = static_plan_popularity(profile.counts, c.n_layers, c.n_experts, info.capacity);
        info.plan = "popularity";
        info.profile = o.device.profile.string();
        info.expected_hit_rate = hit_rate(residency, profile.counts);
    } else {
        residency = static_plan_even(c.n_layers, c.n_experts, info.capacity);
        info.plan = "even";
    }
    for (int l = 0; l < c.n_layers; l++)
        for (int e = 0; e < c.n_experts; e++) info.resident[size_t(l) * c.n_experts + e] = residency.resident(l, e);

    double host_bytes = double(residency.n_resident() + 1) * info.expert_bytes;
    double available = memory_available_bytes();
    if (available > 0 && host_bytes > 0.8 * available) {
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "--emulate-gpu: the emulated device keeps its %.2f GiB of experts in host memory, but only "
                      "%.2f GiB is available; give a smaller budget",
                      host_bytes / GIB, available / GIB);
        throw MoeError(msg);
    }

    if (cpu_curve) {
        info.latency_source = "CPU: " + calibration + "; device: nominal GPU (placement/README.md)";
    } else {
        cpu_curve = probe_cpu_curve(c, weights, pool);
        info.latency_source = "CPU: quick probe at load (run 'moe-server calibrate' for a full fit); device: nominal "
                              "GPU (placement/README.md)";
    }
    s.latency = latency_model_nominal_gpu(*cpu_curve, info.expert_bytes, cost_expert(c, 1).flops);
    s.device = std::make_unique<EmulatedDevice>(c, weights, residency, device_expert_bytes, o.max_batch,
                                                pool.size());
    return s;
}
