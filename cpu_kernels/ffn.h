// What an FFN (a routed expert, the shared expert, a dense MLP) computes
// beyond its three matrices: the gate's activation and optional biases.
// Plain structs and one __host__ __device__ function (MOE_HD): the CUDA
// kernels apply the same ffn_clamped_swiglu.
#pragma once
#include <cmath>
#include <cstdint>

#include "cpu_kernels/bf16.h"  // MOE_HD

// The gate's activation: SwiGLU, silu(g) * u (Mixtral, Qwen, OLMoE), or
// gpt-oss's clamped form (ffn_clamped_swiglu).
struct FfnActivation {
    enum class Kind : uint8_t { SILU, CLAMPED_SWIGLU };
    Kind kind = Kind::SILU;
    float alpha = 1.702f;  // CLAMPED_SWIGLU: the sigmoid's slope
    float limit = 7.0f;    // CLAMPED_SWIGLU: swiglu_limit
};

// An FFN's activation and biases: b1, b3 (hidden,) added to the gate and up
// projections before the activation, b2 (dim,) to the output; null: none.
struct FfnSpec {
    FfnActivation act;
    const float* b1 = nullptr;
    const float* b3 = nullptr;
    const float* b2 = nullptr;
};

// gpt-oss's gate (Hugging Face's GptOssExperts): g clamped above at limit,
// u to [-limit, limit], then g * sigmoid(alpha * g) * (u + 1).
MOE_HD inline float ffn_clamped_swiglu(float g, float u, float alpha, float limit) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}
