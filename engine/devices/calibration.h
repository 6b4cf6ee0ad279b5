// The measuring behind `moe-server calibrate` and `bench latency`: this
// machine's ceiling, the CPU expert FFN over a model's real expert weights at
// n = 1, 2, 4, ..., 256 tokens (expert_timing.h, medians of `reps` sweeps),
// the fits of the latency model (placement/latency_model.h) and, with a CUDA
// device, the device side. Results are data: a complete Calibration record
// (profiles/calibration.h) and the check passes of `bench latency`, printed
// by apps/cli_calibrate.cpp. Prints nothing and reads or writes no file (the
// cache is the caller's, profiles/calibration.h). The device side is
// cuda_calibration.cpp's (nocuda_calibration.cpp without CUDA).
#pragma once
#include <optional>
#include <vector>

#include "cpu_kernels/bench.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "gpu_kernels/bench_gpu.h"
#include "placement/latency_model.h"
#include "profiles/calibration.h"

// Sweeps over n a calibration repeats by default; each n keeps its median.
constexpr int CALIBRATION_REPS = 21;

// 1, 2, 4, ..., 256: the token counts a calibration measures.
std::vector<int> calibration_token_counts();

// A calibration measured now, and the CUDA device's ceilings measured beside it.
struct CalibrationResult {
    // Complete: the key fields (calibration_key_fields with pool.size()
    // threads), the ceiling, one expert's bytes and FLOPs, the CPU points and
    // fit, and the device side when has_device.
    Calibration calibration;
    // Copy rates, device memory and cuBLAS rate of the device measured (only
    // when calibration.has_device).
    std::optional<GpuCeilings> device_ceilings;
};

// Measures this machine for the experts of (config, weights) on pool's
// threads: the ceiling (about 2 s), the CPU expert FFN over a cycle of
// experts far larger than the caches, fitted with the active kernels'
// large_from, and, when gpu_device names a CUDA device,
// calibration_measure_device and calibration_measure_side_by_side. reps:
// sweeps over n (at least 1).
CalibrationResult calibration_measure(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool,
                                      int gpu_device, int reps);

// The device side of a calibration: the expert FFN on CUDA device gpu_device
// at every calibration_token_counts() n with `expert`'s weights resident, and
// host-to-device copies from pinned memory of 1/4, 1/2, 1 and 2 times
// cal.expert_bytes, each fitted (max(5, reps) runs, medians); then the
// device's ceilings (64 MiB copies, a 4096-cubed GEMM). Sets cal's device
// fields (has_device true) and returns the ceilings; nothing, cal untouched,
// without that device (-1, a build without CUDA, a machine without it).
// Throws GpuError when CUDA fails.
std::optional<GpuCeilings> calibration_measure_device(Calibration& cal, const ExpertWeights& expert, int gpu_device,
                                                      int reps);

// Side by side (after calibration_measure_device, only when cal.has_device;
// a build without CUDA does nothing): the CPU expert FFN over `cycle` at
// every calibration_token_counts() n while the copy engine streams
// expert-sized copies from pinned memory (GpuCopyLoad), and the copies of
// calibration_measure_device's sizes while the CPU runs one-token experts
// over `cycle` on every thread of pool; each fitted. Sets cal's side-by-side
// fields (has_side_by_side true). Throws GpuError when CUDA fails.
void calibration_measure_side_by_side(Calibration& cal, const ModelConfig& config,
                                      const std::vector<ExpertWeights>& cycle, ThreadPool& pool, int reps);

// `bench latency`: a fit on one set of experts checked against another.
struct LatencyCheck {
    Ceiling ceiling;                        // measured in the same run
    LatencyCurve roofline;                  // one expert's roofline at that ceiling
    std::vector<int> ns;                    // calibration_token_counts()
    std::vector<TimingPoint> fit_points;    // medians at each n, the fitting pass
    std::vector<TimingPoint> check_points;  // the checking pass, at the same n
    LatencyCurve fit;                       // fitted to fit_points (the active kernels' large_from)
    // The check pass ran other experts than the fit pass (false: a model
    // with a single expert, checked on the same one).
    bool independent_experts = true;
};

// Fits on the even (layer, expert) pairs and checks on the odd ones, their
// sweeps interleaved so both see the same load on a shared machine; the
// ceiling first. reps: sweeps over n.
LatencyCheck latency_check_measure(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool, int reps);
