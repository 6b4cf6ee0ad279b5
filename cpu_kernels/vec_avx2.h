// 256-bit vector traits (AVX2 + FMA) for the templates in kernels_impl.h.
// Included only by ISA translation units compiled with AVX2 flags. Everything
// sits in an anonymous namespace: an inline function compiled with wider ISA
// flags must never be merged by the linker into code that runs on every CPU.
#pragma once
#include "cpu_kernels/bf16.h"
#include "cpu_kernels/simd.h"

namespace {

struct VecAvx2 {
    using F = __m256;
    static constexpr int W = 8;  // fp32 lanes

    static F zero() { return _mm256_setzero_ps(); }
    static F set1(float a) { return _mm256_set1_ps(a); }
    static F load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
    static F bcast(const float* p) { return _mm256_broadcast_ss(p); }
    static F add(F a, F b) { return _mm256_add_ps(a, b); }
    static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F div(F a, F b) { return _mm256_div_ps(a, b); }
    static F max(F a, F b) { return _mm256_max_ps(a, b); }
    static F min(F a, F b) { return _mm256_min_ps(a, b); }
    static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c
    static F round(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    // 2^n for integral n in [-127, 127] (n = -127 gives 0): adding 1.5 * 2^23
    // leaves n + 127 in the low mantissa bits, which shift into the exponent.
    static F pow2i(F n) {
        __m256i b = _mm256_castps_si256(_mm256_add_ps(n, _mm256_set1_ps(12582912.0f + 127.0f)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(b, 23));
    }
    static float hsum(F v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    static float hmax(F v) {
        __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        s = _mm_max_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    // 2W bf16 -> the even-indexed and the odd-indexed elements as fp32: one
    // load, one shift, one and (a bf16 is the top half of an fp32).
    static void load_bf16_pairs(const bf16* p, F& even, F& odd) {
        __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
    }
    // W fp32 -> W bf16, round to nearest even (inputs are finite activations).
    static void store_bf16(bf16* p, F v) {
        __m256i u = _mm256_castps_si256(v);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
        u = _mm256_srli_epi32(u, 16);
        __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
    }
};

}  // namespace
