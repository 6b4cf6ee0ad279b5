// CUDA kernels and cuBLAS calls: the GPU twins of cpu_kernels/kernels.h.
// Free functions over raw device pointers, launched asynchronously on the
// given stream; every CUDA and cuBLAS call is checked (a failure throws
// GpuError with the call, file and line). The per-element math of every
// kernel is a __host__ __device__ function in gpu_kernels/gpu_math.h that
// the CPU tests run too. Must not know what a model or a layer is.
//
// Shapes follow cpu_kernels: weights row-major (n, k) as in the checkpoint,
// handed over as a WeightView (cpu_kernels/dtype.h) whose data is device
// memory: bf16, or block-quantized (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) and
// decoded by quant_group32 (cpu_kernels/quant.h), the CPU's own decoder;
// activations fp32; GEMMs take bf16 inputs and accumulate in fp32 (cuBLAS). Declared in every build, defined only when
// built with CUDA: include it only from CUDA-only sources.
#pragma once
#include <cstddef>

#include "cpu_kernels/bf16.h"
#include "cpu_kernels/dtype.h"
#include "cpu_kernels/ffn.h"
#include "gpu_kernels/gpu_limits.h"

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

// Device scratch of gpu_matmul.
struct GpuGemmScratch {
    bf16* x = nullptr;   // x in bf16: at least m * k elements
    bf16* w = nullptr;   // a piece of block-quantized W in bf16; may be null when every W is bf16
    size_t w_elems = 0;  // its elements: pieces of w_elems / k rows (at least one row)
};

// y (m, n) fp32 = x (m, k) fp32 @ W^T for W (n, k) of any type on the
// device: bf16 through cuBLAS (x rounded to bf16 into s.x first); block-
// quantized by gpu_matvec_quant below GPU_QUANT_GEMV_MAX_M rows, else
// gpu_dequant_bf16 into s.w and cuBLAS per piece. Runs on blas.stream().
// std::invalid_argument for a float type other than bf16, or quantized W
// above the GEMV rows without s.w.
void gpu_matmul(GpuBlas& blas, float* y, const float* x, const WeightView& w, int m, const GpuGemmScratch& s);

// y (m, n) fp32 = x (m, k) fp32 @ W^T, W block-quantized (n, k): one warp
// per row of W decodes its groups of 32 (quant_group32) and dots them with
// every row of x, staged in shared memory a chunk of 1024 columns at a
// time. m <= GPU_QUANT_GEMV_MAX_M.
void gpu_matvec_quant(float* y, const float* x, const WeightView& w, int m, GpuStream stream);

// out ((r1 - r0), k) bf16 = rows [r0, r1) of block-quantized W, each
// element quant_group32's value rounded to bf16 (f32_to_bf16); out 16-byte
// aligned (device allocations are), written 16 bytes at a time.
void gpu_dequant_bf16(bf16* out, const WeightView& w, int64_t r0, int64_t r1, GpuStream stream);

// x (n, dim) = table[tokens[i]] as fp32, table (vocab, dim) bf16 or block-
// quantized (dim = table.cols); tokens (n,) on the device.
void gpu_embed(float* x, const int* tokens, const WeightView& table, int n, GpuStream stream);

// out (rows, dim) = x * rsqrt(mean(x^2) + eps) * weight, per row. out may alias x.
void gpu_rmsnorm(float* out, const float* x, const float* weight, int rows, int dim, float eps, GpuStream stream);

// Rotate-half RoPE on the first rot_dim dims of each head of x (rows,
// n_heads * head_dim), row i at positions[i] (device array): as
// rope_rotate_half(row, n_heads, head_dim, ..., rot_dim) (rot_dim = head_dim:
// the whole head; less: Qwen3.5's partial rotary), with the frequencies
// inv_freq (rot_dim / 2 doubles, device memory) and mscale.
void gpu_rope_rotate_half(float* x, const int* positions, int rows, int n_heads, int head_dim, int rot_dim,
                          const double* inv_freq, float mscale, GpuStream stream);

// a, b (rows, n_heads * head_dim) from x (rows, 2 * n_heads * head_dim)
// whose heads are [a_h | b_h] (a gated attention's query and gate).
void gpu_split_heads(float* a, float* b, const float* x, int rows, int n_heads, int head_dim, GpuStream stream);

// x (n,) *= gm_sigmoid(gate) elementwise (gated attention's output).
void gpu_sigmoid_mul(float* x, const float* gate, long n, GpuStream stream);

// A run of a Gated DeltaNet layer's batch entries: entries [first, first +
// n) of one sequence, in position order, and that sequence's state of the
// layer in device memory: its conv window ((conv_kernel - 1) x conv_dim,
// oldest input first) and its matrices (n_v_heads x head_k_dim x
// head_v_dim, row-major).
struct GpuDeltaRun {
    int first, n;
    float* conv;
    float* state;
};

// The layer's shape and weights (device pointers): conv taps (conv_dim,
// conv_kernel), neg_exp_a (n_v_heads) = -exp(A_log), dt_bias (n_v_heads),
// norm (head_v_dim). Value head h reads key head h / v_per_k (grouped) or
// h % n_k_heads (tiled).
struct GpuDeltaLayer {
    int conv_dim, conv_kernel, n_k_heads, n_v_heads, head_k_dim, head_v_dim;
    bool tiled;
    float eps;
    const float *conv, *neg_exp_a, *dt_bias, *norm;
};

// Gated DeltaNet over batch entries [first_entry, first_entry + n_entries),
// which n_runs runs (runs on the device) cover, each sequence in one run at
// most, as the CPU backend's delta_net: qkv (entries, conv_dim) goes
// through the causal conv and SiLU (gm_conv_channel, in place), q and k of
// each key head to unit length (q also by 1 / sqrt(head_k_dim)); per value
// head g = neg_exp_a softplus(a + dt_bias) and beta = sigmoid(b) into
// scratch (2 * (first_entry + n_entries) * n_v_heads floats); the delta rule token by token
// (gm_delta_rule_column, one block a head and run, one thread a state
// column; head_v_dim <= 512); then the gated RMSNorm with z into o
// (n_entries, n_v_heads * head_v_dim).
void gpu_delta_net(float* o, float* qkv, const float* z, const float* b, const float* a, const GpuDeltaRun* runs,
                   int n_runs, int first_entry, int n_entries, const GpuDeltaLayer& layer, float* scratch,
                   GpuStream stream);

// x (n,) += y (n,).
void gpu_add(float* x, const float* y, long n, GpuStream stream);

// x (rows, width): each row += bias (width,).
void gpu_add_bias(float* x, const float* bias, int rows, int width, GpuStream stream);

// y (rows, dim): row i *= gm_sigmoid(gate[i]), gate (rows,).
void gpu_sigmoid_scale(float* y, const float* gate, int rows, int dim, GpuStream stream);

// a (n,) <- silu(a) * b.
void gpu_silu_mul(float* a, const float* b, long n, GpuStream stream);

// An FFN's gate over h1, h3 (rows, hidden): the biases b1, b3 (hidden,, on
// the device; null: none) added, then h1 <- the activation of (h1, h3)
// (silu(h1) * h3, or gpt-oss's ffn_clamped_swiglu), as cpu_kernels does.
void gpu_ffn_gate(float* h1, const float* h3, const float* b1, const float* b3, int rows, int hidden,
                  const FfnActivation& act, GpuStream stream);

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
// window > 0: only the last `window` of those positions (AttnMask on the
// CPU); sinks (n_heads, on the device) or null: one more logit per query
// head in the softmax's denominator, with no value.
// out (rows, n_heads * head_dim). block_start, n_pos, blocks on the device.
void gpu_attention_paged(float* out, const float* q, const float* const* blocks, const int* block_start,
                         const int* n_pos, long k_offset, long v_offset, int block_size, int rows, int n_heads,
                         int n_kv_heads, int head_dim, int kv_stride, int window, const float* sinks,
                         GpuStream stream);

// One SwiGLU expert over m tokens on the device:
// y (m, dim) = (silu(x W1^T) * (x W3^T)) W2^T, x (m, dim) fp32, W1/W3
// (hidden, dim), W2 (dim, hidden) of any type gpu_matmul reads, in device
// memory; spec as cpu_kernels' expert_ffn (its biases in device memory).
// Scratch: scratch_f32 2 * m * hidden floats; s.x m * max(dim,
// hidden) bf16 (and s.w for quantized weights, see gpu_matmul). Three
// gpu_matmul calls and one or two small kernels on blas.stream().
void gpu_expert_ffn(GpuBlas& blas, float* y, const float* x, const WeightView& w1, const WeightView& w3,
                    const WeightView& w2, int m, float* scratch_f32, const GpuGemmScratch& s,
                    const FfnSpec& spec = {});
