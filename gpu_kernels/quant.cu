// Kernels over block-quantized weights: the GEMV that reads them in place
// (few tokens), their dequantization to bf16 (for the cuBLAS GEMM of many
// tokens) and the embedding lookup of a quantized table. Every block is
// decoded by quant_group32 (cpu_kernels/quant.h), the function the CPU's
// dequantize_row runs, one group of 32 weights at a time; kernels first,
// launchers after.
#include <algorithm>
#include <stdexcept>

#include "cpu_kernels/quant.h"
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/gpu_kernels.h"

namespace {

constexpr int THREADS = 256;
constexpr int GEMV_WARPS = THREADS / 32;  // rows of W per thread block

unsigned blocks_for(long n) { return unsigned(std::min<long>((n + THREADS - 1) / THREADS, 65535L * 8)); }

// One warp per row r of W: lane l decodes groups l, l + 32, ... and dots
// each with the same 32 columns of every row of x; a warp shuffle sums the
// lanes. m <= GPU_QUANT_GEMV_MAX_M.
__global__ void matvec_quant_kernel(float* y, const float* x, const uint8_t* w, DType type, size_t row_bytes, int m,
                                    int n, int k) {
    const int lane = threadIdx.x % 32;
    const long r = long(blockIdx.x) * GEMV_WARPS + threadIdx.x / 32;
    if (r >= n) return;  // the whole warp: r is the warp's
    float acc[GPU_QUANT_GEMV_MAX_M] = {};
    float v[32];
    for (int g = lane; g < k / 32; g += 32) {
        quant_group32(type, w, row_bytes, r, g, v);
#pragma unroll
        for (int t = 0; t < GPU_QUANT_GEMV_MAX_M; t++) {
            if (t >= m) break;
            const float* xt = x + long(t) * k + 32L * g;
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < 32; i++) s += v[i] * xt[i];
            acc[t] += s;
        }
    }
#pragma unroll
    for (int t = 0; t < GPU_QUANT_GEMV_MAX_M; t++) {
        if (t >= m) break;
        float s = acc[t];
        for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) y[long(t) * n + r] = s;
    }
}

// One thread per group of 32 weights of rows [r0, r0 + rows): out (rows, k) bf16.
__global__ void dequant_bf16_kernel(bf16* out, const uint8_t* w, DType type, size_t row_bytes, int k, long r0,
                                    long groups) {
    const int per_row = k / 32;
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < groups; i += long(gridDim.x) * blockDim.x) {
        const long r = i / per_row;
        const int g = int(i % per_row);
        float v[32];
        quant_group32(type, w, row_bytes, r0 + r, g, v);
        bf16* o = out + r * k + 32L * g;
#pragma unroll
        for (int j = 0; j < 32; j++) o[j] = f32_to_bf16(v[j]);
    }
}

// One thread per group of 32 of the n looked-up rows: x (n, dim) fp32.
__global__ void embed_quant_kernel(float* x, const int* tokens, const uint8_t* table, DType type, size_t row_bytes,
                                   int n, int dim) {
    const int per_row = dim / 32;
    const long groups = long(n) * per_row;
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < groups; i += long(gridDim.x) * blockDim.x) {
        const long t = i / per_row;
        const int g = int(i % per_row);
        quant_group32(type, table, row_bytes, tokens[t], g, x + t * dim + 32L * g);
    }
}

void require_quantized(const WeightView& w, const char* what) {
    if (!dtype_quantized(w.type))
        throw std::invalid_argument(std::string(what) + ": " + dtype_name(w.type) + " weights are not block-quantized");
}

}  // namespace

void gpu_matvec_quant(float* y, const float* x, const WeightView& w, int m, GpuStream stream) {
    require_quantized(w, "gpu_matvec_quant");
    if (m > GPU_QUANT_GEMV_MAX_M)
        throw std::invalid_argument("gpu_matvec_quant: " + std::to_string(m) + " rows of x, more than " +
                                    std::to_string(GPU_QUANT_GEMV_MAX_M));
    if (m <= 0 || w.rows <= 0) return;
    const unsigned grid = unsigned((w.rows + GEMV_WARPS - 1) / GEMV_WARPS);
    matvec_quant_kernel<<<grid, THREADS, 0, stream>>>(y, x, static_cast<const uint8_t*>(w.data), w.type, w.row_bytes,
                                                      m, int(w.rows), int(w.cols));
    CUDA_LAUNCH_CHECK();
}

void gpu_dequant_bf16(bf16* out, const WeightView& w, int64_t r0, int64_t r1, GpuStream stream) {
    require_quantized(w, "gpu_dequant_bf16");
    const long groups = long(r1 - r0) * (w.cols / 32);
    if (groups <= 0) return;
    dequant_bf16_kernel<<<blocks_for(groups), THREADS, 0, stream>>>(out, static_cast<const uint8_t*>(w.data), w.type,
                                                                     w.row_bytes, int(w.cols), long(r0), groups);
    CUDA_LAUNCH_CHECK();
}

void gpu_embed_quant(float* x, const int* tokens, const WeightView& table, int n, GpuStream stream) {
    require_quantized(table, "gpu_embed");
    if (n <= 0) return;
    embed_quant_kernel<<<blocks_for(long(n) * (table.cols / 32)), THREADS, 0, stream>>>(
        x, tokens, static_cast<const uint8_t*>(table.data), table.type, table.row_bytes, n, int(table.cols));
    CUDA_LAUNCH_CHECK();
}
