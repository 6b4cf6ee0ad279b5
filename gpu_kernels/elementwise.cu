// Element- and row-wise kernels: bf16 conversion, embedding lookup, RMSNorm,
// RoPE (partial rotary too), the gated attention's head split and sigmoid
// gate, residual add, bias add, SiLU-mul, sigmoid row scaling, row gather,
// the MoE combine and KV-cache writes. Each applies a gpu_math.h function (or a plain copy) per element;
// kernels first, launchers after.
#include <algorithm>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/gpu_kernels.h"
#include "gpu_kernels/gpu_math.h"

namespace {

constexpr int THREADS = 256;

// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
unsigned blocks_for(long n) { return unsigned(std::min<long>((n + THREADS - 1) / THREADS, 65535L * 8)); }

__global__ void f32_to_bf16_kernel(bf16* out, const float* x, long n) {
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x)
        out[i] = f32_to_bf16(x[i]);
}

__global__ void embed_kernel(float* x, const int* tokens, const bf16* table, int n, int dim) {
    const long total = long(n) * dim;
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < total; i += long(gridDim.x) * blockDim.x) {
        const long row = i / dim, col = i % dim;
        x[i] = bf16_to_f32(table[long(tokens[row]) * dim + col]);
    }
}

// One block per row: the sum of squares reduced in shared memory.
__global__ void rmsnorm_kernel(float* out, const float* x, const float* weight, int dim, float eps) {
    __shared__ float partial[THREADS];
    const float* xr = x + long(blockIdx.x) * dim;
    float* outr = out + long(blockIdx.x) * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (int(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float scale = gm_rms_scale(partial[0], dim, eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) outr[i] = xr[i] * scale * weight[i];
}

// One thread per (row, head, pair) of the head's first rot_dim dims.
__global__ void rope_kernel(float* x, const int* positions, int rows, int n_heads, int head_dim, int rot_dim,
                            const double* inv_freq, float mscale) {
    const int half = rot_dim / 2;
    const long total = long(rows) * n_heads * half;
    for (long t = blockIdx.x * long(blockDim.x) + threadIdx.x; t < total; t += long(gridDim.x) * blockDim.x) {
        const int i = int(t % half);
        const long head = t / half;  // row * n_heads + h
        const int row = int(head / n_heads);
        float* v = x + head * head_dim;
        gm_rope_pair(v + i, v + i + half, positions[row], inv_freq[i], mscale);
    }
}

// One thread per element of a and b: head r of x is [a_r | b_r].
__global__ void split_heads_kernel(float* a, float* b, const float* x, long n_head_rows, int head_dim) {
    const long total = n_head_rows * head_dim;
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < total; i += long(gridDim.x) * blockDim.x) {
        const long r = i / head_dim, d = i % head_dim;
        a[i] = x[2 * r * head_dim + d];
        b[i] = x[(2 * r + 1) * head_dim + d];
    }
}

__global__ void sigmoid_mul_kernel(float* x, const float* gate, long n) {
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x)
        x[i] *= gm_sigmoid(gate[i]);
}

__global__ void add_kernel(float* x, const float* y, long n) {
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x) x[i] += y[i];
}

__global__ void add_bias_kernel(float* x, const float* bias, int rows, int width) {
    const long total = long(rows) * width;
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < total; i += long(gridDim.x) * blockDim.x)
        x[i] += bias[i % width];
}

__global__ void sigmoid_scale_kernel(float* y, const float* gate, int rows, int dim) {
    const long total = long(rows) * dim;
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < total; i += long(gridDim.x) * blockDim.x)
        y[i] *= gm_sigmoid(gate[i / dim]);
}

__global__ void silu_mul_kernel(float* a, const float* b, long n) {
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x)
        a[i] = gm_silu_mul(a[i], b[i]);
}

// An FFN's gate, one element of h1 (rows, hidden): the biases, then the
// activation (cpu_kernels' ffn_gate).
__global__ void ffn_gate_kernel(float* h1, const float* h3, const float* b1, const float* b3, long n, int hidden,
                                FfnActivation act) {
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x) {
        float g = h1[i], u = h3[i];
        if (b1) g += b1[i % hidden];
        if (b3) u += b3[i % hidden];
        h1[i] = act.kind == FfnActivation::Kind::SILU ? gm_silu_mul(g, u)
                                                      : ffn_clamped_swiglu(g, u, act.alpha, act.limit);
    }
}

__global__ void gather_rows_kernel(float* out, const float* x, const int* src_row, int rows, int dim) {
    const long total = long(rows) * dim;
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < total; i += long(gridDim.x) * blockDim.x)
        out[i] = x[long(src_row[i / dim]) * dim + i % dim];
}

// Each output element sums its k weighted expert rows in routing order, as
// the CPU does.
__global__ void combine_kernel(float* out, const float* y, const int* slots, const float* weights, int rows, int k,
                               int dim) {
    const long total = long(rows) * dim;
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < total; i += long(gridDim.x) * blockDim.x) {
        const long row = i / dim, col = i % dim;
        float acc = 0.0f;
        for (int r = 0; r < k; r++) acc += weights[row * k + r] * y[long(slots[row * k + r]) * dim + col];
        out[i] = acc;
    }
}

__global__ void kv_store_kernel(const float* k, const float* v, float* const* row_base, long k_offset, long v_offset,
                                int rows, int kv_dim) {
    const long total = long(rows) * kv_dim;
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < total; i += long(gridDim.x) * blockDim.x) {
        const long row = i / kv_dim, col = i % kv_dim;
        row_base[row][k_offset + col] = k[i];
        row_base[row][v_offset + col] = v[i];
    }
}

}  // namespace

void gpu_f32_to_bf16(bf16* out, const float* x, long n, GpuStream stream) {
    if (n <= 0) return;
    f32_to_bf16_kernel<<<blocks_for(n), THREADS, 0, stream>>>(out, x, n);
    CUDA_LAUNCH_CHECK();
}

// quant.cu: the lookup in a block-quantized table.
void gpu_embed_quant(float* x, const int* tokens, const WeightView& table, int n, GpuStream stream);

void gpu_embed(float* x, const int* tokens, const WeightView& table, int n, GpuStream stream) {
    if (table.type != DType::BF16) return gpu_embed_quant(x, tokens, table, n, stream);
    if (n <= 0) return;
    const int dim = int(table.cols);
    embed_kernel<<<blocks_for(long(n) * dim), THREADS, 0, stream>>>(x, tokens, static_cast<const bf16*>(table.data),
                                                                    n, dim);
    CUDA_LAUNCH_CHECK();
}

void gpu_rmsnorm(float* out, const float* x, const float* weight, int rows, int dim, float eps, GpuStream stream) {
    if (rows <= 0) return;
    rmsnorm_kernel<<<unsigned(rows), THREADS, 0, stream>>>(out, x, weight, dim, eps);
    CUDA_LAUNCH_CHECK();
}

void gpu_rope_rotate_half(float* x, const int* positions, int rows, int n_heads, int head_dim, int rot_dim,
                          const double* inv_freq, float mscale, GpuStream stream) {
    if (rows <= 0) return;
    if (rot_dim % 2 != 0 || rot_dim <= 0 || rot_dim > head_dim)
        throw GpuError("gpu_rope_rotate_half: rot_dim " + std::to_string(rot_dim) + " is not an even count up to head_dim " +
                       std::to_string(head_dim));
    rope_kernel<<<blocks_for(long(rows) * n_heads * (rot_dim / 2)), THREADS, 0, stream>>>(x, positions, rows, n_heads,
                                                                                            head_dim, rot_dim, inv_freq,
                                                                                            mscale);
    CUDA_LAUNCH_CHECK();
}

void gpu_split_heads(float* a, float* b, const float* x, int rows, int n_heads, int head_dim, GpuStream stream) {
    const long n_head_rows = long(rows) * n_heads;
    if (n_head_rows <= 0 || head_dim <= 0) return;
    split_heads_kernel<<<blocks_for(n_head_rows * head_dim), THREADS, 0, stream>>>(a, b, x, n_head_rows, head_dim);
    CUDA_LAUNCH_CHECK();
}

void gpu_sigmoid_mul(float* x, const float* gate, long n, GpuStream stream) {
    if (n <= 0) return;
    sigmoid_mul_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, gate, n);
    CUDA_LAUNCH_CHECK();
}

void gpu_add(float* x, const float* y, long n, GpuStream stream) {
    if (n <= 0) return;
    add_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, y, n);
    CUDA_LAUNCH_CHECK();
}

void gpu_add_bias(float* x, const float* bias, int rows, int width, GpuStream stream) {
    if (rows <= 0 || width <= 0) return;
    add_bias_kernel<<<blocks_for(long(rows) * width), THREADS, 0, stream>>>(x, bias, rows, width);
    CUDA_LAUNCH_CHECK();
}

void gpu_ffn_gate(float* h1, const float* h3, const float* b1, const float* b3, int rows, int hidden,
                  const FfnActivation& act, GpuStream stream) {
    const long n = long(rows) * hidden;
    if (n <= 0) return;
    ffn_gate_kernel<<<blocks_for(n), THREADS, 0, stream>>>(h1, h3, b1, b3, n, hidden, act);
    CUDA_LAUNCH_CHECK();
}

void gpu_sigmoid_scale(float* y, const float* gate, int rows, int dim, GpuStream stream) {
    if (rows <= 0 || dim <= 0) return;
    sigmoid_scale_kernel<<<blocks_for(long(rows) * dim), THREADS, 0, stream>>>(y, gate, rows, dim);
    CUDA_LAUNCH_CHECK();
}

void gpu_silu_mul(float* a, const float* b, long n, GpuStream stream) {
    if (n <= 0) return;
    silu_mul_kernel<<<blocks_for(n), THREADS, 0, stream>>>(a, b, n);
    CUDA_LAUNCH_CHECK();
}

void gpu_gather_rows(float* out, const float* x, const int* src_row, int rows, int dim, GpuStream stream) {
    if (rows <= 0) return;
    gather_rows_kernel<<<blocks_for(long(rows) * dim), THREADS, 0, stream>>>(out, x, src_row, rows, dim);
    CUDA_LAUNCH_CHECK();
}

void gpu_combine(float* out, const float* y, const int* slots, const float* weights, int rows, int k, int dim,
                 GpuStream stream) {
    if (rows <= 0) return;
    combine_kernel<<<blocks_for(long(rows) * dim), THREADS, 0, stream>>>(out, y, slots, weights, rows, k, dim);
    CUDA_LAUNCH_CHECK();
}

void gpu_kv_store(const float* k, const float* v, float* const* row_base, long k_offset, long v_offset, int rows,
                  int kv_dim, GpuStream stream) {
    if (rows <= 0) return;
    kv_store_kernel<<<blocks_for(long(rows) * kv_dim), THREADS, 0, stream>>>(k, v, row_base, k_offset, v_offset, rows,
                                                                              kv_dim);
    CUDA_LAUNCH_CHECK();
}
