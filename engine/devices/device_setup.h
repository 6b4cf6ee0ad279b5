// Device setup at load time: turns DeviceOptions (with the session's max_batch) into a
// budget, a static plan (popularity profile or even spread), a latency model
// and the device itself: a CUDA device when there is one (cuda_setup.h),
// the emulated one for a dry run (a test double), or none (CPU only). It
// records facts in PlacementInfo (reason codes, figures, paths) and names
// options by SessionOption in its errors; the words are the caller's.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "cpu_kernels/thread_pool.h"
#include "engine/devices/backend.h"
#include "engine/devices/expert_device.h"
#include "engine/model/cost.h"
#include "engine/model/weights.h"
#include "engine/devices/device_options.h"
#include "placement/cached_placement.h"
#include "placement/latency_model.h"
#include "placement/residency.h"

struct DeviceSetup {
    PlacementInfo info;
    LatencyModel latency;
    std::unique_ptr<Backend> backend;      // where the dense ops run
    std::unique_ptr<ExpertDevice> device;  // null: every expert on the CPU
    // With a device: what is pinned and cached where (the hybrid executor's
    // placement; the device's slots were uploaded from it).
    std::unique_ptr<CachedPlacement> placement;
};

// Shared by the emulated and the CUDA setups:
// the static plan of `capacity` resident experts (profile or even spread),
// recorded in info (plan, profile, hit rate, resident flags); *counts gets
// the profile's (n_layers, n_experts) counts (empty without one);
Residency plan_residency(const DeviceOptions& o, const ModelConfig& c, int capacity, PlacementInfo& info,
                         std::vector<uint64_t>* counts);
// The device's experts split into pinned and cache slots (o.cache_policy,
// o.cache_share of info.capacity), the pinned planned by plan_residency,
// and the placement over them with the latency model s.latency (set it
// first); fills s.placement and info's cache fields. OptionError for
// prefetch without a cache policy, and for Belady's (offline only).
void setup_placement(DeviceSetup& s, const DeviceOptions& o, const ModelConfig& c);
// the CPU expert curve: the cached calibration (when cached), or a quick
// probe; info.latency.cpu says which.
LatencyCurve cpu_curve_or_probe(const std::optional<LatencyCurve>& cached, const ModelConfig& c,
                                const ModelWeights& weights, ThreadPool& pool, PlacementInfo& info);

// Device bytes the CUDA backend needs besides its weights and the KV cache:
// ForwardPass's activations, the expert rows (max_rows of dim, x and y), the
// GEMM inputs in bf16, the batch metadata and the routing uploads, and with
// quantized dense weights the bf16 piece they are dequantized into
// (gpu_kernels/gpu_limits.h). Plain arithmetic, in every build (the CUDA
// backend allocates exactly these).
double cuda_activation_bytes(const ModelConfig& c, int ctx, int max_batch, int max_rows, bool quantized_dense);

// The CUDA device budget: from the device's free memory and the flags
// (o.gpu_memory_bytes, or o.gpu_expert_share of all experts resident, or
// all free memory) and the weights' format f, fills info's expert bytes, budget, dense, KV, activation and margin
// bytes, the staging slots and the resident capacity. Returns false when
// the budget cannot work (too small for the dense part and the staging
// slots, CpuReason::BUDGET_TOO_SMALL, info's figures saying by how much: the
// caller falls back to the CPU or refuses). Throws OptionError (GPU_MEMORY)
// when the options ask for more than is free. Pure arithmetic, tested
// without a GPU.
bool cuda_budget(const DeviceOptions& o, const ModelConfig& c, const WeightFormat& f, int ctx, int max_batch,
                 double free_bytes, const std::string& device_name, int staging, PlacementInfo& info);

// Throws OptionError for a budget too small for one expert or a device on a
// dense model, NoDeviceError for an option that needs a device where the CPU
// serves, MoeError for a bad profile.
DeviceSetup device_setup(const DeviceOptions& options, int max_batch, const ModelConfig& config, const ModelWeights& weights,
                         int ctx, ThreadPool& pool);
