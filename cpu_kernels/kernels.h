// Public CPU kernels: free functions over raw pointers, no ownership, no
// model knowledge. Weights are row-major (n, k) as in the checkpoint, of any
// element type (a WeightView: bf16, f32, f16 or block-quantized, quant.h);
// activations fp32; accumulation fp32. Each entry point dispatches to the ISA
// chosen once at start-up (isa.h); every ISA path is checked against the
// scalar path in tests.
#pragma once
#include "cpu_kernels/bf16.h"
#include "cpu_kernels/dtype.h"
#include "cpu_kernels/ffn.h"
#include "cpu_kernels/isa.h"
#include "cpu_kernels/thread_pool.h"

// y (m, w.rows) = x (m, w.cols) @ W^T for a weight of any type. Threads
// split W's rows (the rows path, small m), so each streams its own slice of
// W once for all m tokens, or its columns (the packed path, large m). BF16
// runs matmul_bf16. Block-quantized W: below the table's
// quant_packed_min_m, activations are quantized to int8 blocks once per
// call and dotted with W's blocks in integers; from there W's rows are
// dequantized to bf16 a piece at a time into the bf16 packed path. F32 /
// F16 W: rows widened to fp32 (a correct, not a fast path).
void matmul(float* y, const float* x, const WeightView& w, int m, ThreadPool& pool);

// One SwiGLU expert of any weight types (they may differ, e.g. Q4_K w1/w3
// with a Q6_K w2): y (m, dim) = (silu(x W1^T) * (x W3^T)) W2^T with W1, W3
// (hidden, dim), W2 (dim, hidden); with an FfnSpec (ffn.h), biases added to
// x W1^T, x W3^T and the output, and gpt-oss's clamped gate in place of
// silu(.) * (.). scratch: 2 * m * hidden floats. All BF16: expert_ffn_bf16.
void expert_ffn(float* y, const float* x, const WeightView& w1, const WeightView& w3, const WeightView& w2, int m,
                float* scratch, ThreadPool& pool, const FfnSpec& spec = {});

// The same on a given path's table (tests, benchmarks).
void matmul(const KernelTable& t, float* y, const float* x, const WeightView& w, int m, ThreadPool& pool);
void expert_ffn(const KernelTable& t, float* y, const float* x, const WeightView& w1, const WeightView& w3,
                const WeightView& w2, int m, float* scratch, ThreadPool& pool, const FfnSpec& spec = {});

// out (w.cols) = row r of W as fp32 (an embedding lookup).
void weight_row_f32(float* out, const WeightView& w, int64_t r);
// W (any type weight_row_f32 reads) as block-quantized `type` at dst
// (w.rows * dtype_row_bytes(type, w.cols) bytes): every row quantized in
// dtype_plain(type) on pool's threads, then, for an _R8 type (rows a
// multiple of 8), interleaved.
void quantize_matrix(DType type, const WeightView& w, void* dst, ThreadPool& pool);

// y (m, n) = x (m, k) @ W (n, k)^T, W bf16. Threads split the n output rows, so each
// streams its own slice of W once for all m tokens.
void matmul_bf16(float* y, const float* x, const bf16* w, int m, int n, int k, ThreadPool& pool);

// out (n,) = x * rsqrt(mean(x^2) + eps) * weight. out may alias x.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);

// Rotate-half RoPE (Hugging Face layout, not interleaved) on n_heads vectors of
// head_dim at position pos: pairs (i, i + head_dim/2) rotate by the angle
// pos * inv_freq[i] (head_dim / 2 frequencies, the model's: plain
// theta^(-2i/head_dim) or scaled, engine's rope_inv_freq), the angle and its
// cos and sin in double, cos and sin multiplied by mscale (YaRN's attention
// factor; 1 otherwise) before rounding to float. rot_dim < head_dim
// (partial rotary, Qwen3.5): only each head's first rot_dim dims rotate, as
// heads of rot_dim of their own (inv_freq then has rot_dim / 2 entries);
// cos and sin are computed once for all heads. 0: head_dim.
void rope_rotate_half(float* x, int n_heads, int head_dim, int pos, const double* inv_freq, float mscale = 1.0f,
                      int rot_dim = 0);

// x (n,) <- softmax(x), numerically stable.
void softmax(float* x, int n);

// a (n,) <- silu(a) * b.
void silu_mul(float* a, const float* b, int n);

// What a query sees beyond causality. window > 0: only the last `window`
// positions up to its own, (pos - window, pos] (gpt-oss's sliding layers,
// as Hugging Face's and llama.cpp's masks have it); 0: every position.
// sinks: one logit per query head of the call (n_heads), or null: it joins
// the softmax's denominator and contributes no value (gpt-oss's attention
// sinks). Without either, the arithmetic is that of plain attention.
struct AttnMask {
    int window = 0;
    const float* sinks = nullptr;
};

// Causal attention of one query against the first n_pos cached positions of
// its sequence. q (n_heads, head_dim); k, v (n_pos, kv_stride) where kv head j
// starts at column j * head_dim; GQA maps query head h to kv head
// h / (n_heads / n_kv_heads). out (n_heads, head_dim). scratch:
// (n_heads / n_kv_heads) * n_pos floats.
void attention_one(float* out, const float* q, const float* k, const float* v, int n_pos, int n_heads,
                   int n_kv_heads, int head_dim, int kv_stride, float* scratch, const AttnMask& mask = {});

// attention_one over a paged KV cache: positions come in blocks of
// block_size rows; block b holds positions [b * block_size, (b + 1) *
// block_size), its K rows start at blocks[b] + k_offset and its V rows at
// blocks[b] + v_offset (rows kv_stride apart, kv head j at column
// j * head_dim). Consecutive blocks whose rows follow each other in memory
// (blocks[b + 1] == blocks[b] + block_size * kv_stride) are read as one run.
// Scores go run by run into one scratch row, one softmax, then V run by
// run: the same arithmetic in the same order as attention_one over
// contiguous rows, so the results are bitwise equal. The query heads that
// share a kv head read its rows together (each head's arithmetic is the
// same as alone). scratch: (n_heads / n_kv_heads) * n_pos floats.
void attention_paged(float* out, const float* q, const float* const* blocks, long k_offset, long v_offset,
                     int block_size, int n_pos, int n_heads, int n_kv_heads, int head_dim, int kv_stride,
                     float* scratch, const AttnMask& mask = {});

// Causal attention of a run of n_tokens consecutive queries of one sequence
// over a paged KV cache laid out as for attention_paged: token t (q row t,
// q_stride floats apart; out row t, out_stride apart) at position pos0 + t
// attends to positions [0, pos0 + t] (the run's own k, v already written).
// Blockwise (flash-style): blocks of 64 (token, query head) rows of one kv
// head against 64 positions, the scores and the weighted V sums as small
// GEMMs (the table's gemm_f32), an online softmax in between; memory does
// not grow with the context. Threads take (kv head, query block) tasks. A
// query's result depends only on its position and the cache, not on the run
// it came in (a prompt prefilled whole or in pieces gives the same bits);
// it may differ from attention_paged's in the last bits. With a window, the
// positions before the run's first window are never read (a sliding cache
// may have dropped them).
void attention_run(float* out, long out_stride, const float* q, long q_stride, const float* const* blocks,
                   long k_offset, long v_offset, int block_size, int pos0, int n_tokens, int n_heads, int n_kv_heads,
                   int head_dim, int kv_stride, ThreadPool& pool, const AttnMask& mask = {});

// The gated delta rule (Gated DeltaNet's token mixer) over n consecutive
// tokens of one head, continuing the state S (dk, dv) row-major. Token i:
// q_i, k_i (dk) at q / k + i * qk_stride, v_i (dv) at v + i * v_stride, the
// log decay g_i <= 0 and beta_i in (0, 1) at g / beta + i * gb_stride; its
// output o_i (dv) to o + i * o_stride:
//   S *= exp(g_i);  u = beta_i (v_i - S^T k_i);  S += k_i u^T;  o_i = S^T q_i.
// From DELTA_CHUNK_MIN tokens on, chunks of DELTA_CHUNK tokens in the
// chunked (WY) form, whose products are small GEMMs (the table's gemm_f32);
// fewer go token by token (delta_rule_step). One thread (callers split heads).
constexpr int DELTA_CHUNK = 16;
constexpr int DELTA_CHUNK_MIN = 8;
void gated_delta_rule(float* S, float* o, long o_stride, const float* q, const float* k, long qk_stride,
                      const float* v, long v_stride, const float* g, const float* beta, long gb_stride, int n, int dk,
                      int dv);
void gated_delta_rule(const KernelTable& t, float* S, float* o, long o_stride, const float* q, const float* k,
                      long qk_stride, const float* v, long v_stride, const float* g, const float* beta,
                      long gb_stride, int n, int dk, int dv);
// The FLOPs gated_delta_rule does for n tokens (its chunked form's blocks,
// triangles counted as such, or the token-by-token form's 4 dk dv FMAs).
double gated_delta_rule_flops(int n, int dk, int dv);

// Indices of the k largest values of x (n,), largest first; ties go to the
// lower index. k <= n.
void top_k(int* idx, const float* x, int n, int k);

// One SwiGLU expert over m tokens: y (m, dim) = (silu(x W1^T) * (x W3^T)) W2^T
// with x (m, dim), W1/W3 (hidden, dim), W2 (dim, hidden), all weights bf16
// read in place (from the memory map). scratch: 2 * m * hidden floats.
// spec: as expert_ffn's.
void expert_ffn_bf16(float* y, const float* x, const bf16* w1, const bf16* w3, const bf16* w2, int m, int dim,
                     int hidden, float* scratch, ThreadPool& pool, const FfnSpec& spec = {});

// The same two entry points on a given path's table instead of the active
// one (tests compare paths, benchmarks time each path).
void matmul_bf16(const KernelTable& t, float* y, const float* x, const bf16* w, int m, int n, int k,
                 ThreadPool& pool);
void expert_ffn_bf16(const KernelTable& t, float* y, const float* x, const bf16* w1, const bf16* w3,
                     const bf16* w2, int m, int dim, int hidden, float* scratch, ThreadPool& pool,
                     const FfnSpec& spec = {});

// Whether large-m matmuls on the AVX512_BF16 path may use oneDNN's bf16
// brgemm (default: yes, where this oneDNN has a native one for the CPU).
// Returns whether oneDNN will actually be used. For benchmarks and tests.
bool matmul_dnnl_select(bool allow);

// Bytes of weights and FLOPs of one matmul call: the one place the
// benchmarks and the engine's GB/s log lines take them from.
inline double matmul_bytes(const WeightView& w) {
    return double(w.bytes());
}
inline double matmul_flops(const WeightView& w, int m) {
    return 2.0 * double(m) * double(w.rows) * double(w.cols);
}
inline double matmul_bf16_flops(int m, int n, int k) { return 2.0 * double(m) * n * k; }
