// Scalar path: the reference every other ISA path is tested against, and the
// fallback on CPUs without AVX2. Plain loops, fp32 accumulation, std::exp;
// no blocking tricks, so that it stays obviously right.
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu_kernels/delta_rule_column.h"
#include "cpu_kernels/isa.h"
#include "cpu_kernels/quant.h"

namespace {

void matmul_rows_scalar(float* y, const void* xv, const bf16* w, int m, int n, int k, int r0, int r1) {
    const float* x = static_cast<const float*>(xv);
    for (int r = r0; r < r1; r++) {
        const bf16* wr = w + long(r) * k;
        for (int i = 0; i < m; i++) {
            const float* xi = x + long(i) * k;
            float acc = 0.0f;
            for (int j = 0; j < k; j++) acc += bf16_to_f32(wr[j]) * xi[j];
            y[long(i) * n + r] = acc;
        }
    }
}

int x_stride_scalar(int k) { return k; }

void quant_rows_scalar(DType wtype, float* y, const void* xq, const void* w, size_t row_bytes, int m, int n, int k,
                       int r0, int r1) {
    size_t xrow = quant_x_row_bytes(wtype, k);
    static thread_local std::vector<char> scratch;
    scratch.resize(row_bytes);
    for (int r = r0; r < r1; r++) {
        const void* wr = quant_row_plain(wtype, w, row_bytes, r, scratch.data());
        for (int i = 0; i < m; i++)
            y[long(i) * n + r] =
                quant_dot_scalar(dtype_plain(wtype), wr, static_cast<const char*>(xq) + size_t(i) * xrow, k);
    }
}

void dequant_bf16_scalar(DType wtype, bf16* dst, const void* w, size_t row_bytes, int k, int r0, int r1) {
    static thread_local std::vector<float> row;
    static thread_local std::vector<char> scratch;
    row.resize(size_t(k));
    scratch.resize(row_bytes);
    for (int r = r0; r < r1; r++) {
        dequantize_row(dtype_plain(wtype), quant_row_plain(wtype, w, row_bytes, r, scratch.data()), row.data(), k);
        for (int j = 0; j < k; j++) dst[long(r - r0) * k + j] = f32_to_bf16(row[j]);
    }
}

float dot_f32_scalar(const float* a, const float* b, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

void axpy_f32_scalar(float* y, float a, const float* x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

void scale_f32_scalar(float* x, float a, int n) {
    for (int i = 0; i < n; i++) x[i] *= a;
}

float max_f32_scalar(const float* x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

float exp_sum_f32_scalar(float* x, int n, float shift) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = std::exp(x[i] - shift);
        s += x[i];
    }
    return s;
}

void rmsnorm_scalar(float* out, const float* x, const float* weight, int n, float eps) {
    float ss = dot_f32_scalar(x, x, n);
    float scale = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * weight[i];
}

void silu_mul_scalar(float* a, const float* b, int n) {
    for (int i = 0; i < n; i++) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

void rope_scalar(float* x, int n_heads, int head_dim, const float* cos, const float* sin) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float* v = x + long(h) * head_dim;
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * cos[i] - b * sin[i];
            v[i + half] = b * cos[i] + a * sin[i];
        }
    }
}

void attn_scores_scalar(float* s, long s_stride, const float* q, long q_stride, int n_q, const float* k,
                        long k_stride, int n_pos, int head_dim, float scale) {
    for (int g = 0; g < n_q; g++)
        for (int p = 0; p < n_pos; p++)
            s[g * s_stride + p] = scale * dot_f32_scalar(q + g * q_stride, k + p * k_stride, head_dim);
}

void attn_accum_scalar(float* out, long out_stride, const float* s, long s_stride, int n_q, const float* v,
                       long v_stride, int n_pos, int head_dim) {
    for (int g = 0; g < n_q; g++)
        for (int p = 0; p < n_pos; p++) axpy_f32_scalar(out + g * out_stride, s[g * s_stride + p], v + p * v_stride, head_dim);
}

void gemm_f32_scalar(float* c, long ldc, float c_scale, const float* a, long a_rs, long a_cs, const float* b,
                     long ldb, int m, int n, int k, bool lower) {
    for (int i = 0; i < m; i++) {
        const int kend = lower && i + 1 < k ? i + 1 : k;
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int p = 0; p < kend; p++) acc += a[i * a_rs + p * a_cs] * b[p * ldb + j];
            float& out = c[i * ldc + j];
            out = c_scale == 0.0f ? acc : c_scale * out + acc;
        }
    }
}

void delta_rule_step_scalar(float* S, float* o, const float* q, const float* k, const float* v, float g, float beta,
                            int dk, int dv) {
    const float decay = std::exp(g);
    for (int j = 0; j < dv; j++) o[j] = delta_rule_column(S + j, dv, q, k, v[j], decay, beta, dk);
}

float read_stream_scalar(const void* p, long bytes, int) {
    const uint64_t* u = static_cast<const uint64_t*>(p);
    uint64_t acc = 0;
    for (long i = 0; i < bytes / 8; i++) acc ^= u[i];
    return float(acc & 0xffff);
}

double fma_peak_scalar(long iterations, float* sink) {
    constexpr int N = 12;
    float acc[N];
    for (int j = 0; j < N; j++) acc[j] = float(j) * 1e-3f;
    for (long it = 0; it < iterations; it++)
        for (int j = 0; j < N; j++) acc[j] = acc[j] * 0.999999f + 1e-7f;
    float s = 0.0f;
    for (int j = 0; j < N; j++) s += acc[j];
    *sink = s;
    return double(iterations) * N * 2.0;
}

KernelTable make_table() {
    KernelTable t{};
    t.isa = Isa::SCALAR;
    t.x_elem_bytes = 4;
    t.x_stride = x_stride_scalar;
    t.prepare_x = nullptr;
    t.matmul_rows = matmul_rows_scalar;
    // The rows loop is also the scalar "packed" path: columns are rows of W.
    t.packed_x_prepared = false;
    t.packed_min_m = INT_MAX;
    t.ffn_packed_min_m = INT_MAX;
    t.matmul_packed = matmul_rows_scalar;
    t.quantize_x = quantize_x_row;
    t.quant_rows = quant_rows_scalar;
    t.dequant_bf16 = dequant_bf16_scalar;
    t.quant_packed_min_m = INT_MAX;
    t.dot_f32 = dot_f32_scalar;
    t.axpy_f32 = axpy_f32_scalar;
    t.scale_f32 = scale_f32_scalar;
    t.max_f32 = max_f32_scalar;
    t.exp_sum_f32 = exp_sum_f32_scalar;
    t.rmsnorm = rmsnorm_scalar;
    t.silu_mul = silu_mul_scalar;
    t.rope = rope_scalar;
    t.attn_scores = attn_scores_scalar;
    t.attn_accum = attn_accum_scalar;
    t.gemm_f32 = gemm_f32_scalar;
    t.delta_rule_step = delta_rule_step_scalar;
    t.read_stream = read_stream_scalar;
    t.fma_peak = fma_peak_scalar;
    return t;
}

}  // namespace

const KernelTable& kernel_table_scalar() {
    static const KernelTable table = make_table();
    return table;
}
