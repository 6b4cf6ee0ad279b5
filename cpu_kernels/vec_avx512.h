// 512-bit vector traits (AVX-512 F/BW/VL/DQ) for the templates in
// kernels_impl.h. Included only by ISA translation units compiled with AVX-512
// flags (or against SIMDe in the test build). Everything sits in an anonymous
// namespace: an inline function compiled with wider ISA flags must never be
// merged by the linker into code that runs on every CPU.
#pragma once
#include "cpu_kernels/bf16.h"
#include "cpu_kernels/simd.h"

namespace {

struct VecAvx512 {
    using F = __m512;
    static constexpr int W = 16;  // fp32 lanes

    static F zero() { return _mm512_setzero_ps(); }
    static F set1(float a) { return _mm512_set1_ps(a); }
    static F load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
    static F bcast(const float* p) { return _mm512_set1_ps(*p); }
    static F add(F a, F b) { return _mm512_add_ps(a, b); }
    static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F div(F a, F b) { return _mm512_div_ps(a, b); }
    static F max(F a, F b) { return _mm512_max_ps(a, b); }
    static F min(F a, F b) { return _mm512_min_ps(a, b); }
    static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
    static F round(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    // 2^n for integral n in [-127, 127] (n = -127 gives 0): adding 1.5 * 2^23
    // leaves n + 127 in the low mantissa bits, which shift into the exponent.
    static F pow2i(F n) {
        __m512i b = _mm512_castps_si512(_mm512_add_ps(n, _mm512_set1_ps(12582912.0f + 127.0f)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(b, 23));
    }
    static float hsum(F v) {
        __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    static float hmax(F v) {
        __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        s = _mm_max_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    // 2W bf16 -> the even-indexed and the odd-indexed elements as fp32.
    static void load_bf16_pairs(const bf16* p, F& even, F& odd) {
        __m512i v = _mm512_loadu_si512(p);
        even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))));
    }
    // W fp32 -> W bf16, round to nearest even (inputs are finite activations).
    // Narrowed in 128-bit halves: SIMDe has no _mm512_cvtepi32_epi16.
    static void store_bf16(bf16* p, F v) {
        __m512i u = _mm512_castps_si512(v);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        u = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
        __m256i lo = _mm512_castsi512_si256(u), hi = _mm512_extracti64x4_epi64(u, 1);
        __m128i* q = reinterpret_cast<__m128i*>(p);
        _mm_storeu_si128(q, _mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)));
        _mm_storeu_si128(q + 1, _mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1)));
    }
};

}  // namespace
