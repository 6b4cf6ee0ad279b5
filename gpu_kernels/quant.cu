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

// One warp per row r of W (a block's 8 warps: one row group of the _R8
// types, whose bytes lie together). The block walks k in chunks of
// GEMV_CHUNK columns: it stages that chunk of every row of x in shared
// memory (coalesced loads, one padding float per 32 so that lane l reading
// its group's 32 values hits bank (i + l) % 32: no conflicts), then lane l
// decodes the chunk's group l of its row once and dots it with every staged
// row of x; a warp shuffle sums the lanes. m <= GPU_QUANT_GEMV_MAX_M.
constexpr int GEMV_CHUNK = 32 * 32;                        // columns per chunk: one group per lane
constexpr int GEMV_STRIDE = GEMV_CHUNK + GEMV_CHUNK / 32;  // floats of one staged row of x, padded

__global__ void matvec_quant_kernel(float* y, const float* x, const uint8_t* w, DType type, size_t row_bytes, int m,
                                    int n, int k) {
    extern __shared__ float xs[];  // (m, GEMV_STRIDE)
    const int lane = threadIdx.x % 32;
    const long r = long(blockIdx.x) * GEMV_WARPS + threadIdx.x / 32;
    const bool row = r < n;  // every warp stays for the block's barriers
    float acc[GPU_QUANT_GEMV_MAX_M] = {};
    float v[32];
    for (int c0 = 0; c0 < k; c0 += GEMV_CHUNK) {
        const int cols = min(GEMV_CHUNK, k - c0);  // a multiple of 32
        __syncthreads();  // the last chunk's reads are done
        for (int i = threadIdx.x; i < m * GEMV_CHUNK; i += blockDim.x) {
            const int t = i / GEMV_CHUNK, e = i % GEMV_CHUNK;
            if (e < cols) xs[t * GEMV_STRIDE + e + e / 32] = x[long(t) * k + c0 + e];
        }
        __syncthreads();
        if (!row || 32 * lane >= cols) continue;
        quant_group32(type, w, row_bytes, r, c0 / 32 + lane, v);
        const float* xl = xs + 33 * lane;  // element 32 lane + i of the chunk sits at 33 lane + i
#pragma unroll
        for (int t = 0; t < GPU_QUANT_GEMV_MAX_M; t++) {
            if (t >= m) break;
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < 32; i++) s += v[i] * xl[t * GEMV_STRIDE + i];
            acc[t] += s;
        }
    }
    if (!row) return;
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
        // Four 16-byte stores (out is the scratch's, 256-byte aligned; k a multiple of 32).
        uint4* o = reinterpret_cast<uint4*>(out + r * k + 32L * g);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            uint32_t p[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                p[j] = uint32_t(f32_to_bf16(v[8 * q + 2 * j])) | uint32_t(f32_to_bf16(v[8 * q + 2 * j + 1])) << 16;
            o[q] = make_uint4(p[0], p[1], p[2], p[3]);
        }
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
    const size_t smem = size_t(m) * GEMV_STRIDE * sizeof(float);  // 33 KiB at m = 8
    matvec_quant_kernel<<<grid, THREADS, smem, stream>>>(y, x, static_cast<const uint8_t*>(w.data), w.type, w.row_bytes,
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
