// CUDA kernels and cuBLAS calls: the GPU twins of cpu_kernels/kernels.h.
// Free functions over raw device pointers, launched asynchronously on the
// given stream; every CUDA and cuBLAS call is checked (a failure throws
// GpuError with the call, file and line). The per-element math of every
// kernel is a __host__ __device__ function in gpu_kernels/gpu_math.h that
// the CPU tests run too. Must not know what a model or a layer is.
//
// Shapes follow cpu_kernels: weights bf16 row-major (n, k) as in the
// checkpoint; activations fp32; GEMMs take bf16 inputs and accumulate in
// fp32 (cuBLAS). Declared in every build, defined only when built with CUDA:
// include it only from CUDA-only sources.
#pragma once
#include <cstddef>

#include "cpu_kernels/bf16.h"

// cudaStream_t and cublasHandle_t without the CUDA headers.
using GpuStream = struct CUstream_st*;
using GpuBlasHandle = struct cublasContext*;

// A cuBLAS handle bound to one stream. Move-only; destroys the handle.
class GpuBlas {
public:
    explicit GpuBlas(GpuStream stream);
    ~GpuBlas();
    GpuBlas(const GpuBlas&) = delete;
    GpuBlas& operator=(const GpuBlas&) = delete;
    GpuBlasHandle handle() const { return handle_; }
    GpuStream stream() const { return stream_; }

private:
    GpuBlasHandle handle_ = nullptr;
    GpuStream stream_ = nullptr;
};

// x (n,) fp32 -> out (n,) bf16, round to nearest even (f32_to_bf16).
void gpu_f32_to_bf16(bf16* out, const float* x, long n, GpuStream stream);

// y (m, n) fp32 = x (m, k) bf16 @ W (n, k)^T bf16, fp32 accumulation
// (cublasGemmEx, CUBLAS_COMPUTE_32F). Runs on blas.stream().
void gpu_matmul_bf16(GpuBlas& blas, float* y, const bf16* x, const bf16* w, int m, int n, int k);

// The same with fp32 x: converted to bf16 into x_bf16 (m * k elements) first.
void gpu_matmul_f32in(GpuBlas& blas, float* y, const float* x, bf16* x_bf16, const bf16* w, int m, int n, int k);

// x (n, dim) = embed[tokens[i]] widened to fp32; tokens (n,) on the device.
void gpu_embed(float* x, const int* tokens, const bf16* table, int n, int dim, GpuStream stream);

// out (rows, dim) = x * rsqrt(mean(x^2) + eps) * weight, per row. out may alias x.
void gpu_rmsnorm(float* out, const float* x, const float* weight, int rows, int dim, float eps, GpuStream stream);

// Rotate-half RoPE on x (rows, n_heads * head_dim), row i at positions[i]
// (device array): as rope_rotate_half on each row.
void gpu_rope_rotate_half(float* x, const int* positions, int rows, int n_heads, int head_dim, float theta,
                          GpuStream stream);

// x (n,) += y (n,).
void gpu_add(float* x, const float* y, long n, GpuStream stream);

// a (n,) <- silu(a) * b.
void gpu_silu_mul(float* a, const float* b, long n, GpuStream stream);

// Routing of rows tokens: per row of logits (rows, n_experts), softmax over
// all experts, the k largest (ties to the lower index, largest first) into
// experts (rows, k) and their probabilities into weights (rows, k),
// renormalised to sum 1 when renorm. As softmax + top_k on the CPU.
void gpu_route_topk(int* experts, float* weights, const float* logits, int rows, int n_experts, int k, bool renorm,
                    GpuStream stream);

// out (rows, dim): out[i] = x[src_row[i]] (src_row on the device).
void gpu_gather_rows(float* out, const float* x, const int* src_row, int rows, int dim, GpuStream stream);

// out (rows, dim): out[i] = sum over r < k, in order, of weights[i * k + r] *
// y[slots[i * k + r]] (slots, weights on the device): the MoE layer's
// weighted sum of its experts' outputs, in the token's routing order.
void gpu_combine(float* out, const float* y, const int* slots, const float* weights, int rows, int k, int dim,
                 GpuStream stream);

// Writes rows new keys and values into a paged KV cache: row i's K goes to
// row_base[i] + k_offset, its V to row_base[i] + v_offset (kv_dim floats
// each); row_base (rows,) is a device array of device pointers.
void gpu_kv_store(const float* k, const float* v, float* const* row_base, long k_offset, long v_offset, int rows,
                  int kv_dim, GpuStream stream);

// Causal attention of rows queries over a paged KV cache, as
// attention_paged on the CPU. Query i (q row i, n_heads * head_dim floats)
// attends to positions [0, n_pos[i]) of its sequence, whose blocks are
// blocks[block_start[i] + b] (device pointers; block b holds positions
// [b * block_size, (b + 1) * block_size), its K rows at + k_offset and V rows
// at + v_offset, kv_stride floats apart, kv head j at column j * head_dim).
// GQA: query head h reads kv head h / (n_heads / n_kv_heads). Scores are
// scaled by 1 / sqrt(head_dim); online softmax (gpu_math.h), so no scratch.
// out (rows, n_heads * head_dim). block_start, n_pos, blocks on the device.
void gpu_attention_paged(float* out, const float* q, const float* const* blocks, const int* block_start,
                         const int* n_pos, long k_offset, long v_offset, int block_size, int rows, int n_heads,
                         int n_kv_heads, int head_dim, int kv_stride, GpuStream stream);

// One SwiGLU expert over m tokens on the device:
// y (m, dim) = (silu(x W1^T) * (x W3^T)) W2^T, x (m, dim) fp32, W1/W3
// (hidden, dim), W2 (dim, hidden) bf16 in device memory. Scratch:
// scratch_f32 2 * m * hidden floats, scratch_bf16 m * max(dim, hidden) bf16.
// Three cuBLAS GEMMs and two small kernels on blas.stream().
void gpu_expert_ffn(GpuBlas& blas, float* y, const float* x, const bf16* w1, const bf16* w3, const bf16* w2, int m,
                    int dim, int hidden, float* scratch_f32, bf16* scratch_bf16);
