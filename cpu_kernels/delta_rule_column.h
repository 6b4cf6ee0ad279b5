// One state column of one token of the gated delta rule (see kernels.h,
// gated_delta_rule): S (dk, dv) row-major, the column j at s = &S[0][j]
// (rows dv apart); the decay factor exp(g) given. Shared by the scalar
// table and the vector tables' leftover columns; internal linkage, so a copy
// compiled with AVX flags is never used by the scalar path.
#pragma once

namespace {

inline float delta_rule_column(float* s, long dv, const float* q, const float* k, float v, float decay, float beta,
                               int dk) {
    float acc = 0.0f;
    for (int i = 0; i < dk; i++) {
        float& r = s[i * dv];
        r *= decay;
        acc += r * k[i];
    }
    const float u = beta * (v - acc);
    acc = 0.0f;
    for (int i = 0; i < dk; i++) {
        float& r = s[i * dv];
        r += k[i] * u;
        acc += r * q[i];
    }
    return acc;
}

}  // namespace
