// bf16 <-> fp32 conversion, scalar. bf16 is the top half of an IEEE fp32, so
// widening is a shift; narrowing rounds to nearest even (NaN stays NaN).
// Marked __host__ __device__ when compiled by nvcc so GPU kernels share it.
// static: each translation unit keeps its own copy, so a copy compiled with
// AVX-512 flags can never be picked by the linker for code that runs anywhere.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MOE_HD __host__ __device__
#else
#define MOE_HD
#endif

using bf16 = uint16_t;

MOE_HD static inline float bf16_to_f32(bf16 h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

MOE_HD static inline bf16 f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16(u >> 16);
}
