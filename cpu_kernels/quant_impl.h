// The vectorised kernels of block-quantized weights (quant.h), written once
// as templates over an int8 dot-product policy (DotMadd: vpmaddubsw +
// vpmaddwd, AVX2 / AVX-512BW; DotVnni: vpdpbusd, AVX512-VNNI) and a vector-
// traits type for the fp32 side; each ISA translation unit instantiates
// them with fill_quant(). Same rules as kernels_impl.h: included only by ISA
// translation units, internal linkage, no standard-library templates.
//
// Everything works on 256-bit units of 32 weights: a unit's levels are 32
// unsigned bytes, dotted with 32 int8 activations into 8 int32 lanes (lane
// l: elements 4l..4l+3, so lanes 0-3 are the first 16 elements). The
// kernels are bound by vector-op throughput; a 512-bit form (two units per
// instruction) measured 14 % slower on Zen 4, which runs a 512-bit op as two
// 256-bit ones, so the AVX-512 paths use the same width (their EVEX forms:
// 32 registers).
#pragma once
#include <cassert>
#include <cstdint>
#include <cstring>

#include "cpu_kernels/bf16.h"
#include "cpu_kernels/dtype.h"
#include "cpu_kernels/kernels_impl.h"
#include "cpu_kernels/quant.h"
#include "cpu_kernels/simd.h"
#include "cpu_kernels/vec_avx2.h"

namespace {

inline __m256i load256(const void* p) {
    return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
inline float fp16_at(const void* p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if defined(MOE_SIMDE)
    return fp16_to_f32(h);
#else
    // F16C: exact, as fp16_to_f32
    return _cvtsh_ss(h);
#endif
}
// 8 fp16 at p (any alignment) -> 8 fp32.
inline __m256 fp16x8_at(const void* p) {
#if defined(MOE_SIMDE)
    alignas(32) float f[8];
    for (int i = 0; i < 8; i++) f[i] = fp16_at(static_cast<const char*>(p) + 2 * i);
    return _mm256_load_ps(f);
#else
    // F16C: exact
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
#endif
}
inline int hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// ---------------------------------------------------------------------------
// Dot-product policies: u (32 unsigned levels, < 128 for DotMadd, whose
// pair sums saturate at 2^15) times s (32 int8) summed into 8 int32 lanes;
// `scaled` multiplies each lane's sum by a per-lane scale first. scales()
// turns 8 int32 scales into the policy's form once per block; a unit's
// scale vector is then one lane permute of it (a for elements 0-15 of the
// unit, b for 16-31).

struct DotMadd {
    using S = __m256i;  // 16 int16 lanes (lane i: elements 2i, 2i+1)
    static __m256i dot(__m256i acc, __m256i u, __m256i s) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
    }
    // 8 int32 scales -> each in both int16 halves of its lane (a lane
    // broadcast of the result is then an int16 broadcast).
    static S scales(__m256i s32) {
        return _mm256_or_si256(_mm256_and_si256(s32, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(s32, 16));
    }
    static __m256i scaled(__m256i acc, __m256i u, __m256i s, S sc) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc));
    }
    // 16 int16 pairs a * b summed into 8 int32 lanes.
    static __m256i dot16(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
    // Signed levels stored as u = w + 128 (Q8_0_R8) times s: the sum of
    // (u - 128 + BIAS) * s. Here w itself, its sign moved onto s (pair sums
    // of |w| <= 128 and |s| <= 127 do not saturate), so BIAS is 0.
    static constexpr int BIAS = 0;
    static __m256i dot_biased(__m256i acc, __m256i u, __m256i s) {
        const __m256i w = _mm256_xor_si256(u, _mm256_set1_epi8(char(0x80)));
        return dot(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(s, w));
    }
};

#if defined(__AVX512VNNI__) || defined(MOE_SIMDE)
// VNNI: vpdpbusd for plain sums; scaled sums are vpmaddubsw then vpdpwssd
// (the int16 multiply by the scale and the accumulation in one).
struct DotVnni {
    using S = __m256i;  // 16 int16 lanes, as DotMadd's
    static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
    static S scales(__m256i s32) { return DotMadd::scales(s32); }
    static __m256i scaled(__m256i acc, __m256i u, __m256i s, S sc) {
        return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc);
    }
    static __m256i dot16(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }
    // u * s as stored, one vpdpbusd: the caller takes off 128 * sum(s).
    static constexpr int BIAS = 128;
    static __m256i dot_biased(__m256i acc, __m256i u, __m256i s) { return dot(acc, u, s); }
};
#endif

// ---------------------------------------------------------------------------
// Weight formats. A 32-block type gives its unit's levels (and, for Q8_0,
// the activations' signs) and a level offset; a K type gives per block a
// head (d, the min factor dm, per-16 min coefficients) and per unit its
// levels and scales. Element value = d * scale * level - dm * coef for the
// K types, d * (level - OFFSET) (Q4_0) or d * level (Q8_0, signed).

struct FmtQ8_0 {
    static constexpr int BYTES = 34, OFFSET = 0;
    static float scale(const uint8_t* b) { return fp16_at(b); }
    // Signed levels: |w| as unsigned levels, the activations' sign flipped where w < 0.
    static void unit(const uint8_t* b, __m256i& u, __m256i& xsign) {
        __m256i w = load256(b + 2);
        u = _mm256_abs_epi8(w);
        xsign = w;
    }
    static __m256i adjust_x(__m256i x, __m256i xsign) { return _mm256_sign_epi8(x, xsign); }
    static void dequant(const uint8_t* b, float* y) {
        __m256 d = _mm256_set1_ps(fp16_at(b));
        for (int i = 0; i < 4; i++) {
            __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * i));
            _mm256_storeu_ps(y + 8 * i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
    }
};

struct FmtQ4_0 {
    static constexpr int BYTES = 18, OFFSET = 8;
    static float scale(const uint8_t* b) { return fp16_at(b); }
    static __m256i levels(const uint8_t* b) {
        __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)), m = _mm_set1_epi8(15);
        return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m)),
                                       _mm_and_si128(_mm_srli_epi16(v, 4), m), 1);
    }
    static void unit(const uint8_t* b, __m256i& u, __m256i& xsign) {
        u = levels(b);
        xsign = u;
    }
    static __m256i adjust_x(__m256i x, __m256i) { return x; }
    static void dequant(const uint8_t* b, float* y) {
        alignas(32) uint8_t lv[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(lv), levels(b));
        __m256 d = _mm256_set1_ps(fp16_at(b)), off = _mm256_set1_ps(-8.0f * fp16_at(b));
        for (int i = 0; i < 4; i++) {
            __m256 l =
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(lv + 8 * i))));
            _mm256_storeu_ps(y + 8 * i, _mm256_fmadd_ps(d, l, off));
        }
    }
};

// MXFP4: the nibbles through the FP4 table (one vpshufb) to signed levels,
// then Q8_0's sign trick (|w| unsigned, the activations' signs flipped
// where w < 0); the scale a power of two.
struct FmtMXFP4 {
    static constexpr int BYTES = 17, OFFSET = 0;
    static float scale(const uint8_t* b) { return mxfp4_scale(b[0]); }
    static __m256i values(const uint8_t* b) {
        __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1)), m = _mm_set1_epi8(15);
        __m256i nib = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m)),
                                              _mm_and_si128(_mm_srli_epi16(v, 4), m), 1);
        const __m256i table = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4,
                                               6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
        return _mm256_shuffle_epi8(table, nib);
    }
    static void unit(const uint8_t* b, __m256i& u, __m256i& xsign) {
        __m256i w = values(b);
        u = _mm256_abs_epi8(w);
        xsign = w;
    }
    static __m256i adjust_x(__m256i x, __m256i xsign) { return _mm256_sign_epi8(x, xsign); }
    static void dequant(const uint8_t* b, float* y) {
        alignas(32) int8_t lv[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(lv), values(b));
        __m256 d = _mm256_set1_ps(scale(b));
        for (int i = 0; i < 4; i++)
            _mm256_storeu_ps(y + 8 * i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                                              reinterpret_cast<const __m128i*>(lv + 8 * i))))));
    }
};

struct KHead {
    float d, dm;
    __m256i coef;        // 16 int16: the min coefficient of each group of 16
    __m256i sc[2];       // scales as 8 int32 lanes in the policy's form (Q::scales)
    uint64_t sc8, mn8;   // Q4_K / Q5_K: the 6-bit scales and mins as bytes
    const int8_t* sc16;  // Q6_K: the group scales
};

inline __m256i lane_index(int a, int b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32(a)), _mm_set1_epi32(b), 1);
}

// Q4_K and Q5_K (HIGH: the fifth bit).
template <bool HIGH>
struct FmtK45 {
    static constexpr int BYTES = HIGH ? 176 : 144;
    static constexpr int QS = HIGH ? 48 : 16;  // offset of qs
    template <class Q>
    static KHead head(const uint8_t* b) {
        KHead h;
        h.d = fp16_at(b);
        h.dm = fp16_at(b + 2);
        k_scale_min64(b + 4, h.sc8, h.mn8);
        __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(h.mn8)));
        h.coef = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(m, m)), _mm_unpackhi_epi16(m, m), 1);
        h.sc[0] = Q::scales(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(h.sc8))));
        h.sc16 = nullptr;
        return h;
    }
    static __m256i levels(const uint8_t* b, int u) {
        __m256i v = load256(b + QS + 32 * (u / 2)), m = _mm256_set1_epi8(15);
        __m256i l = u % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m) : _mm256_and_si256(v, m);
        if (HIGH) {
            __m256i hb = _mm256_and_si256(_mm256_srli_epi16(load256(b + 16), u), _mm256_set1_epi8(1));
            l = _mm256_or_si256(l, _mm256_slli_epi16(hb, 4));
        }
        return l;
    }
    // Sub-block u's scale in every lane.
    static __m256i scale(const KHead& h, int u) { return _mm256_permutevar8x32_epi32(h.sc[0], _mm256_set1_epi32(u)); }
    static int scale_of(const KHead& h, int g) { return int(h.sc8 >> (8 * (g / 2)) & 0xff); }
    static int coef_of(const KHead& h, int g) { return int(h.mn8 >> (8 * (g / 2)) & 0xff); }
};

struct FmtQ6_K {
    static constexpr int BYTES = 210;
    template <class Q>
    static KHead head(const uint8_t* b) {
        KHead h;
        h.d = fp16_at(b + 208);
        h.dm = h.d;
        h.sc16 = reinterpret_cast<const int8_t*>(b + 192);
        __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
        h.coef = _mm256_slli_epi16(_mm256_cvtepi8_epi16(s), 5);
        h.sc[0] = Q::scales(_mm256_cvtepi8_epi32(s));
        h.sc[1] = Q::scales(_mm256_cvtepi8_epi32(_mm_srli_si128(s, 8)));
        h.sc8 = h.mn8 = 0;
        return h;
    }
    static __m256i levels(const uint8_t* b, int u) {
        int half = u / 4, part = u % 4;
        __m256i lo = load256(b + 64 * half + 32 * (part & 1)), m = _mm256_set1_epi8(15);
        lo = part < 2 ? _mm256_and_si256(lo, m) : _mm256_and_si256(_mm256_srli_epi16(lo, 4), m);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(load256(b + 128 + 32 * half), 2 * part), _mm256_set1_epi8(3));
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    // Groups 2u (lanes 0-3) and 2u + 1 (lanes 4-7).
    static __m256i scale(const KHead& h, int u) {
        int g = 2 * (u % 4);
        return _mm256_permutevar8x32_epi32(h.sc[u / 4], lane_index(g, g + 1));
    }
    static int scale_of(const KHead& h, int g) { return h.sc16[g]; }
    static int coef_of(const KHead& h, int g) { return 32 * h.sc16[g]; }
};

// ---------------------------------------------------------------------------
// Rows path: one weight row at a time (a purely sequential stream per
// thread), decoded once per unit and dotted with M tokens' activations.
// The fp32 sums follow the token count only, never the thread split.

constexpr int QPREFETCH = 512;

template <class Q, class T, int M>
void qrows_k(float* y, int n, const char* xq, size_t xrow, const uint8_t* wr, int nb, int r, int i0) {
    const XBlock256* xr[M];
    for (int t = 0; t < M; t++) xr[t] = reinterpret_cast<const XBlock256*>(xq + size_t(i0 + t) * xrow);
    __m256 acc[M];
    for (int t = 0; t < M; t++) acc[t] = _mm256_setzero_ps();
    for (int ib = 0; ib < nb; ib++) {
        const uint8_t* b = wr + size_t(ib) * T::BYTES;
        _mm_prefetch(reinterpret_cast<const char*>(b) + QPREFETCH, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b) + QPREFETCH + 64, _MM_HINT_T0);
        KHead h = T::template head<Q>(b);
        // Even and odd units into separate sums: two short dependency chains.
        __m256i sumi[2][M];
        for (int t = 0; t < M; t++) sumi[0][t] = sumi[1][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++) {
            __m256i lv = T::levels(b, u);
            __m256i sc = T::scale(h, u);
            for (int t = 0; t < M; t++)
                sumi[u % 2][t] = Q::scaled(sumi[u % 2][t], lv, load256(xr[t][ib].q + 32 * u), sc);
        }
        for (int t = 0; t < M; t++) {
            const XBlock256& xb = xr[t][ib];
            sumi[0][t] = _mm256_add_epi32(sumi[0][t], sumi[1][t]);
            __m256i mins = _mm256_madd_epi16(h.coef, load256(xb.bsums));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[0][t]), _mm256_set1_ps(h.d * xb.d), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(h.dm * xb.d), acc[t]);
        }
    }
    for (int t = 0; t < M; t++) y[long(i0 + t) * n + r] = VecAvx2::hsum(acc[t]);
}

template <class Q, class T, int M>
void qrows_32(float* y, int n, const char* xq, size_t xrow, const uint8_t* wr, int nb, int r, int i0) {
    const XBlock32* xr[M];
    for (int t = 0; t < M; t++) xr[t] = reinterpret_cast<const XBlock32*>(xq + size_t(i0 + t) * xrow);
    // Two sets of accumulators take alternate blocks (a block is a few
    // cycles, the multiply-add latency four).
    __m256 acc[2][M];
    float off[2][M];
    for (int u = 0; u < 2; u++)
        for (int t = 0; t < M; t++) acc[u][t] = _mm256_setzero_ps(), off[u][t] = 0.0f;
    auto step = [&](int ib, __m256(&a)[M], float(&o)[M]) {
        const uint8_t* b = wr + size_t(ib) * T::BYTES;
        _mm_prefetch(reinterpret_cast<const char*>(b) + QPREFETCH, _MM_HINT_T0);
        float d = T::scale(b);
        __m256i u, xsign;
        T::unit(b, u, xsign);
        for (int t = 0; t < M; t++) {
            const XBlock32& xb = xr[t][ib];
            __m256i p = Q::dot(_mm256_setzero_si256(), u, T::adjust_x(load256(xb.q), xsign));
            a[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * xb.d), a[t]);
            if (T::OFFSET) o[t] += d * xb.ds;
        }
    };
    int ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        step(ib, acc[0], off[0]);
        step(ib + 1, acc[1], off[1]);
    }
    if (ib < nb) step(ib, acc[0], off[0]);
    for (int t = 0; t < M; t++)
        y[long(i0 + t) * n + r] =
            VecAvx2::hsum(_mm256_add_ps(acc[0][t], acc[1][t])) - float(T::OFFSET) * (off[0][t] + off[1][t]);
}

using QRowsFn = void (*)(float*, int, const char*, size_t, const uint8_t*, int, int, int);

template <class Q, class T, bool K, int M>
constexpr QRowsFn qrows_fn() {
    if constexpr (K)
        return qrows_k<Q, T, M>;
    else
        return qrows_32<Q, T, M>;
}

// All m tokens of rows [r0, r1): groups of 4 tokens, then the rest.
template <class Q, class T, bool K>
void qrows_range(float* y, const void* xq, const void* w, size_t row_bytes, int m, int n, int k, int r0, int r1) {
    constexpr int QB = K ? 256 : 32;
    int nb = k / QB;
    size_t xrow = size_t(nb) * (K ? sizeof(XBlock256) : sizeof(XBlock32));
    const QRowsFn fns[4] = {qrows_fn<Q, T, K, 1>(), qrows_fn<Q, T, K, 2>(), qrows_fn<Q, T, K, 3>(),
                            qrows_fn<Q, T, K, 4>()};
    const char* x = static_cast<const char*>(xq);
    for (int r = r0; r < r1; r++) {
        const uint8_t* wr = static_cast<const uint8_t*>(w) + size_t(r) * row_bytes;
        for (int i = 0; i < m; i += 4) fns[imin(4, m - i) - 1](y, n, x, xrow, wr, nb, r, i);
    }
}

// ---------------------------------------------------------------------------
// The _R8 types' rows kernels: run<Q, M> for M tokens of a group of 8 rows,
// reading activation blocks X of QB elements.
struct Q80R8 {
    using X = XBlock32;
    static constexpr int QB = 32;
    template <class Q, int M>
    static void run(float* y, int n, const char* xq, size_t xrow, const uint8_t* wg, int nb, int r, int i0);
};
struct Q4KR8 {
    using X = XBlock256;
    static constexpr int QB = 256;
    template <class Q, int M>
    static void run(float* y, int n, const char* xq, size_t xrow, const uint8_t* wg, int nb, int r, int i0);
};
struct Q6KR8 {
    using X = XBlock256;
    static constexpr int QB = 256;
    template <class Q, int M>
    static void run(float* y, int n, const char* xq, size_t xrow, const uint8_t* wg, int nb, int r, int i0);
};

// Q4_K_R8 (quant.h): 8 rows at once, their int32 lanes the rows. A vector
// of a group block's nibbles holds 4 elements of each row, dotted with the
// same 4 activations broadcast; each sub-block's sums then take their rows'
// scales in one int32 multiply, and the mins are one int16 dot product per
// two sub-blocks. No horizontal sums, no per-row scale decoding: about
// twice the throughput of the row-at-a-time Q4_K kernel.

inline __m256i bcast32(const int8_t* p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

template <class Q, int M>
void Q4KR8::run(float* y, int n, const char* xq, size_t xrow, const uint8_t* wg, int nb, int r, int i0) {
    const XBlock256* xr[M];
    for (int t = 0; t < M; t++) xr[t] = reinterpret_cast<const XBlock256*>(xq + size_t(i0 + t) * xrow);
    const __m256i m4 = _mm256_set1_epi8(15), m6 = _mm256_set1_epi8(0x3f), m2 = _mm256_set1_epi8(3);
    const __m256i lo16 = _mm256_set1_epi32(0xffff), even8 = _mm256_set1_epi32(0x00ff00ff);
    // vpshufb indices: byte u of each int32 lane, zero-extended.
    const __m256i pick0 = _mm256_setr_epi32(int(0x80808000u), int(0x80808004u), int(0x80808008u), int(0x8080800cu),
                                            int(0x80808000u), int(0x80808004u), int(0x80808008u), int(0x8080800cu));
    __m256 acc[M], accm[M];
    for (int t = 0; t < M; t++) acc[t] = accm[t] = _mm256_setzero_ps();
    for (int ib = 0; ib < nb; ib++) {
        const BlockQ4_Kx8* b = reinterpret_cast<const BlockQ4_Kx8*>(wg) + ib;
        const char* pf = reinterpret_cast<const char*>(b) + 2 * sizeof(BlockQ4_Kx8);
        for (int o = 0; o < int(sizeof(BlockQ4_Kx8)); o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
        // The 6-bit scales and mins of the 8 rows (k_scale_min64, lane-wise):
        // byte u of lane l of sclo / schi is row l's scale of sub-block u / 4 + u.
        __m256i a = load256(b->scales[0]), bb = load256(b->scales[1]), c = load256(b->scales[2]);
        __m256i sclo = _mm256_and_si256(a, m6), mnlo = _mm256_and_si256(bb, m6);
        __m256i schi = _mm256_or_si256(_mm256_and_si256(c, m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(a, 6), m2), 4));
        __m256i mnhi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bb, 6), m2), 4));
        // Mins as int16 pairs: sub-blocks (0, 2), (1, 3), (4, 6), (5, 7).
        const __m256i mn[4] = {_mm256_and_si256(mnlo, even8), _mm256_and_si256(_mm256_srli_epi16(mnlo, 8), even8),
                               _mm256_and_si256(mnhi, even8), _mm256_and_si256(_mm256_srli_epi16(mnhi, 8), even8)};
        __m256i sum[M];
        for (int t = 0; t < M; t++) sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int ch = 0; ch < 4; ch++) {
            // Sub-blocks 2 ch (low nibbles) and 2 ch + 1 (high nibbles).
            constexpr int C = M == 1 ? 2 : 1;  // independent sums per sub-block
            __m256i sl[M][C], sh[M][C];
            for (int t = 0; t < M; t++)
                for (int j = 0; j < C; j++) sl[t][j] = sh[t][j] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m256i v = load256(b->qs[8 * ch + k]);
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                for (int t = 0; t < M; t++) {
                    const int8_t* xq8 = xr[t][ib].q + 64 * ch + 4 * k;
                    sl[t][k % C] = Q::dot(sl[t][k % C], lo, bcast32(xq8));
                    sh[t][k % C] = Q::dot(sh[t][k % C], hi, bcast32(xq8 + 32));
                }
            }
            const __m256i scs = ch < 2 ? sclo : schi;
            const __m256i sc_l = _mm256_shuffle_epi8(scs, _mm256_add_epi32(pick0, _mm256_set1_epi32(2 * ch % 4)));
            const __m256i sc_h = _mm256_shuffle_epi8(scs, _mm256_add_epi32(pick0, _mm256_set1_epi32(2 * ch % 4 + 1)));
            for (int t = 0; t < M; t++) {
                __m256i l = sl[t][0], h = sh[t][0];
                if (C == 2) l = _mm256_add_epi32(l, sl[t][C - 1]), h = _mm256_add_epi32(h, sh[t][C - 1]);
                sum[t] = _mm256_add_epi32(sum[t], _mm256_mullo_epi32(l, sc_l));
                sum[t] = _mm256_add_epi32(sum[t], _mm256_mullo_epi32(h, sc_h));
            }
        }
        const __m256 d = fp16x8_at(b->d), dm = fp16x8_at(b->dmin);
        for (int t = 0; t < M; t++) {
            const XBlock256& xb = xr[t][ib];
            // x's sums of 32 (sub-blocks 0..7), paired as int16 like the mins.
            __m256i s32 = _mm256_madd_epi16(load256(xb.bsums), _mm256_set1_epi16(1));
            __m256i pairs =
                _mm256_or_si256(_mm256_and_si256(s32, lo16), _mm256_slli_epi32(_mm256_srli_si256(s32, 8), 16));
            __m256i mins =
                Q::dot16(_mm256_setzero_si256(), mn[0], _mm256_permutevar8x32_epi32(pairs, _mm256_set1_epi32(0)));
            mins = Q::dot16(mins, mn[1], _mm256_permutevar8x32_epi32(pairs, _mm256_set1_epi32(1)));
            mins = Q::dot16(mins, mn[2], _mm256_permutevar8x32_epi32(pairs, _mm256_set1_epi32(4)));
            mins = Q::dot16(mins, mn[3], _mm256_permutevar8x32_epi32(pairs, _mm256_set1_epi32(5)));
            const __m256 xd = _mm256_set1_ps(xb.d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(d, xd), acc[t]);
            accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dm, xd), accm[t]);
        }
    }
    for (int t = 0; t < M; t++) _mm256_storeu_ps(y + long(i0 + t) * n + r, _mm256_sub_ps(acc[t], accm[t]));
}

// Q6_K_R8: the same scheme. Per half of a block and word k, three words
// (ql of sub-blocks 4h, 4h+2 and 4h+1, 4h+3; qh of all four) give the 6-bit
// levels of four sub-blocks; each group of 16 takes its rows' int8 scales in
// one multiply, and the -32 offset is 8 int16 dot products of the scales
// with x's sums of 16 per block.
template <class Q, int M>
void Q6KR8::run(float* y, int n, const char* xq, size_t xrow, const uint8_t* wg, int nb, int r, int i0) {
    const XBlock256* xr[M];
    for (int t = 0; t < M; t++) xr[t] = reinterpret_cast<const XBlock256*>(xq + size_t(i0 + t) * xrow);
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    // vpshufb: byte j of each int32 lane to its top byte (then an arithmetic
    // shift sign-extends it); x's sums of 16 reordered to int16 pairs (g, g + 2).
    __m256i top[4];
    for (int j = 0; j < 4; j++)
        top[j] = _mm256_setr_epi32(int(0x808080u | uint32_t(j) << 24), int(0x808080u | uint32_t(4 + j) << 24),
                                   int(0x808080u | uint32_t(8 + j) << 24), int(0x808080u | uint32_t(12 + j) << 24),
                                   int(0x808080u | uint32_t(j) << 24), int(0x808080u | uint32_t(4 + j) << 24),
                                   int(0x808080u | uint32_t(8 + j) << 24), int(0x808080u | uint32_t(12 + j) << 24));
    const __m256i pairs = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15, 0, 1, 4, 5, 2, 3, 6, 7,
                                           8, 9, 12, 13, 10, 11, 14, 15);
    __m256 acc[M];
    for (int t = 0; t < M; t++) acc[t] = _mm256_setzero_ps();
    for (int ib = 0; ib < nb; ib++) {
        const BlockQ6_Kx8* b = reinterpret_cast<const BlockQ6_Kx8*>(wg) + ib;
        const char* pf = reinterpret_cast<const char*>(b) + 2 * sizeof(BlockQ6_Kx8);
        for (int o = 0; o < int(sizeof(BlockQ6_Kx8)); o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
        __m256i sw[4];
        for (int w = 0; w < 4; w++) sw[w] = load256(b->scales[w]);
        __m256i sum[M];
        for (int t = 0; t < M; t++) sum[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            // Sums of sub-block 4h + p, its first (k < 4) and second 16.
            __m256i s[M][4][2];
            for (int t = 0; t < M; t++)
                for (int p = 0; p < 4; p++) s[t][p][0] = s[t][p][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i w0 = load256(b->q[8 * h + k][0]), w1 = load256(b->q[8 * h + k][1]);
                const __m256i q = load256(b->q[8 * h + k][2]);
                const __m256i lv[4] = {
                    _mm256_or_si256(_mm256_and_si256(w0, m4), _mm256_and_si256(_mm256_slli_epi16(q, 4), m30)),
                    _mm256_or_si256(_mm256_and_si256(w1, m4), _mm256_and_si256(_mm256_slli_epi16(q, 2), m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w0, 4), m4), _mm256_and_si256(q, m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w1, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(q, 2), m30))};
                for (int t = 0; t < M; t++) {
                    const int8_t* x = xr[t][ib].q + 128 * h + 4 * k;
                    for (int p = 0; p < 4; p++) s[t][p][k / 4] = Q::dot(s[t][p][k / 4], lv[p], bcast32(x + 32 * p));
                }
            }
            for (int p = 0; p < 4; p++)
                for (int half = 0; half < 2; half++) {
                    const int g = 8 * h + 2 * p + half;
                    const __m256i sc = _mm256_srai_epi32(_mm256_shuffle_epi8(sw[g / 4], top[g % 4]), 24);
                    for (int t = 0; t < M; t++)
                        sum[t] = _mm256_add_epi32(sum[t], _mm256_mullo_epi32(s[t][p][half], sc));
                }
        }
        // The scales as int16 pairs: (4w, 4w + 2) and (4w + 1, 4w + 3).
        __m256i sa[4], sb[4];
        for (int w = 0; w < 4; w++) {
            sa[w] = _mm256_srai_epi16(_mm256_slli_epi16(sw[w], 8), 8);
            sb[w] = _mm256_srai_epi16(sw[w], 8);
        }
        const __m256 d = fp16x8_at(b->d);
        for (int t = 0; t < M; t++) {
            const XBlock256& xb = xr[t][ib];
            const __m256i bs = _mm256_shuffle_epi8(load256(xb.bsums), pairs);
            __m256i off = _mm256_setzero_si256();
            for (int w = 0; w < 4; w++) {
                off = Q::dot16(off, sa[w], _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(2 * w)));
                off = Q::dot16(off, sb[w], _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(2 * w + 1)));
            }
            const __m256i tot = _mm256_sub_epi32(sum[t], _mm256_slli_epi32(off, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(d, _mm256_set1_ps(xb.d)), acc[t]);
        }
    }
    for (int t = 0; t < M; t++) _mm256_storeu_ps(y + long(i0 + t) * n + r, acc[t]);
}

// Q8_0_R8: per block, 8 vectors of 4 levels of each row dotted with 4
// activations broadcast (one vpdpbusd each with VNNI: the levels are
// stored unsigned, w + 128, and 128 * d * sum(x) per block comes off at
// the end); the 8 rows' d in one conversion.
template <class Q, int M>
void Q80R8::run(float* y, int n, const char* xq, size_t xrow, const uint8_t* wg, int nb, int r, int i0) {
    const XBlock32* xr[M];
    for (int t = 0; t < M; t++) xr[t] = reinterpret_cast<const XBlock32*>(xq + size_t(i0 + t) * xrow);
    __m256 acc[M], bias[M];
    for (int t = 0; t < M; t++) acc[t] = bias[t] = _mm256_setzero_ps();
    for (int ib = 0; ib < nb; ib++) {
        const BlockQ8_0x8* b = reinterpret_cast<const BlockQ8_0x8*>(wg) + ib;
        const char* pf = reinterpret_cast<const char*>(b) + 4 * sizeof(BlockQ8_0x8);
        for (int o = 0; o < int(sizeof(BlockQ8_0x8)); o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
        __m256i s[M][2];
        for (int t = 0; t < M; t++) s[t][0] = s[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i v = load256(b->qs[k]);
            for (int t = 0; t < M; t++) s[t][k % 2] = Q::dot_biased(s[t][k % 2], v, bcast32(xr[t][ib].q + 4 * k));
        }
        const __m256 d = fp16x8_at(b->d);
        for (int t = 0; t < M; t++) {
            const XBlock32& xb = xr[t][ib];
            const __m256 sum = _mm256_cvtepi32_ps(_mm256_add_epi32(s[t][0], s[t][1]));
            acc[t] = _mm256_fmadd_ps(sum, _mm256_mul_ps(d, _mm256_set1_ps(xb.d)), acc[t]);
            if (Q::BIAS) bias[t] = _mm256_fmadd_ps(d, _mm256_set1_ps(xb.ds), bias[t]);
        }
    }
    for (int t = 0; t < M; t++) {
        __m256 out = acc[t];
        if (Q::BIAS) out = _mm256_fnmadd_ps(_mm256_set1_ps(float(Q::BIAS)), bias[t], out);
        _mm256_storeu_ps(y + long(i0 + t) * n + r, out);
    }
}

// All m tokens of rows [r0, r1) (whole groups of 8) of an _R8 type.
template <class Q, class K>
void qr8_range(float* y, const void* xq, const void* w, size_t row_bytes, int m, int n, int k, int r0, int r1) {
    assert(r0 % 8 == 0 && r1 % 8 == 0);
    int nb = k / K::QB;
    size_t xrow = size_t(nb) * sizeof(typename K::X);
    const QRowsFn fns[4] = {K::template run<Q, 1>, K::template run<Q, 2>, K::template run<Q, 3>, K::template run<Q, 4>};
    const char* x = static_cast<const char*>(xq);
    for (int r = r0; r < r1; r += 8) {
        const uint8_t* wg = static_cast<const uint8_t*>(w) + size_t(r) * row_bytes;
        for (int i = 0; i < m; i += 4) fns[imin(4, m - i) - 1](y, n, x, xrow, wg, nb, r, i);
    }
}
// ---------------------------------------------------------------------------
// Dequantization into bf16 rows (the packed path's input): each block into
// fp32 first, then rounded to bf16 eight at a time.

template <class T>
void dequant_block_k(const uint8_t* b, float* y) {
    KHead h = T::template head<DotMadd>(b);
    alignas(32) uint8_t lv[32];
    for (int u = 0; u < 8; u++) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(lv), T::levels(b, u));
        for (int half = 0; half < 2; half++) {
            int g = 2 * u + half;
            __m256 a = _mm256_set1_ps(h.d * float(T::scale_of(h, g)));
            __m256 c = _mm256_set1_ps(-h.dm * float(T::coef_of(h, g)));
            for (int i = 0; i < 2; i++) {
                const uint8_t* p = lv + 16 * half + 8 * i;
                __m256 l =
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
                _mm256_storeu_ps(y + 32 * u + 16 * half + 8 * i, _mm256_fmadd_ps(a, l, c));
            }
        }
    }
}

inline void store_bf16x8(bf16* p, __m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm_packus_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)));
}

// Word rows of a group block (word k of lanes 0..7 at w + k stride, k < 8)
// -> each lane's 8 words (32 bytes) at out[l] + at: an 8 x 8 transpose of words.
template <int B>
inline void lanes_from_words8(const uint8_t* w, int stride, uint8_t (*out)[B], int at) {
    __m256i v[8], t[8];
    for (int k = 0; k < 8; k++) v[k] = load256(w + k * stride);
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_epi32(v[k], v[k + 1]);
        t[k + 1] = _mm256_unpackhi_epi32(v[k], v[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        v[k] = _mm256_unpacklo_epi64(t[k], t[k + 2]);
        v[k + 1] = _mm256_unpackhi_epi64(t[k], t[k + 2]);
        v[k + 2] = _mm256_unpacklo_epi64(t[k + 1], t[k + 3]);
        v[k + 3] = _mm256_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    // v[j] (j < 4): lanes j (low half) and j + 4 (high) of words 0-3; v[4 + j]: of words 4-7.
    for (int j = 0; j < 4; j++) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[j] + at), _mm256_permute2x128_si256(v[j], v[4 + j], 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[j + 4] + at),
                            _mm256_permute2x128_si256(v[j], v[4 + j], 0x31));
    }
}

// The 8 plain blocks of a group block (r8_take of each lane), heads lane by
// lane and the level bytes by lanes_from_words8.
inline void take8(const BlockQ4_Kx8* gb, uint8_t (*out)[sizeof(BlockQ4_K)]) {
    for (int l = 0; l < 8; l++) {
        memcpy(out[l], &gb->d[l], 2);
        memcpy(out[l] + 2, &gb->dmin[l], 2);
        for (int w = 0; w < 3; w++) memcpy(out[l] + 4 + 4 * w, &gb->scales[w][l], 4);
    }
    for (int ch = 0; ch < 4; ch++) lanes_from_words8(gb->qs[8 * ch], 32, out, 16 + 32 * ch);
}
inline void take8(const BlockQ6_Kx8* gb, uint8_t (*out)[sizeof(BlockQ6_K)]) {
    for (int l = 0; l < 8; l++) {
        memcpy(out[l] + 208, &gb->d[l], 2);
        for (int w = 0; w < 4; w++) memcpy(out[l] + 192 + 4 * w, &gb->scales[w][l], 4);
    }
    // Word rows q[8h + k][part] for k = 0..7: lane l's ql bytes 64h + 32 part .. (part 0, 1), qh bytes 32h .. (2).
    for (int h = 0; h < 2; h++)
        for (int part = 0; part < 3; part++)
            lanes_from_words8(gb->q[8 * h][part], 3 * 32, out, part < 2 ? 64 * h + 32 * part : 128 + 32 * h);
}

inline void take8(const BlockQ8_0x8* gb, uint8_t (*out)[sizeof(BlockQ8_0)]) {
    for (int l = 0; l < 8; l++) memcpy(out[l], &gb->d[l], 2);
    alignas(32) uint8_t lanes[8][32];
    lanes_from_words8(gb->qs[0], 32, lanes, 0);
    for (int l = 0; l < 8; l++)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[l] + 2),
                            _mm256_xor_si256(load256(lanes[l]), _mm256_set1_epi8(char(0x80))));
}

// An _R8 type (X8: its group block, T: its plain format, QB elements per
// block, Block its decoder): a group block's 8 blocks taken out at once,
// then decoded as the plain type.
template <class X8, class T, int QB, void (*Block)(const uint8_t*, float*)>
void dequant_r8_bf16(bf16* dst, const void* w, size_t row_bytes, int k, int r0, int r1) {
    alignas(32) float f[QB];
    alignas(32) uint8_t blk[8][T::BYTES];
    for (int g = r0 / 8; g * 8 < r1; g++) {
        const auto* group = reinterpret_cast<const X8*>(static_cast<const uint8_t*>(w) + size_t(g) * 8 * row_bytes);
        const int l0 = r0 > 8 * g ? r0 - 8 * g : 0, l1 = imin(r1 - 8 * g, 8);
        for (int ib = 0; ib < k / QB; ib++) {
            take8(group + ib, blk);
            for (int l = l0; l < l1; l++) {
                Block(blk[l], f);
                bf16* d = dst + long(8 * g + l - r0) * k + ib * QB;
                for (int i = 0; i < QB; i += 8) store_bf16x8(d + i, _mm256_load_ps(f + i));
            }
        }
    }
}

template <class T, int QB, void (*Block)(const uint8_t*, float*)>
void dequant_rows_bf16(bf16* dst, const void* w, size_t row_bytes, int k, int r0, int r1) {
    alignas(32) float f[256];
    for (int r = r0; r < r1; r++) {
        const uint8_t* wr = static_cast<const uint8_t*>(w) + size_t(r) * row_bytes;
        bf16* d = dst + long(r - r0) * k;
        for (int ib = 0; ib < k / QB; ib++) {
            Block(wr + size_t(ib) * T::BYTES, f);
            for (int i = 0; i < QB; i += 8) store_bf16x8(d + ib * QB + i, _mm256_load_ps(f + i));
        }
    }
}

// ---------------------------------------------------------------------------
// Activation rows, vectorised: bit for bit quantize_x_row (the same amax,
// the same d and 1 / d, products rounded to nearest even by cvtps).

// 32 floats -> 32 int8 at q (|values| <= 127); returns their sum.
inline int quantize32(const float* x, __m256 id, int8_t* q) {
    __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
    __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
    __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
    __m256i e = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
    int s = hsum8i(_mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, e)));
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, e));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p);
    return s;
}

inline float absmax(const float* x, int n) {
    __m256 m = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void quantize_x_vec(DType wtype, const float* x, void* dst, int k) {
    wtype = dtype_plain(wtype);
    if (wtype == DType::Q4_K || wtype == DType::Q5_K || wtype == DType::Q6_K) {
        XBlock256* b = static_cast<XBlock256*>(dst);
        for (int i = 0; i < k / 256; i++) {
            const float* xb = x + 256 * i;
            float d = absmax(xb, 256) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            b[i].d = d;
            for (int j = 0; j < 8; j++) quantize32(xb + 32 * j, _mm256_set1_ps(id), b[i].q + 32 * j);
            // Sums of 16: widened to int16, then pairs of neighbours added.
            for (int j = 0; j < 8; j++) {
                __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].q + 32 * j)));
                __m256i w2 =
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].q + 32 * j + 16)));
                b[i].bsums[2 * j] = int16_t(hsum8i(_mm256_madd_epi16(w, _mm256_set1_epi16(1))));
                b[i].bsums[2 * j + 1] = int16_t(hsum8i(_mm256_madd_epi16(w2, _mm256_set1_epi16(1))));
            }
        }
    } else {
        XBlock32* b = static_cast<XBlock32*>(dst);
        for (int i = 0; i < k / 32; i++) {
            float d = absmax(x + 32 * i, 32) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            b[i].d = d;
            b[i].ds = d * float(quantize32(x + 32 * i, _mm256_set1_ps(id), b[i].q));
        }
    }
}

template <class Q>
void quant_rows(DType wtype, float* y, const void* xq, const void* w, size_t row_bytes, int m, int n, int k, int r0,
                int r1) {
    assert(m > 0 && r0 >= 0 && r1 <= n);
    switch (wtype) {
    case DType::Q8_0:
        return qrows_range<Q, FmtQ8_0, false>(y, xq, w, row_bytes, m, n, k, r0, r1);
    case DType::Q4_0:
        return qrows_range<Q, FmtQ4_0, false>(y, xq, w, row_bytes, m, n, k, r0, r1);
    case DType::MXFP4:
        return qrows_range<Q, FmtMXFP4, false>(y, xq, w, row_bytes, m, n, k, r0, r1);
    case DType::Q4_K:
        return qrows_range<Q, FmtK45<false>, true>(y, xq, w, row_bytes, m, n, k, r0, r1);
    case DType::Q5_K:
        return qrows_range<Q, FmtK45<true>, true>(y, xq, w, row_bytes, m, n, k, r0, r1);
    case DType::Q6_K:
        return qrows_range<Q, FmtQ6_K, true>(y, xq, w, row_bytes, m, n, k, r0, r1);
    case DType::Q4_K_R8:
        return qr8_range<Q, Q4KR8>(y, xq, w, row_bytes, m, n, k, r0, r1);
    case DType::Q6_K_R8:
        return qr8_range<Q, Q6KR8>(y, xq, w, row_bytes, m, n, k, r0, r1);
    case DType::Q8_0_R8:
        return qr8_range<Q, Q80R8>(y, xq, w, row_bytes, m, n, k, r0, r1);
    default:
        std::abort();
    }
}

void dequant_bf16_vec(DType wtype, bf16* dst, const void* w, size_t row_bytes, int k, int r0, int r1) {
    switch (wtype) {
    case DType::Q8_0:
        return dequant_rows_bf16<FmtQ8_0, 32, FmtQ8_0::dequant>(dst, w, row_bytes, k, r0, r1);
    case DType::Q4_0:
        return dequant_rows_bf16<FmtQ4_0, 32, FmtQ4_0::dequant>(dst, w, row_bytes, k, r0, r1);
    case DType::MXFP4:
        return dequant_rows_bf16<FmtMXFP4, 32, FmtMXFP4::dequant>(dst, w, row_bytes, k, r0, r1);
    case DType::Q4_K:
        return dequant_rows_bf16<FmtK45<false>, 256, dequant_block_k<FmtK45<false>>>(dst, w, row_bytes, k, r0, r1);
    case DType::Q5_K:
        return dequant_rows_bf16<FmtK45<true>, 256, dequant_block_k<FmtK45<true>>>(dst, w, row_bytes, k, r0, r1);
    case DType::Q6_K:
        return dequant_rows_bf16<FmtQ6_K, 256, dequant_block_k<FmtQ6_K>>(dst, w, row_bytes, k, r0, r1);
    case DType::Q4_K_R8:
        return dequant_r8_bf16<BlockQ4_Kx8, FmtK45<false>, 256, dequant_block_k<FmtK45<false>>>(dst, w, row_bytes, k,
                                                                                                r0, r1);
    case DType::Q6_K_R8:
        return dequant_r8_bf16<BlockQ6_Kx8, FmtQ6_K, 256, dequant_block_k<FmtQ6_K>>(dst, w, row_bytes, k, r0, r1);
    case DType::Q8_0_R8:
        return dequant_r8_bf16<BlockQ8_0x8, FmtQ8_0, 32, FmtQ8_0::dequant>(dst, w, row_bytes, k, r0, r1);
    default:
        std::abort();
    }
}

// quant_packed_min_m: m from which the packed path (dequantized to bf16)
// takes over from the int8 rows path.
template <class Q>
void fill_quant(KernelTable& t, int quant_packed_min_m) {
    t.quantize_x = quantize_x_vec;
    t.quant_rows = quant_rows<Q>;
    t.dequant_bf16 = dequant_bf16_vec;
    t.quant_packed_min_m = quant_packed_min_m;
}

}  // namespace
