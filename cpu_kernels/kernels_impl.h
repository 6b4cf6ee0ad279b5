// The vectorised kernels, written once as templates over a vector-traits type
// (vec_avx2.h, vec_avx512.h) and a matmul policy; each ISA translation unit
// instantiates them and fills its KernelTable with make_kernel_table(). Must
// be included only by ISA translation units, and uses no standard-library
// templates: everything here has internal linkage (anonymous namespace), so
// code compiled with AVX-512 flags is never shared with other TUs.
#pragma once
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cpu_kernels/bf16.h"
#include "cpu_kernels/delta_rule_column.h"
#include "cpu_kernels/isa.h"
#include "cpu_kernels/simd.h"

namespace {

inline int imin(int a, int b) { return a < b ? a : b; }

// A grow-only, 64-byte aligned per-thread buffer (pool threads live as long
// as the program, so steady-state calls never allocate).
struct Scratch {
    void* p = nullptr;
    size_t bytes = 0;
    ~Scratch() { std::free(p); }
    void* get(size_t n) {
        if (n > bytes) {
            std::free(p);
            bytes = (n + 4095) / 4096 * 4096;
            p = std::aligned_alloc(64, bytes);
        }
        return p;
    }
};

// ---------------------------------------------------------------------------
// fp32 helpers

// exp(x) for a vector: range reduction by ln 2, degree-6 polynomial (Cephes
// coefficients), 2^n by exponent arithmetic. Relative error ~2 ulp; x below
// -88 (including -inf) gives 0.
template <class V>
typename V::F vexp(typename V::F x) {
    using F = typename V::F;
    x = V::max(V::min(x, V::set1(88.0f)), V::set1(-88.0f));
    F n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
    F r = V::fmadd(n, V::set1(-0.693359375f), x);
    r = V::fmadd(n, V::set1(2.12194440e-4f), r);
    F p = V::set1(1.9875691500e-4f);
    p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
    p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
    p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
    p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
    p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
    F y = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
    return V::mul(y, V::pow2i(n));
}

template <class V>
float dot_f32(const float* a, const float* b, int n) {
    constexpr int W = V::W;
    typename V::F s0 = V::zero(), s1 = V::zero(), s2 = V::zero(), s3 = V::zero();
    int i = 0;
    for (; i + 4 * W <= n; i += 4 * W) {
        s0 = V::fmadd(V::load(a + i), V::load(b + i), s0);
        s1 = V::fmadd(V::load(a + i + W), V::load(b + i + W), s1);
        s2 = V::fmadd(V::load(a + i + 2 * W), V::load(b + i + 2 * W), s2);
        s3 = V::fmadd(V::load(a + i + 3 * W), V::load(b + i + 3 * W), s3);
    }
    for (; i + W <= n; i += W) s0 = V::fmadd(V::load(a + i), V::load(b + i), s0);
    float s = V::hsum(V::add(V::add(s0, s1), V::add(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

template <class V>
void axpy_f32(float* y, float a, const float* x, int n) {
    constexpr int W = V::W;
    typename V::F va = V::set1(a);
    int i = 0;
    for (; i + W <= n; i += W) V::store(y + i, V::fmadd(va, V::load(x + i), V::load(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

template <class V>
void scale_f32(float* x, float a, int n) {
    constexpr int W = V::W;
    typename V::F va = V::set1(a);
    int i = 0;
    for (; i + W <= n; i += W) V::store(x + i, V::mul(va, V::load(x + i)));
    for (; i < n; i++) x[i] *= a;
}

template <class V>
float max_f32(const float* x, int n) {
    constexpr int W = V::W;
    float m = x[0];
    int i = 0;
    if (n >= W) {
        typename V::F vm = V::load(x);
        for (i = W; i + W <= n; i += W) vm = V::max(vm, V::load(x + i));
        m = V::hmax(vm);
    }
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

template <class V>
float exp_sum_f32(float* x, int n, float shift) {
    constexpr int W = V::W;
    typename V::F vs = V::set1(shift), acc = V::zero();
    int i = 0;
    for (; i + W <= n; i += W) {
        typename V::F e = vexp<V>(V::sub(V::load(x + i), vs));
        V::store(x + i, e);
        acc = V::add(acc, e);
    }
    float s = V::hsum(acc);
    if (i < n) {
        // The tail goes through the same vector exp, so results do not depend
        // on where an element falls.
        float t[V::W];
        for (int j = 0; j < W; j++) t[j] = i + j < n ? x[i + j] : -__builtin_inff();
        V::store(t, vexp<V>(V::sub(V::load(t), vs)));
        for (int j = 0; i + j < n; j++) {
            x[i + j] = t[j];
            s += t[j];
        }
    }
    return s;
}

template <class V>
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
    constexpr int W = V::W;
    float ss = dot_f32<V>(x, x, n);
    float scale = 1.0f / __builtin_sqrtf(ss / float(n) + eps);
    typename V::F vs = V::set1(scale);
    int i = 0;
    for (; i + W <= n; i += W) V::store(out + i, V::mul(V::mul(V::load(x + i), vs), V::load(weight + i)));
    for (; i < n; i++) out[i] = x[i] * scale * weight[i];
}

template <class V>
void silu_mul(float* a, const float* b, int n) {
    constexpr int W = V::W;
    using F = typename V::F;
    F one = V::set1(1.0f), zero = V::zero();
    int i = 0;
    for (; i + W <= n; i += W) {
        F x = V::load(a + i);
        F sig = V::div(one, V::add(one, vexp<V>(V::sub(zero, x))));
        V::store(a + i, V::mul(V::mul(x, sig), V::load(b + i)));
    }
    if (i < n) {
        float t[V::W] = {}, u[V::W] = {};
        for (int j = 0; i + j < n; j++) t[j] = a[i + j], u[j] = b[i + j];
        F x = V::load(t);
        F sig = V::div(one, V::add(one, vexp<V>(V::sub(zero, x))));
        V::store(t, V::mul(V::mul(x, sig), V::load(u)));
        for (int j = 0; i + j < n; j++) a[i + j] = t[j];
    }
}

template <class V>
void rope(float* x, int n_heads, int head_dim, const float* cos, const float* sin) {
    constexpr int W = V::W;
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float* lo = x + long(h) * head_dim;
        float* hi = lo + half;
        int i = 0;
        for (; i + W <= half; i += W) {
            typename V::F a = V::load(lo + i), b = V::load(hi + i), c = V::load(cos + i), s = V::load(sin + i);
            V::store(lo + i, V::sub(V::mul(a, c), V::mul(b, s)));
            V::store(hi + i, V::fmadd(b, c, V::mul(a, s)));
        }
        for (; i < half; i++) {
            float a = lo[i], b = hi[i];
            lo[i] = a * cos[i] - b * sin[i];
            hi[i] = b * cos[i] + a * sin[i];
        }
    }
}

template <class V>
void attn_scores(float* s, long s_stride, const float* q, long q_stride, int n_q, const float* k, long k_stride,
                 int n_pos, int head_dim, float scale) {
    // Position-major: each K row is read from memory once and stays in L1
    // while every query of the group uses it.
    for (int p = 0; p < n_pos; p++) {
        const float* kp = k + long(p) * k_stride;
        for (int g = 0; g < n_q; g++) s[g * s_stride + p] = scale * dot_f32<V>(q + g * q_stride, kp, head_dim);
    }
}

template <class V>
void attn_accum(float* out, long out_stride, const float* s, long s_stride, int n_q, const float* v, long v_stride,
                int n_pos, int head_dim) {
    for (int p = 0; p < n_pos; p++) {
        const float* vp = v + long(p) * v_stride;
        for (int g = 0; g < n_q; g++) axpy_f32<V>(out + g * out_stride, s[g * s_stride + p], vp, head_dim);
    }
}

// ---------------------------------------------------------------------------
// Small fp32 GEMM (the chunked delta rule): c (m, n) = c_scale * c + A B with
// A element (i, p) at a[i * a_rs + p * a_cs] (any layout: each A element is
// broadcast, so a transposed A costs nothing) and B row-major. An MR x NRV
// vectors tile of c lives in registers; B's rows of a column tile are read
// by every row tile in turn (k x NRV * W floats, L1-resident). Columns past
// the last whole tile go by single vectors, then by scalars.

template <class V, int MR, int NRV>
void gemm_tile(float* c, long ldc, float c_scale, const float* a, long a_rs, long a_cs, const float* b, long ldb,
               int kend) {
    using F = typename V::F;
    F acc[MR][NRV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NRV; v++) acc[i][v] = V::zero();
    for (int p = 0; p < kend; p++) {
        F bv[NRV];
#pragma GCC unroll 4
        for (int v = 0; v < NRV; v++) bv[v] = V::load(b + long(p) * ldb + v * V::W);
        const float* ap = a + long(p) * a_cs;
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            F av = V::bcast(ap + long(i) * a_rs);
#pragma GCC unroll 4
            for (int v = 0; v < NRV; v++) acc[i][v] = V::fmadd(av, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NRV; v++) {
            float* q = c + long(i) * ldc + v * V::W;
            V::store(q, c_scale == 0.0f ? acc[i][v] : V::fmadd(V::set1(c_scale), V::load(q), acc[i][v]));
        }
}

template <class V, int MR, int NRV>
void gemm_tile_rows(int mr, float* c, long ldc, float c_scale, const float* a, long a_rs, long a_cs, const float* b,
                    long ldb, int kend) {
    if constexpr (MR >= 1) {
        if (mr == MR) return gemm_tile<V, MR, NRV>(c, ldc, c_scale, a, a_rs, a_cs, b, ldb, kend);
        gemm_tile_rows<V, MR - 1, NRV>(mr, c, ldc, c_scale, a, a_rs, a_cs, b, ldb, kend);
    }
}

// Columns [j0, j0 + NRV * W) of every row, in as few tiles of at most MR
// rows as cover m, their heights even (32 rows as 6 6 5 5 5 5, not 6 x 5
// and a tile of 2 whose loads outnumber its FMAs); lower: row tile [i0, i0
// + mr) reads A's columns below i0 + mr only.
template <class V, int MR, int NRV>
void gemm_columns(float* c, long ldc, float c_scale, const float* a, long a_rs, long a_cs, const float* b, long ldb,
                  int m, int k, bool lower, int j0) {
    const int tiles = (m + MR - 1) / MR;
    for (int t = 0, i0 = 0; t < tiles; t++) {
        const int mr = m / tiles + (t < m % tiles ? 1 : 0);
        int kend = lower ? imin(k, i0 + mr) : k;
        gemm_tile_rows<V, MR, NRV>(mr, c + long(i0) * ldc + j0, ldc, c_scale, a + long(i0) * a_rs, a_rs, a_cs,
                                   b + j0, ldb, kend);
        i0 += mr;
    }
}

template <class V>
void gemm_f32(float* c, long ldc, float c_scale, const float* a, long a_rs, long a_cs, const float* b, long ldb,
              int m, int n, int k, bool lower) {
    // 12 (avx2: 6 x 2) or 24 (avx512: 12 x 2) accumulators, 2 B vectors
    // and a broadcast in the 16 / 32 vector registers.
    constexpr int W = V::W, MR = W == 8 ? 6 : 12, NRV = 2;
    int j0 = 0;
    for (; j0 + NRV * W <= n; j0 += NRV * W)
        gemm_columns<V, MR, NRV>(c, ldc, c_scale, a, a_rs, a_cs, b, ldb, m, k, lower, j0);
    for (; j0 + W <= n; j0 += W) gemm_columns<V, MR, 1>(c, ldc, c_scale, a, a_rs, a_cs, b, ldb, m, k, lower, j0);
    for (int i = 0; i < m && j0 < n; i++) {
        const int kend = lower ? imin(k, i + 1) : k;
        for (int j = j0; j < n; j++) {
            // Fused as the vector tiles are, so a column's bits do not
            // depend on whether it falls in a tile or in this tail.
            float acc = 0.0f;
            for (int p = 0; p < kend; p++) acc = std::fma(a[long(i) * a_rs + long(p) * a_cs], b[long(p) * ldb + j], acc);
            float* q = c + long(i) * ldc + j;
            *q = c_scale == 0.0f ? acc : std::fma(c_scale, *q, acc);
        }
    }
}

// One token of the gated delta rule on one head (state S (dk, dv) row-major;
// see kernels.h): each block of state columns is independent (u's column j
// reads only S's column j), so a block of 4 vectors goes through both passes
// (decay and S^T k, then the update and S^T q) with o in registers, the
// block's dk x 4W floats staying in L1 between them.
template <class V>
void delta_rule_step(float* S, float* o, const float* q, const float* k, const float* v, float g, float beta,
                     int dk, int dv) {
    using F = typename V::F;
    constexpr int W = V::W, NB = 4;
    float decay_s;
    {
        F e = vexp<V>(V::set1(g));
        float tmp[W];
        V::store(tmp, e);
        decay_s = tmp[0];
    }
    const F decay = V::set1(decay_s), vbeta = V::set1(beta);
    int j0 = 0;
    for (; j0 + NB * W <= dv; j0 += NB * W) {
        F acc[NB];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) acc[b] = V::zero();
        for (int i = 0; i < dk; i++) {
            float* row = S + long(i) * dv + j0;
            const F ki = V::set1(k[i]);
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                F r = V::mul(V::load(row + b * W), decay);
                V::store(row + b * W, r);
                acc[b] = V::fmadd(r, ki, acc[b]);
            }
        }
        F u[NB];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            u[b] = V::mul(vbeta, V::sub(V::load(v + j0 + b * W), acc[b]));
            acc[b] = V::zero();
        }
        for (int i = 0; i < dk; i++) {
            float* row = S + long(i) * dv + j0;
            const F ki = V::set1(k[i]), qi = V::set1(q[i]);
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                F r = V::fmadd(ki, u[b], V::load(row + b * W));
                V::store(row + b * W, r);
                acc[b] = V::fmadd(r, qi, acc[b]);
            }
        }
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) V::store(o + j0 + b * W, acc[b]);
    }
    // The remaining columns one at a time, in the same order.
    for (int j = j0; j < dv; j++) o[j] = delta_rule_column(S + j, dv, q, k, v[j], decay_s, beta, dk);
}

template <class V>
float read_stream(const void* p, long bytes, int streams) {
    // The range is read as `streams` equal parts in lockstep (more
    // independent streams can mean more memory-level parallelism).
    constexpr int W = V::W;
    using F = typename V::F;
    assert(streams >= 1 && streams <= 8);
    const float* f = static_cast<const float*>(p);
    long part = bytes / long(sizeof(float)) / streams / (4 * W) * (4 * W);
    F acc[8];
    for (int s = 0; s < 8; s++) acc[s] = V::zero();
    // max() neither traps nor stalls on odd bit patterns, and keeps every
    // load live.
    for (long i = 0; i < part; i += 4 * W)
        for (int s = 0; s < streams; s++) {
            const float* q = f + s * part + i;
            F a = V::max(V::load(q), V::load(q + W)), b = V::max(V::load(q + 2 * W), V::load(q + 3 * W));
            acc[s] = V::max(acc[s], V::max(a, b));
        }
    for (int s = 1; s < streams; s++) acc[0] = V::max(acc[0], acc[s]);
    return V::hmax(acc[0]);
}

template <class V>
double fma_peak(long iterations, float* sink) {
    // 12 independent accumulator chains cover FMA latency x ports on current
    // x86 cores (4 cycles x 2 pipes = 8 needed).
    using F = typename V::F;
    constexpr int N = 12;
    F acc[N];
    for (int j = 0; j < N; j++) acc[j] = V::set1(float(j) * 1e-3f);
    F a = V::set1(0.999999f), b = V::set1(1e-7f);
    for (long it = 0; it < iterations; it++) {
        for (int j = 0; j < N; j++) acc[j] = V::fmadd(acc[j], a, b);
    }
    F s = acc[0];
    for (int j = 1; j < N; j++) s = V::add(s, acc[j]);
    *sink = V::hsum(s);
    return double(iterations) * N * V::W * 2.0;
}

// ---------------------------------------------------------------------------
// Rows path: the dot-product form. R weight rows x M tokens accumulate in
// registers; each step reads P::KS weights of each row once. The horizontal
// sums happen once per (row, token) at the end. For m = 1 one row at a time
// (R = 1) measured best: each thread then reads one purely sequential stream.
// Two software prefetches per row and step: a few cache lines ahead into L1,
// and the same place in the next block of R rows into L2, so a new block
// (short rows: 2 KB for k = 1024) never starts cold.
constexpr int PREFETCH_BYTES = 256;

template <class P, int R, int M>
void rows_block(float* y, int n, const typename P::X* xp, int xs, const bf16* w, int k, int r, int i0) {
    using F = typename P::F;
    // Few accumulators would make the multiply-add latency the limit: then
    // two sets take alternate steps. U depends on the token count only, never
    // on R: a row then sums in the same order whichever block (and so
    // whichever thread's range) it falls in.
    constexpr int U = (M == 1 ? P::R1 : P::RM_R) * M < 4 ? 2 : 1;
    F acc[U][R][M];
    for (int u = 0; u < U; u++)
        for (int q = 0; q < R; q++)
            for (int t = 0; t < M; t++) acc[u][q][t] = P::V::zero();
    const bf16* wr[R];
    for (int q = 0; q < R; q++) wr[q] = w + long(r + q) * k;
    const typename P::X* xr[M];
    for (int t = 0; t < M; t++) xr[t] = xp + long(i0 + t) * xs;
    int kb = k / P::KS * P::KS;
    auto step = [&](int j, F (&a)[R][M]) {
        for (int q = 0; q < R; q++) {
            _mm_prefetch(reinterpret_cast<const char*>(wr[q] + j) + PREFETCH_BYTES, _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(wr[q] + j + long(R) * k), _MM_HINT_T1);
        }
        typename P::Wv wv[R];
        for (int q = 0; q < R; q++) wv[q] = P::load_w(wr[q] + j);
        for (int t = 0; t < M; t++) {
            typename P::Xv xv = P::load_x(xr[t] + j);
            for (int q = 0; q < R; q++) a[q][t] = P::madd(a[q][t], wv[q], xv);
        }
    };
    int j = 0;
    for (; j + U * P::KS <= kb; j += U * P::KS)
        for (int u = 0; u < U; u++) step(j + u * P::KS, acc[u]);
    for (; j < kb; j += P::KS) step(j, acc[0]);
    for (int q = 0; q < R; q++)
        for (int t = 0; t < M; t++) {
            F sum = acc[0][q][t];
            for (int u = 1; u < U; u++) sum = P::V::add(sum, acc[u][q][t]);
            y[long(i0 + t) * n + r + q] = P::V::hsum(sum) + P::tail(wr[q] + kb, xr[t] + kb, k - kb);
        }
}

// rows_block for the last m % M tokens (MM counts down to 1 at compile time).
template <class P, int R, int MM>
void rows_block_rest(int rest, float* y, int n, const typename P::X* xp, int xs, const bf16* w, int k, int r, int i0) {
    if constexpr (MM >= 1) {
        if (rest == MM) return rows_block<P, R, MM>(y, n, xp, xs, w, k, r, i0);
        rows_block_rest<P, R, MM - 1>(rest, y, n, xp, xs, w, k, r, i0);
    }
}

template <class P, int R, int M>
void rows_all_tokens(float* y, const typename P::X* xp, const bf16* w, int m, int n, int k, int r) {
    int xs = P::x_stride(k);
    int i = 0;
    for (; i + M <= m; i += M) rows_block<P, R, M>(y, n, xp, xs, w, k, r, i);
    if (i < m) rows_block_rest<P, R, M - 1>(m - i, y, n, xp, xs, w, k, r, i);
}

template <class P>
void matmul_rows(float* y, const void* xpv, const bf16* w, int m, int n, int k, int r0, int r1) {
    assert(m > 0 && k > 0 && r0 >= 0 && r1 <= n);
    const typename P::X* xp = static_cast<const typename P::X*>(xpv);
    int r = r0;
    if (m == 1) {
        for (; r + P::R1 <= r1; r += P::R1) rows_all_tokens<P, P::R1, 1>(y, xp, w, m, n, k, r);
        for (; r < r1; r++) rows_all_tokens<P, 1, 1>(y, xp, w, m, n, k, r);
    } else {
        for (; r + P::RM_R <= r1; r += P::RM_R) rows_all_tokens<P, P::RM_R, P::RM_M>(y, xp, w, m, n, k, r);
        for (; r < r1; r++) rows_all_tokens<P, 1, P::RM_M>(y, xp, w, m, n, k, r);
    }
}

template <class P>
void prepare_x(void* xpv, const float* x, int m, int k, int c0, int c1) {
    typename P::X* xp = static_cast<typename P::X*>(xpv);
    int xs = P::x_stride(k);
    for (int i = 0; i < m; i++) P::prepare_row(xp + long(i) * xs, x + long(i) * k, k, c0, c1);
}

// ---------------------------------------------------------------------------
// Packed path: a cache-blocked GEMM. Per thread, for each block of P::KC
// steps (a step is one k for fp32, one pair of k for bf16 pairs) the x block
// is packed into MR-row panels and for each block of P::NC columns W is
// converted once into NR-column panels (L2-resident) and reused by all m
// tokens. The micro-kernel keeps an MR x NR tile of y in registers.

template <class P, int MR>
void micro_kernel(float* c, int ldc, const typename P::A* ap, const typename P::B* bp, int kc, int ncols,
                  bool accumulate) {
    using V = typename P::V;
    using F = typename V::F;
    constexpr int NRV = P::NRV, NR = P::NRV * V::W;
    F acc[MR][NRV];
#pragma GCC unroll 32
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NRV; v++) acc[i][v] = V::zero();
    for (int s = 0; s < kc; s++) {
        typename P::Bv b[NRV];
#pragma GCC unroll 4
        for (int v = 0; v < NRV; v++) b[v] = P::load_b(bp + long(s) * NR + v * V::W);
#pragma GCC unroll 32
        for (int i = 0; i < MR; i++) {
            typename P::Av a = P::bcast_a(ap + long(s) * P::MR + i);
#pragma GCC unroll 4
            for (int v = 0; v < NRV; v++) acc[i][v] = P::madd_ab(acc[i][v], a, b[v]);
        }
    }
    // Accumulators are only ever indexed by unrolled constants, so they stay
    // in registers (a runtime index would make GCC mirror them to memory on
    // every step).
    if (ncols == NR) {
#pragma GCC unroll 32
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int v = 0; v < NRV; v++) {
                float* p = c + long(i) * ldc + v * V::W;
                V::store(p, accumulate ? V::add(V::load(p), acc[i][v]) : acc[i][v]);
            }
        return;
    }
    float tile[MR * NR];
#pragma GCC unroll 32
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NRV; v++) V::store(tile + i * NR + v * V::W, acc[i][v]);
    for (int i = 0; i < MR; i++) {
        float* p = c + long(i) * ldc;
        for (int j = 0; j < ncols; j++) p[j] = accumulate ? p[j] + tile[i * NR + j] : tile[i * NR + j];
    }
}

template <class P, int MR>
void micro_kernel_rows(int mr, float* c, int ldc, const typename P::A* ap, const typename P::B* bp, int kc,
                       int ncols, bool accumulate) {
    if constexpr (MR >= 1) {
        if (mr == MR) return micro_kernel<P, MR>(c, ldc, ap, bp, kc, ncols, accumulate);
        micro_kernel_rows<P, MR - 1>(mr, c, ldc, ap, bp, kc, ncols, accumulate);
    }
}

// A block: rows [0, m) x steps [s0, s0 + kc) -> panels [panel][s][MR].
template <class P>
void pack_a(typename P::A* dst, const typename P::A* x, int xs, int m, int s0, int kc) {
    for (int i0 = 0; i0 < m; i0 += P::MR) {
        typename P::A* d = dst + long(i0) * kc;
        int mr = imin(P::MR, m - i0);
        for (int i = 0; i < mr; i++) {
            const typename P::A* src = x + long(i0 + i) * xs + s0;
            for (int s = 0; s < kc; s++) d[long(s) * P::MR + i] = src[s];
        }
    }
}

template <class P>
void matmul_packed(float* y, const void* xv, const bf16* w, int m, int n, int k, int c0, int c1) {
    assert(m > 0 && k > 0 && c0 >= 0 && c1 <= n);
    using A = typename P::A;
    using B = typename P::B;
    constexpr int NR = P::NRV * P::V::W;
    static_assert(P::NC % NR == 0 && NR % 8 == 0);
    static thread_local Scratch a_buf, b_buf;
    const A* x = static_cast<const A*>(xv);
    int xs = P::steps(k);
    int steps = P::steps(k);
    int m_pad = (m + P::MR - 1) / P::MR * P::MR;
    A* ap = static_cast<A*>(a_buf.get(sizeof(A) * size_t(m_pad) * P::KC));
    B* bp = static_cast<B*>(b_buf.get(sizeof(B) * size_t(P::NC) * P::KC));
    for (int s0 = 0; s0 < steps; s0 += P::KC) {
        int kc = imin(P::KC, steps - s0);
        pack_a<P>(ap, x, xs, m, s0, kc);
        for (int n0 = c0; n0 < c1; n0 += P::NC) {
            int nc = imin(P::NC, c1 - n0);
            P::pack_b(bp, w, n, k, n0, nc, s0, kc);
            for (int j0 = 0; j0 < nc; j0 += NR) {
                const B* bpanel = bp + long(j0) * kc;
                for (int i0 = 0; i0 < m; i0 += P::MR)
                    micro_kernel_rows<P, P::MR>(imin(P::MR, m - i0), y + long(i0) * n + n0 + j0, n,
                                                ap + long(i0) * kc, bpanel, kc, imin(NR, nc - j0), s0 > 0);
            }
        }
    }
}

// B block: W rows [n0, n0 + nc) x steps [s0, s0 + kc) -> panels
// [panel][s][NR] of 32-bit elements; columns past nc are zero. Full 8 x 8
// tiles go through an AVX 8 x 8 transpose; P::load_row8 widens 8 steps of
// one W row into 8 32-bit lanes (fp32 values or bf16 pairs).
inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

template <class P>
void pack_b_blocks(typename P::B* dst, const bf16* w, int n, int k, int n0, int nc, int s0, int kc) {
    constexpr int NR = P::NRV * P::V::W;
    static_assert(sizeof(typename P::B) == 4);
    int kc8 = P::full_steps8(k, s0, kc);  // steps of this block that load_row8 may read
    for (int j0 = 0; j0 < nc; j0 += NR) {
        typename P::B* panel = dst + long(j0) * kc;
        for (int jj = 0; jj < NR; jj += 8) {
            int rows = imin(8, nc - j0 - jj);
            const bf16* wrow = w + long(n0 + j0 + jj) * k;
            int s = 0;
            if (rows == 8) {
                for (; s + 8 <= kc8; s += 8) {
                    __m256 r[8];
                    for (int q = 0; q < 8; q++) r[q] = P::load_row8(wrow + long(q) * k, s0 + s);
                    transpose8(r);
                    for (int q = 0; q < 8; q++)
                        _mm256_storeu_ps(reinterpret_cast<float*>(panel + long(s + q) * NR + jj), r[q]);
                }
            }
            for (; s < kc; s++)
                for (int q = 0; q < 8; q++)
                    panel[long(s) * NR + jj + q] = q < rows ? P::pack_elem(wrow + long(q) * k, s0 + s, k) : 0;
        }
    }
    (void)n;
}

// ---------------------------------------------------------------------------
// The fp32 matmul policy: W widened by shift, FMA in fp32. Rows path: x is
// prepared per block of 2W as [the W even-indexed | the W odd-indexed]
// elements, so one 2W-bf16 load splits into two fp32 vectors with a shift
// and an and. Packed path: raw fp32 x, W packed as fp32.
template <class VV, int R1_, int RM_R_, int RM_M_, int MR_, int NRV_, int KC_, int NC_>
struct MatF32 {
    using V = VV;
    using F = typename V::F;
    static constexpr int W = V::W;
    static constexpr int R1 = R1_, RM_R = RM_R_, RM_M = RM_M_;

    using X = float;
    static constexpr int KS = 2 * W;
    struct Pair {
        F e, o;
    };
    using Wv = Pair;
    using Xv = Pair;
    static Wv load_w(const bf16* p) {
        Pair r;
        V::load_bf16_pairs(p, r.e, r.o);
        return r;
    }
    static Xv load_x(const float* p) { return {V::load(p), V::load(p + W)}; }
    static F madd(F acc, const Wv& w, const Xv& x) { return V::fmadd(w.o, x.o, V::fmadd(w.e, x.e, acc)); }
    static float tail(const bf16* w, const float* x, int n) {
        float s = 0.0f;
        for (int j = 0; j < n; j++) s += bf16_to_f32(w[j]) * x[j];
        return s;
    }
    static int x_stride(int k) { return k; }
    static void prepare_row(float* xp, const float* x, int k, int c0, int c1) {
        int kb = k / KS * KS;
        int j = c0;
        for (; j + KS <= c1 && j < kb; j += KS)
            for (int l = 0; l < W; l++) {
                xp[j + l] = x[j + 2 * l];
                xp[j + W + l] = x[j + 2 * l + 1];
            }
        for (; j < c1; j++) xp[j] = x[j];
    }

    using A = float;
    using B = float;
    using Av = F;
    using Bv = F;
    static constexpr bool X_PREPARED = false;
    static constexpr int MR = MR_, NRV = NRV_, KC = KC_, NC = NC_;
    static int steps(int k) { return k; }
    static Av bcast_a(const float* p) { return V::bcast(p); }
    static Bv load_b(const float* p) { return V::load(p); }
    static F madd_ab(F acc, Av a, Bv b) { return V::fmadd(a, b, acc); }
    static int full_steps8(int k, int s0, int kc) { return imin(kc, k - s0); }
    static __m256 load_row8(const bf16* wrow, int s) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + s)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    static float pack_elem(const bf16* wrow, int s, int) { return bf16_to_f32(wrow[s]); }
    static void pack_b(float* dst, const bf16* w, int n, int k, int n0, int nc, int s0, int kc) {
        pack_b_blocks<MatF32>(dst, w, n, k, n0, nc, s0, kc);
    }
};

template <class P>
void fill_matmul(KernelTable& t, int packed_min_m, int ffn_packed_min_m) {
    t.x_elem_bytes = int(sizeof(typename P::X));
    t.x_stride = P::x_stride;
    t.prepare_x = prepare_x<P>;
    t.matmul_rows = matmul_rows<P>;
    t.packed_x_prepared = P::X_PREPARED;
    t.packed_min_m = packed_min_m;
    t.ffn_packed_min_m = ffn_packed_min_m;
    t.matmul_packed = matmul_packed<P>;
}

template <class V>
void fill_vector_ops(KernelTable& t) {
    t.dot_f32 = dot_f32<V>;
    t.axpy_f32 = axpy_f32<V>;
    t.scale_f32 = scale_f32<V>;
    t.max_f32 = max_f32<V>;
    t.exp_sum_f32 = exp_sum_f32<V>;
    t.rmsnorm = rmsnorm<V>;
    t.silu_mul = silu_mul<V>;
    t.rope = rope<V>;
    t.attn_scores = attn_scores<V>;
    t.attn_accum = attn_accum<V>;
    t.gemm_f32 = gemm_f32<V>;
    t.delta_rule_step = delta_rule_step<V>;
    t.read_stream = read_stream<V>;
    t.fma_peak = fma_peak<V>;
}

}  // namespace
