// Instruction-set paths and the one place that reads CPUID. The active path
// is chosen once at start-up (detect, or --cpu-isa / MOE_CPU_ISA) and every
// kernel entry point dispatches through the table of that path.
#pragma once
#include <cstddef>
#include <optional>
#include <string_view>

#include "cpu_kernels/bf16.h"
#include "cpu_kernels/dtype.h"

enum class Isa { SCALAR, AVX2, AVX512, AVX512BF16 };

// The best path this CPU runs (CPUID + OS support for the register state).
Isa isa_detect();
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);
std::optional<Isa> isa_parse(std::string_view name);

// The CPU's model name (CPUID brand string, spaces trimmed), or
// "unknown-x86" when the CPU does not report one. Keys the calibration cache.
const char* cpu_model_name();

// Selects the active path; returns false (and changes nothing) when the CPU
// cannot run it. Without a call the active path is MOE_CPU_ISA if set and
// supported, else isa_detect().
bool isa_select(Isa isa);
Isa isa_active();

// Per-ISA inner kernels. Each ISA translation unit fills one table; the
// public functions in kernels.h split work across threads and call these.
// Weights W are bf16 (n, k) row-major; y (m, n) = x (m, k) @ W^T.
struct KernelTable {
    Isa isa;

    // Activations in the form matmul_rows reads (and matmul_packed when
    // packed_x_prepared): elements of x_elem_bytes, rows x_stride(k) apart.
    // prepare_x converts columns [c0, c1) of all m rows; c0 is a multiple of
    // 64 and c1 is a multiple of 64 or k, so threads may convert their own
    // slices. Null: the kernels read fp32 x as it is.
    int x_elem_bytes;
    int (*x_stride)(int k);
    void (*prepare_x)(void* xp, const float* x, int m, int k, int c0, int c1);

    // Small m: y[i, r] for all i < m and rows r in [r0, r1). Each W row is
    // read once from memory; its dot products with all m tokens share it.
    void (*matmul_rows)(float* y, const void* xp, const bf16* w, int m, int n, int k, int r0, int r1);

    // Large m: y[i, c] for all i < m and columns c in [c0, c1), c0 a multiple
    // of 64. W is converted block by block into a per-thread packed buffer
    // and reused by a register-blocked micro-kernel over all m tokens.
    bool packed_x_prepared;
    int packed_min_m;  // m from which matmul_packed beats matmul_rows
    // m from which the fused expert FFN takes the packed path (>= packed_min_m):
    // it runs w1 and w3 in 64-row pieces, so packing pays off later than in
    // one matmul (measured on mixtral-mini's expert shape, 2 threads).
    int ffn_packed_min_m;
    void (*matmul_packed)(float* y, const void* x, const bf16* w, int m, int n, int k, int c0, int c1);

    // Block-quantized weights (quant.h). quantize_x: one activation row in
    // the form wtype's kernels read, bit for bit quantize_x_row. quant_rows:
    // like matmul_rows for an (n, k) matrix of wtype with rows row_bytes
    // apart; xq: m rows from quantize_x, quant_x_row_bytes(wtype, k) apart.
    // dequant_bf16: rows [r0, r1) of such a matrix as bf16 rows of k (the
    // values rounded to bf16), for the packed path, which takes over from
    // quant_packed_min_m tokens.
    void (*quantize_x)(DType wtype, const float* x, void* dst, int k);
    void (*quant_rows)(DType wtype, float* y, const void* xq, const void* w, size_t row_bytes, int m, int n, int k,
                       int r0, int r1);
    void (*dequant_bf16)(DType wtype, bf16* dst, const void* w, size_t row_bytes, int k, int r0, int r1);
    int quant_packed_min_m;

    // fp32 vector helpers.
    float (*dot_f32)(const float* a, const float* b, int n);
    void (*axpy_f32)(float* y, float a, const float* x, int n);  // y += a * x
    void (*scale_f32)(float* x, float a, int n);                 // x *= a
    float (*max_f32)(const float* x, int n);
    float (*exp_sum_f32)(float* x, int n, float shift);  // x = exp(x - shift); returns the sum
    void (*rmsnorm)(float* out, const float* x, const float* weight, int n, float eps);
    void (*silu_mul)(float* a, const float* b, int n);  // a = silu(a) * b
    // Rotate-half RoPE of n_heads vectors (head_dim) with cos/sin (head_dim/2,).
    void (*rope)(float* x, int n_heads, int head_dim, const float* cos, const float* sin);

    // Attention pieces over one kv head. s[g * s_stride + p] = scale *
    // q_g . k_p for g < n_q, p < n_pos (q rows q_stride apart, k rows
    // k_stride apart).
    void (*attn_scores)(float* s, long s_stride, const float* q, long q_stride, int n_q, const float* k,
                        long k_stride, int n_pos, int head_dim, float scale);
    // out[g * out_stride + :] += sum_p s[g * s_stride + p] * v_p.
    void (*attn_accum)(float* out, long out_stride, const float* s, long s_stride, int n_q, const float* v,
                       long v_stride, int n_pos, int head_dim);

    // Small fp32 GEMM (the chunked delta rule's blocks): c (m, n) =
    // c_scale * c + A B, A (m, k) element (i, p) at a[i * a_rs + p * a_cs],
    // B (k, n) rows ldb apart, c rows ldc apart. c_scale 0: c is only
    // written (its old contents may be anything). lower: A is zero above its
    // diagonal, which may then be skipped (a tile of rows reads A's columns
    // up to its last row).
    void (*gemm_f32)(float* c, long ldc, float c_scale, const float* a, long a_rs, long a_cs, const float* b,
                     long ldb, int m, int n, int k, bool lower);
    // One token of the gated delta rule on one head: S (dk, dv) row-major,
    // S *= exp(g); u = beta (v - S^T k); S += k u^T; o (dv) = S^T q.
    void (*delta_rule_step)(float* S, float* o, const float* q, const float* k, const float* v, float g, float beta,
                            int dk, int dv);

    // Benchmark ceilings: a streaming read of bytes as `streams` (1..8)
    // parts in lockstep (returns a value that depends on the bytes read), and
    // an FMA loop that returns its FLOP count.
    float (*read_stream)(const void* p, long bytes, int streams);
    double (*fma_peak)(long iterations, float* sink);
};

// Only for paths built into this binary (all four are always built).
const KernelTable& kernel_table(Isa isa);
const KernelTable& kernel_table_scalar();
const KernelTable& kernel_table_avx2();
const KernelTable& kernel_table_avx512();
const KernelTable& kernel_table_avx512bf16();
