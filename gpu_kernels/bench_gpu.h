// Measurements of the current CUDA device for `moe-server bench gpu`,
// `calibrate` and the GPU ceilings printed beside every GPU benchmark:
// host-to-device copy rates (pinned, pageable, registered), device memory
// bandwidth, cuBLAS bf16 GEMM rate, and the expert FFN over n tokens with
// its weights resident (bf16 or block-quantized). Timed with CUDA events; medians of several runs.
// Plain numbers out (JSON belongs to server/). CUDA-only (declared in every
// build, defined only with CUDA).
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "cpu_kernels/dtype.h"

struct GpuCeilings {
    double h2d_pinned_gbs = 0;      // host -> device from cudaHostAlloc memory
    double h2d_pageable_gbs = 0;    // from ordinary (malloc'd) memory
    double h2d_registered_gbs = 0;  // from ordinary memory page-locked by cudaHostRegister
    double d2h_pinned_gbs = 0;      // device -> host into pinned memory
    double device_gbs = 0;          // device-to-device copy, bytes read + written
    double bf16_tflops = 0;         // cuBLAS bf16 x bf16 -> fp32, gemm_size cubed
    size_t copy_bytes = 0;          // bytes per copy measured
    int gemm_size = 0;
};

// The current device's ceilings; copy_bytes per copy (default 256 MiB).
GpuCeilings gpu_measure_ceilings(size_t copy_bytes = size_t(256) << 20, int gemm_size = 8192);

// Median ms of one host -> device copy of each size from pinned memory.
std::vector<double> gpu_time_h2d_pinned(const std::vector<size_t>& sizes, int reps);

// Host memory kept busy by the copy engine, as copied experts keep it: from
// construction on, host-to-device copies of `bytes` from pinned memory, one
// after another on a stream and a thread of their own, until stop() (or
// destruction), which returns the copies' rate in GB/s. For `calibrate`'s
// CPU curve beside copies. Throws GpuError when CUDA fails (the thread's
// failure is rethrown by stop()).
class GpuCopyLoad {
public:
    explicit GpuCopyLoad(size_t bytes);
    ~GpuCopyLoad();
    GpuCopyLoad(const GpuCopyLoad&) = delete;
    GpuCopyLoad& operator=(const GpuCopyLoad&) = delete;
    double stop();

private:
    struct State;
    std::unique_ptr<State> state_;
};

// Median ms of gpu_expert_ffn over n tokens for each n in ns, with one
// expert's weights (host views w1, w3 (hidden, dim), w2 (dim, hidden), of
// any type gpu_matmul reads) copied to device memory first.
std::vector<double> gpu_time_expert_ffn(const WeightView& w1, const WeightView& w3, const WeightView& w2,
                                        const std::vector<int>& ns, int reps);
