// CUDA device setup (see cuda_setup.h). The budget is the device memory
// moe-server may use (--gpu-memory, default: free at load); from it come the
// dense weights, the activations, the KV cache and a margin, exactly what
// CudaBackend and KvCache allocate there; what is left holds the staging
// slots and the resident experts.
#include "engine/devices/cuda_setup.h"

#include <algorithm>

#include "base/errors.h"
#include "engine/devices/cuda_backend.h"
#include "engine/devices/cuda_expert_device.h"
#include "engine/devices/hybrid_executor.h"
#include "engine/model/cost.h"
#include "gpu_kernels/device.h"

bool cuda_setup(DeviceSetup& s, const DeviceOptions& o, int max_batch, const ModelConfig& c, const ModelWeights& weights, int ctx,
                ThreadPool& pool, const std::optional<LatencyCurve>& cached_cpu,
                const std::optional<LatencyModel>& measured, CpuServes* why_not) {
    const int index = o.gpu_device;
    std::vector<GpuDevice> devices = gpu_devices();
    if (devices.empty()) {
        *why_not = {CpuReason::NO_CUDA_DEVICE, index, 0, ""};
        return false;
    }
    if (index >= int(devices.size())) {
        *why_not = {CpuReason::NO_SUCH_DEVICE, index, int(devices.size()), ""};
        return false;
    }
    const GpuDevice& d = devices[size_t(index)];
    PlacementInfo& info = s.info;
    const int staging = DEFAULT_STAGING_SLOTS;
    const int max_rows = max_batch * std::max(1, c.n_experts_active);
    info.device = DeviceKind::CUDA;
    info.device_name = d.name;
    info.gpu_index = index;
    if (!cuda_budget(o, c, weight_format(weights), ctx, max_batch, double(d.free_bytes),
                     d.name + " (cuda:" + std::to_string(index) + ")",
                     staging, info)) {
        *why_not = {CpuReason::BUDGET_TOO_SMALL, index, int(devices.size()), ""};
        return false;
    }
    const double fixed = info.dense_bytes + info.kv_bytes + info.activation_bytes + info.margin_bytes;
    LatencyCurve cpu = cpu_curve_or_probe(cached_cpu, c, weights, pool, info);
    // The device side: the calibration's device curves when `calibrate` has
    // measured this device, else the nominal GPU (placement/README.md).
    if (measured) {
        s.latency = *measured;
        s.latency.cpu = cpu;
        info.latency.device = DeviceCurveSource::CALIBRATION;
    } else {
        s.latency = latency_model_nominal_gpu(cpu, info.expert_bytes, cost_expert(c, 1).flops);
        info.latency.device = DeviceCurveSource::NOMINAL;
    }
    s.latency.staging_slots = staging;
    setup_placement(s, o, c);

    auto backend = std::make_unique<CudaBackend>(c, weights, index, ctx, max_batch, max_rows);
    auto device = std::make_unique<CudaExpertDevice>(c, weights, device_slots(c, *s.placement), s.placement->n_pinned(),
                                                     info.budget_bytes - fixed, max_batch, backend->stream(),
                                                     backend->blas(), staging);
    info.copy_source = device->copy_source();
    s.backend = std::move(backend);
    s.device = std::move(device);
    return true;
}
