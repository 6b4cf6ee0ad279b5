// The device side of a calibration on a CUDA device (see calibration.h).
// Compiled only with CUDA; nocuda_calibration.cpp is its twin without.
#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

#include "engine/devices/calibration.h"
#include "engine/devices/expert_timing.h"
#include "gpu_kernels/device.h"
#include "gpu_kernels/gpu_runtime.h"

namespace {

// Pinned host-to-device copies of 1/4, 1/2, 1 and 2 experts' bytes: (bytes, median ms) each.
std::vector<TimingPoint> time_expert_copies(double expert_bytes, int reps) {
    std::vector<size_t> sizes;
    for (double f : {0.25, 0.5, 1.0, 2.0}) sizes.push_back(size_t(f * expert_bytes));
    std::vector<double> ms = gpu_time_h2d_pinned(sizes, reps);
    std::vector<TimingPoint> points;
    for (size_t i = 0; i < sizes.size(); i++) points.push_back({double(sizes[i]), std::max(ms[i], 1e-6)});
    return points;
}

}  // namespace

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
    std::vector<TimingPoint> copies = time_expert_copies(cal.expert_bytes, device_reps);
    CopyCurve copy = copy_curve_fit(copies);
    GpuCeilings ceilings = gpu_measure_ceilings(size_t(64) << 20, 4096);
    cal.has_device = true;
    cal.device_points = points;
    cal.device = fit;
    cal.copy_points = copies;
    cal.copy = copy;
    return ceilings;
}

void calibration_measure_side_by_side(Calibration& cal, const ModelConfig& config,
                                      const std::vector<ExpertWeights>& cycle, ThreadPool& pool, int reps) {
    if (!cal.has_device) return;
    // The CPU experts while expert-sized copies stream from pinned memory.
    std::vector<TimingPoint> cpu;
    {
        GpuCopyLoad copies(size_t(std::min(cal.expert_bytes, double(size_t(1) << 30))));
        cpu = measure_expert_ffn(config, {cycle}, calibration_token_counts(), reps, pool)[0];
        copies.stop();
    }
    // The copies while the CPU streams one-token experts (its most bytes per
    // second) on every thread, from a thread of its own.
    std::atomic<bool> running{true};
    std::exception_ptr cpu_error;
    std::thread cpu_load([&] {
        try {
            while (running.load(std::memory_order_relaxed)) measure_expert_ffn(config, {cycle}, {1}, 1, pool);
        } catch (...) {
            cpu_error = std::current_exception();
        }
    });
    std::vector<TimingPoint> copies;
    try {
        copies = time_expert_copies(cal.expert_bytes, std::max(5, reps));
    } catch (...) {
        running = false;
        cpu_load.join();
        throw;
    }
    running = false;
    cpu_load.join();
    if (cpu_error) std::rethrow_exception(cpu_error);
    cal.has_side_by_side = true;
    cal.cpu_beside_copies = expert_ffn_curve_fit(cpu);
    cal.cpu_beside_copies_points = std::move(cpu);
    cal.copy_beside_cpu = copy_curve_fit(copies);
    cal.copy_beside_cpu_points = std::move(copies);
}
