// Device setup (see device_setup.h).
#include "engine/devices/device_setup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "engine/devices/calibration_key.h"
#include "engine/devices/emulated_device.h"
#include "engine/devices/hybrid_executor.h"
#include "engine/model/cost.h"
#ifdef MOE_HAVE_CUDA
#include "engine/devices/cuda_setup.h"
#include "gpu_kernels/gpu_runtime.h"
#endif
#include "base/errors.h"
#include "engine/devices/expert_timing.h"
#include "engine/model/fingerprint.h"
#include "engine/model/host_memory.h"
#include "engine/state/kv_cache.h"
#include "gpu_kernels/device.h"
#include "gpu_kernels/gpu_limits.h"
#include "placement/residency.h"
#include "profiles/calibration.h"
#include "profiles/profile.h"

namespace {

// Staging slots of the emulated device (a dry run of the CUDA device's two).
constexpr int EMULATED_STAGING_SLOTS = 2;

constexpr double GIB = double(1u << 30);

// Activations, cuBLAS workspace and fragmentation: a tenth of the budget, at
// most 1 GiB.
double margin_for(double budget_bytes) { return std::min(0.1 * budget_bytes, GIB); }

// A quick measurement of the CPU expert curve when no calibration file
// exists: n = 1, 4, 16, 64, 128 over a 256 MB cycle of experts (so weights
// come from memory, as in decoding), median of 3 sweeps, fitted like
// `calibrate` does.
LatencyCurve probe_cpu_curve(const ModelConfig& c, const ModelWeights& w, ThreadPool& pool) {
    std::vector<ExpertWeights> cycle = expert_cycle(w, cost_expert(c, 0, weight_format(w)).bytes, 1, 0, 256e6);
    std::vector<TimingPoint> points = measure_expert_ffn(c, {cycle}, {1, 4, 16, 64, 128}, 3, pool)[0];
    for (TimingPoint& p : points) p.ms = std::max(p.ms, 1e-6);
    return expert_ffn_curve_fit(points);
}

// `moe-server calibrate`'s cached file for this machine, kernel path, thread
// count, device (gpu_device; -1 = none) and expert shape, its path in
// info.latency.calibration; nothing when there is none. A cached file that
// does not validate is ignored with a warning (info.note): it must never
// keep the model from loading.
std::optional<Calibration> cached_calibration(const ModelConfig& c, const ModelWeights& w, int threads, int gpu_device,
                                              PlacementInfo& info) {
    std::string key = engine_calibration_key(c, weights_expert_dtypes(w), threads, gpu_device);
    std::optional<Calibration> cal;
    try {
        cal = calibration_find_cached(key);
    } catch (const MoeError& e) {
        info.note = {PlacementWarning::CALIBRATION_IGNORED, e.what()};
    }
    if (cal) info.latency.calibration = calibration_cache_path(key).string();
    return cal;
}

}  // namespace

double cuda_activation_bytes(const ModelConfig& c, int ctx, int max_batch, int max_rows, bool quantized_dense) {
    constexpr double ALIGN = 256;  // each allocation rounds up to it
    const double mb = max_batch, q_dim = double(c.n_heads) * c.head_dim, kv_dim = double(c.n_kv_heads) * c.head_dim;
    const double n_experts = std::max(1, c.n_experts), k = std::max(1, c.n_experts_active);
    const double blocks_per_seq = (ctx + KV_BLOCK - 1) / KV_BLOCK;
    // ForwardPass's state: x, xb, out, logit rows (dim each), q, att, k, v,
    // router, logits.
    double bytes = mb * (4 * c.dim + 2 * q_dim + 2 * kv_dim + n_experts + c.vocab_size) * sizeof(float);
    bytes += 2.0 * max_rows * c.dim * sizeof(float);                        // expert rows x, y
    double widest = std::max(double(c.dim), q_dim), mlp_scratch = 0, shared = 0;
    for (int l = 0; l < c.n_layers; l++) {
        widest = std::max(widest, double(c.layer_mlp_hidden(l)));
        mlp_scratch = std::max(mlp_scratch, 2.0 * c.layer_mlp_hidden(l));
        if (c.layer_is_moe(l) && c.layer_mlp_hidden(l) > 0) shared = c.dim + 1.0;
    }
    bytes += mb * widest * 2;                              // GEMM inputs, bf16
    bytes += mb * (mlp_scratch + shared) * sizeof(float);  // the always-run MLP: scratch, shared output, gate
    bytes += 4 * sizeof(int) * mb + sizeof(float*) * (mb + mb * blocks_per_seq);  // batch metadata
    bytes += (std::max(double(max_rows), mb) + 2 * mb * k) * sizeof(int) + mb * k * sizeof(float);  // uploads
    bytes += mb * k * (sizeof(int) + sizeof(float));                           // routes
    if (quantized_dense) bytes += double(GPU_DEQUANT_PIECE_ELEMS) * 2;         // a piece of W in bf16
    if (c.attn_output_gate) bytes += mb * 3 * q_dim * sizeof(float);           // gated attention: q with gate, gate
    if (c.n_linear_layers() > 0) {
        // The Gated DeltaNet's buffers (qkv, z, o, b, a), its g and beta, its runs.
        const LinearAttentionShape& s = c.linear;
        bytes += mb * (s.conv_dim() + 2.0 * s.value_dim() + 4.0 * s.n_v_heads) * sizeof(float) + mb * 24;
    }
    return bytes + 32 * ALIGN;
}

bool cuda_budget(const DeviceOptions& o, const ModelConfig& c, const WeightFormat& f, int ctx, int max_batch,
                 double free_bytes, const std::string& device_name, int staging, PlacementInfo& info) {
    char line[512];
    if (o.gpu_memory_bytes > free_bytes) {
        std::snprintf(line, sizeof line, "%.2f GiB asked, but %s has %.2f GiB free", o.gpu_memory_bytes / GIB,
                      device_name.c_str(), free_bytes / GIB);
        throw OptionError(SessionOption::GPU_MEMORY, "", line);
    }
    info.staging_slots = staging;
    info.expert_bytes = cost_expert(c, 0, f).bytes;
    info.dense_bytes = cost_dense_bytes(c, f);
    info.kv_bytes = sequence_state_bytes(c, ctx);
    info.activation_bytes =
        cuda_activation_bytes(c, ctx, max_batch, max_batch * std::max(1, c.n_experts_active), f.quantized_dense);
    if (o.gpu_expert_share > 0) {
        // A share of experts: the budget is what they need, with the margin
        // of a budget of that size (a tenth, at most 1 GiB).
        const double experts =
            (std::round(o.gpu_expert_share * c.n_moe_layers() * c.n_experts) + staging) * info.expert_bytes;
        const double need = info.dense_bytes + info.kv_bytes + info.activation_bytes + experts;
        info.budget_bytes = std::min(need / 0.9, need + GIB);
        if (info.budget_bytes > free_bytes) {
            char share[32];
            std::snprintf(share, sizeof share, "%.0f%%", 100.0 * o.gpu_expert_share);
            std::snprintf(line, sizeof line, "needs %.2f GiB, but %s has %.2f GiB free", info.budget_bytes / GIB,
                          device_name.c_str(), free_bytes / GIB);
            throw OptionError(SessionOption::GPU_MEMORY, share, line);
        }
    } else {
        info.budget_bytes = o.gpu_memory_bytes > 0 ? o.gpu_memory_bytes : free_bytes;
    }
    info.margin_bytes = margin_for(info.budget_bytes);
    const double fixed = info.dense_bytes + info.kv_bytes + info.activation_bytes + info.margin_bytes;
    if (info.budget_bytes - fixed < staging * info.expert_bytes) return false;
    DeviceBudget b{info.budget_bytes, info.dense_bytes + info.activation_bytes, info.kv_bytes, info.margin_bytes,
                   info.expert_bytes, staging};
    info.capacity = expert_capacity(b, c.n_moe_layers(), c.n_experts);
    return true;
}

// The static plans see the MoE layers only (a dense layer of a Qwen model
// has no experts): planned over those rows, then spread back to all layers.
Residency plan_residency(const DeviceOptions& o, const ModelConfig& c, int capacity, PlacementInfo& info,
                         std::vector<uint64_t>* counts_out) {
    std::vector<int> moe;
    for (int l = 0; l < c.n_layers; l++)
        if (c.layer_is_moe(l)) moe.push_back(l);
    const int n_moe = int(moe.size());
    Residency planned;
    std::vector<uint64_t>& counts = *counts_out;  // the profile's, (n_layers, n_experts)
    counts.clear();
    if (!o.profile.empty()) {
        Profile profile = profile_read(o.profile);
        profile_check(profile, model_fingerprint(c), o.profile.string());
        counts = profile.counts;
        planned = static_plan_popularity(table_rows(counts, c.n_experts, moe), n_moe, c.n_experts, capacity);
        info.plan = PlanKind::POPULARITY;
        info.profile = o.profile.string();
    } else {
        planned = static_plan_even(n_moe, c.n_experts, capacity);
        info.plan = PlanKind::EVEN;
    }
    Residency residency(c.n_layers, c.n_experts);
    for (int i = 0; i < n_moe; i++)
        for (int e = 0; e < c.n_experts; e++) residency.set(moe[size_t(i)], e, planned.resident(i, e));
    if (!counts.empty()) info.expected_hit_rate = hit_rate(residency, counts);
    for (int l = 0; l < c.n_layers; l++)
        for (int e = 0; e < c.n_experts; e++) info.resident[size_t(l) * c.n_experts + e] = residency.resident(l, e);
    return residency;
}

void setup_placement(DeviceSetup& s, const DeviceOptions& o, const ModelConfig& c) {
    PlacementInfo& info = s.info;
    if (o.prefetch && !o.cache_policy)
        throw OptionError(SessionOption::PREFETCH, "on",
                          "needs a cache to prefetch into (a cache policy lru, lfu or score)");
    if (o.cache_policy == CachePolicy::BELADY)
        throw OptionError(SessionOption::CACHE_POLICY, "belady",
                          "offline only (it needs the future); a cache replay runs it");
    info.cache_slots = o.cache_policy ? int(std::lround(o.cache_share * info.capacity)) : 0;
    info.cache_policy = o.cache_policy;
    info.prefetch = o.prefetch;
    std::vector<uint64_t> counts;
    const Residency pinned = plan_residency(o, c, info.capacity - info.cache_slots, info, &counts);
    CachedPlacementConfig config;
    config.policy = o.cache_policy;
    config.cache_slots = info.cache_slots;
    config.options.scope = o.cache_scope;
    config.prefetch = o.prefetch;
    s.placement = make_cached_placement(c, s.latency, info.expert_bytes, pinned, counts, config);
    // The cache never holds more than the experts left unpinned.
    info.cache_slots = s.placement->cache_slots();
}

LatencyCurve cpu_curve_or_probe(const std::optional<LatencyCurve>& cached, const ModelConfig& c,
                                const ModelWeights& weights, ThreadPool& pool, PlacementInfo& info) {
    info.latency.cpu = cached ? CpuCurveSource::CALIBRATION : CpuCurveSource::PROBE;
    return cached ? *cached : probe_cpu_curve(c, weights, pool);
}

namespace {

// The dry run: an emulated device (a test double that computes on the
// CPU) with a budget in GiB or a share of all experts.
void emulated_setup(DeviceSetup& s, const DeviceOptions& o, int max_batch, const ModelConfig& c, const ModelWeights& weights, int ctx,
                    ThreadPool& pool, const std::optional<LatencyCurve>& cached_cpu) {
    PlacementInfo& info = s.info;
    constexpr SessionOption EMULATE_GPU = SessionOption::EMULATE_GPU;
    if (!c.is_moe()) throw OptionError(EMULATE_GPU, "", "the model has no experts to place (dense model)");
    if (o.emulate_gpu_bytes > 0 && o.emulate_gpu_expert_share > 0)
        throw OptionError(EMULATE_GPU, "", "give a size in GiB or a share of experts, not both");

    const int total = c.n_moe_layers() * c.n_experts;
    const int staging = EMULATED_STAGING_SLOTS;
    info.device = DeviceKind::EMULATED;
    info.staging_slots = staging;
    info.dense_bytes = cost_dense_bytes(c, weight_format(weights));
    info.kv_bytes = sequence_state_bytes(c, ctx);
    double device_expert_bytes = 0;
    if (o.emulate_gpu_bytes > 0) {
        info.budget_bytes = o.emulate_gpu_bytes;
        info.margin_bytes = margin_for(o.emulate_gpu_bytes);
        DeviceBudget b{info.budget_bytes, info.dense_bytes, info.kv_bytes, info.margin_bytes, info.expert_bytes, staging};
        info.capacity = expert_capacity(b, c.n_moe_layers(), c.n_experts);
        device_expert_bytes = info.budget_bytes - info.dense_bytes - info.kv_bytes - info.margin_bytes;
        if (device_expert_bytes < staging * info.expert_bytes) {
            char msg[320];
            std::snprintf(msg, sizeof msg,
                          "%.2f GiB leaves no room for %d staging slots of one expert (%.3f GiB) "
                          "after the dense weights (%.2f GiB), the KV cache (%.2f GiB) and the margin (%.2f GiB)",
                          info.budget_bytes / GIB, staging, info.expert_bytes / GIB, info.dense_bytes / GIB,
                          info.kv_bytes / GIB, info.margin_bytes / GIB);
            throw OptionError(EMULATE_GPU, "", msg);
        }
    } else {
        if (o.emulate_gpu_expert_share > 1)
            throw OptionError(EMULATE_GPU, "", "a share of experts must be at most 100%");
        info.capacity = int(std::lround(o.emulate_gpu_expert_share * total));
        device_expert_bytes = double(info.capacity + staging) * info.expert_bytes;
        info.budget_bytes = device_expert_bytes;
    }
    LatencyCurve cpu = cpu_curve_or_probe(cached_cpu, c, weights, pool, info);
    info.latency.device = DeviceCurveSource::NOMINAL;
    s.latency = latency_model_nominal_gpu(cpu, info.expert_bytes, cost_expert(c, 1).flops);
    s.latency.staging_slots = staging;
    setup_placement(s, o, c);

    double host_bytes = double(s.placement->n_slots() + staging) * info.expert_bytes;
    double available = double(host_memory_available());
    if (available > 0 && host_bytes > 0.8 * available) {
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "the emulated device keeps its %.2f GiB of experts in host memory, but only "
                      "%.2f GiB is available; give a smaller budget",
                      host_bytes / GIB, available / GIB);
        throw OptionError(EMULATE_GPU, "", msg);
    }
    s.backend = make_cpu_backend(c, weights, pool, ctx, max_batch * c.n_experts_active);
    // The CPU side's own kernel path and threads: a dry run of placement
    // costs no more than the CPU would, and its logits are bitwise the CPU's.
    s.device = std::make_unique<EmulatedDevice>(c, weights, device_slots(c, *s.placement), device_expert_bytes,
                                                max_batch, pool.size(), isa_active(), staging);
}

}  // namespace

DeviceSetup device_setup(const DeviceOptions& o, int max_batch, const ModelConfig& c, const ModelWeights& weights, int ctx,
                         ThreadPool& pool) {
    DeviceSetup s;
    PlacementInfo& info = s.info;
    info.n_layers = c.n_layers;
    info.n_experts = std::max(1, c.n_experts);
    info.resident.assign(size_t(info.n_layers) * info.n_experts, 0);
    const double one_expert_bytes = cost_expert(c, 0, weight_format(weights)).bytes;
    info.expert_bytes = one_expert_bytes;
    std::optional<Calibration> cal =
        c.is_moe() ? cached_calibration(c, weights, pool.size(), o.gpu_device, info) : std::nullopt;
    std::optional<LatencyCurve> cpu_curve;
    if (cal) cpu_curve = latency_model_from_calibration(*cal).cpu;
    if (o.emulate_gpu_bytes > 0 || o.emulate_gpu_expert_share > 0) {
        emulated_setup(s, o, max_batch, c, weights, ctx, pool, cpu_curve);
        return s;
    }

    // A CUDA device when there is one; else the CPU, and why.
    CpuServes why_cpu;
    bool gpu_tried = false;
    if (o.gpu_device < 0) {
        why_cpu.reason = CpuReason::NO_DEVICE_ASKED;
    } else if (!c.is_moe()) {
        why_cpu.reason = CpuReason::DENSE_MODEL;
    } else if (c.n_linear_layers() > 0 || c.attn_output_gate) {
        gpu_tried = true;  // asked for, and of no use to this model: --gpu-memory refuses, as for no GPU
        why_cpu.reason = CpuReason::MIXER_NOT_ON_GPU;
    } else {
        gpu_tried = true;
#ifdef MOE_HAVE_CUDA
        try {
            std::optional<LatencyModel> measured;
            if (cal && cal->has_device) measured = latency_model_from_calibration(*cal);
            if (cuda_setup(s, o, max_batch, c, weights, ctx, pool, cpu_curve, measured, &why_cpu)) return s;
        } catch (const GpuError& e) {
            why_cpu = {CpuReason::CUDA_FAILED, 0, 0, e.what()};
        }
#else
        why_cpu.reason = CpuReason::NO_CUDA;
#endif
    }
    // Whatever a failed CUDA attempt left behind goes; the CPU serves. A
    // budget too small keeps its device's name and figures: they say why.
    const PlacementInfo tried = std::move(s.info);
    s = DeviceSetup{};
    PlacementInfo& cpu = s.info;
    cpu.cpu = why_cpu;
    cpu.note = tried.note;
    cpu.latency.calibration = tried.latency.calibration;
    cpu.n_layers = c.n_layers;
    cpu.n_experts = std::max(1, c.n_experts);
    cpu.resident.assign(size_t(cpu.n_layers) * cpu.n_experts, 0);
    cpu.expert_bytes = one_expert_bytes;
    if (why_cpu.reason == CpuReason::BUDGET_TOO_SMALL) {
        cpu.device_name = tried.device_name;
        cpu.gpu_index = tried.gpu_index;
        cpu.staging_slots = tried.staging_slots;
        cpu.budget_bytes = tried.budget_bytes;
        cpu.dense_bytes = tried.dense_bytes;
        cpu.kv_bytes = tried.kv_bytes;
        cpu.activation_bytes = tried.activation_bytes;
        cpu.margin_bytes = tried.margin_bytes;
    }
    if (gpu_tried && o.gpu_required) throw NoDeviceError(SessionOption::GPU_REQUIRED, cpu);
    // One rule for every placement option: without a device there is nothing to place.
    if (!o.placement_set.empty()) throw NoDeviceError(o.placement_set.front(), cpu);
    if (!o.profile.empty()) throw NoDeviceError(SessionOption::PROFILE, cpu);
    // Every expert runs on the CPU, called directly: nothing is planned or
    // timed. The latency model (a calibration's when there is one) is only
    // reported.
    if (cpu_curve) s.latency.cpu = *cpu_curve;
    cpu.latency.cpu = cpu_curve ? CpuCurveSource::CALIBRATION : CpuCurveSource::NONE;
    s.backend = make_cpu_backend(c, weights, pool, ctx, max_batch * std::max(1, c.n_experts_active));
    return s;
}
