// The device side of a calibration on a CUDA device (see calibration.h).
// Compiled only with CUDA; nocuda_calibration.cpp is its twin without.
#include <algorithm>

#include "engine/devices/calibration.h"
#include "gpu_kernels/device.h"
#include "gpu_kernels/gpu_runtime.h"

std::optional<GpuCeilings> calibration_measure_device(Calibration& cal, const ExpertWeights& expert, int gpu_device,
                                                      int reps) {
    std::vector<GpuDevice> devices = gpu_devices();
    if (gpu_device < 0 || gpu_device >= int(devices.size())) return std::nullopt;
    gpu_set_device(gpu_device);
    const int device_reps = std::max(5, reps);
    std::vector<int> ns = calibration_token_counts();
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
    GpuCeilings ceilings = gpu_measure_ceilings(size_t(64) << 20, 4096);
    cal.has_device = true;
    cal.device_points = points;
    cal.device = fit;
    cal.copy_points = copies;
    cal.copy = copy;
    return ceilings;
}
