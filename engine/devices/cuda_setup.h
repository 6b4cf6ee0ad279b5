// CUDA device setup at load (CUDA-only; called by device_setup when built
// with CUDA): the CUDA backend, the device budget, the static plan of
// resident experts, the latency model and the CudaExpertDevice.
#pragma once
#include <optional>

#include "engine/devices/device_setup.h"

// Fills s for CUDA device o.gpu_device and returns true (measured:
// the calibration's latency model of this device, when `calibrate` made one;
// s.info.latency.calibration names the file when one was cached); returns
// false with *why_not set when there is no such device or its budget is too
// small (s.info keeps the budget's figures; the caller falls back to the CPU
// or refuses). Throws OptionError for a budget that cannot work and GpuError
// when CUDA fails.
bool cuda_setup(DeviceSetup& s, const DeviceOptions& o, int max_batch, const ModelConfig& c, const ModelWeights& weights, int ctx,
                ThreadPool& pool, const std::optional<LatencyCurve>& cached_cpu,
                const std::optional<LatencyModel>& measured, CpuServes* why_not);
