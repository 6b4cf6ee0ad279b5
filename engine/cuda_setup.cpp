// CUDA device setup (see cuda_setup.h). The budget is the device memory
// moe-server may use (--gpu-memory, default: free at load); from it come the
// dense weights, the activations, the KV cache and a margin, exactly what
// CudaBackend and KvCache allocate there; what is left holds the staging
// slots and the resident experts.
#include "engine/cuda_setup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/cost.h"
#include "engine/cuda_backend.h"
#include "engine/cuda_expert_device.h"
#include "engine/errors.h"
#include "gpu_kernels/device.h"

namespace {

constexpr double GIB = double(1u << 30);

}  // namespace

bool cuda_setup(DeviceSetup& s, const EngineOptions& o, const ModelConfig& c, const ModelWeights& weights, int ctx,
                ThreadPool& pool, const std::optional<LatencyCurve>& cached_cpu,
                const std::optional<LatencyModel>& measured, const std::string& calibration, std::string* why_not) {
    const int index = o.device.gpu_device;
    std::vector<GpuDevice> devices = gpu_devices();
    if (devices.empty()) {
        *why_not = "no CUDA device found";
        return false;
    }
    if (index >= int(devices.size())) {
        *why_not = "no CUDA device " + std::to_string(index) + " (" + std::to_string(devices.size()) + " found)";
        return false;
    }
    const GpuDevice& d = devices[size_t(index)];
    PlacementInfo& info = s.info;
    char line[512];
    if (o.device.gpu_memory_bytes > double(d.free_bytes)) {
        std::snprintf(line, sizeof line, "--gpu-memory: %.2f GiB asked, but %s has %.2f GiB free", o.device.gpu_memory_bytes / GIB,
                      d.name.c_str(), double(d.free_bytes) / GIB);
        throw MoeError(line);
    }

    const int staging = DEFAULT_STAGING_SLOTS;
    const int max_rows = o.max_batch * std::max(1, c.n_experts_active);
    info.device = "cuda";
    info.device_name = d.name + " (cuda:" + std::to_string(index) + ")";
    info.staging_slots = staging;
    info.dense_bytes = cost_dense_bytes(c);
    info.kv_bytes = kv_cache_bytes(c, ctx);
    info.activation_bytes = double(CudaBackend::activation_bytes_for(c, ctx, o.max_batch, max_rows));
    if (o.device.gpu_expert_share > 0) {
        // A share of experts: the budget is what they need, with the margin
        // of a budget of that size (a fixed point: at most 1 GiB).
        const double experts = (std::round(o.device.gpu_expert_share * c.n_layers * c.n_experts) + staging) *
                               info.expert_bytes;
        const double need = info.dense_bytes + info.kv_bytes + info.activation_bytes + experts;
        info.budget_bytes = std::min(need / 0.9, need + GIB);
        if (info.budget_bytes > double(d.free_bytes)) {
            std::snprintf(line, sizeof line, "--gpu-memory %.0f%%: needs %.2f GiB, but %s has %.2f GiB free",
                          100.0 * o.device.gpu_expert_share, info.budget_bytes / GIB, d.name.c_str(),
                          double(d.free_bytes) / GIB);
            throw MoeError(line);
        }
    } else {
        info.budget_bytes = o.device.gpu_memory_bytes > 0 ? o.device.gpu_memory_bytes : double(d.free_bytes);
    }
    info.margin_bytes = device_margin_bytes(info.budget_bytes);
    const double fixed = info.dense_bytes + info.kv_bytes + info.activation_bytes + info.margin_bytes;
    if (info.budget_bytes - fixed < staging * info.expert_bytes) {
        std::snprintf(line, sizeof line,
                      "%.2f GiB of %s does not hold the dense weights (%.2f GiB), the KV cache (%.2f GiB), the "
                      "activations (%.2f GiB), the margin (%.2f GiB) and %d staging slots of one expert (%.3f GiB each)",
                      info.budget_bytes / GIB, info.device_name.c_str(), info.dense_bytes / GIB, info.kv_bytes / GIB,
                      info.activation_bytes / GIB, info.margin_bytes / GIB, staging, info.expert_bytes / GIB);
        *why_not = line;
        return false;
    }
    DeviceBudget b{info.budget_bytes, info.dense_bytes + info.activation_bytes, info.kv_bytes, info.margin_bytes,
                   info.expert_bytes, staging};
    info.capacity = expert_capacity(b, c.n_layers, c.n_experts);
    Residency residency = plan_residency(o.device, c, info.capacity, info);

    LatencyCurve cpu = cpu_curve_or_probe(cached_cpu, c, weights, pool, calibration, &info.latency_source);
    // The device side: the calibration's device curves when `calibrate` has
    // measured this device, else the nominal GPU (placement/README.md).
    if (measured) {
        s.latency = *measured;
        s.latency.cpu = cpu;
        info.latency_source += "; device: measured by 'moe-server calibrate'";
    } else {
        s.latency = latency_model_nominal_gpu(cpu, info.expert_bytes, cost_expert(c, 1).flops);
        info.latency_source += "; device: nominal GPU until 'moe-server calibrate' measures this one";
    }
    s.latency.staging_slots = staging;

    auto backend = std::make_unique<CudaBackend>(c, weights, index, ctx, o.max_batch, max_rows);
    auto device = std::make_unique<CudaExpertDevice>(c, weights, residency, info.budget_bytes - fixed, o.max_batch,
                                                     backend->stream(), backend->blas(), staging);
    info.copy_source = device->copy_source().describe();
    s.backend = std::move(backend);
    s.device = std::move(device);
    return true;
}
