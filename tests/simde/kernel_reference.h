// Shared by the kernel tests: random bf16 weights and the double-precision
// matmul reference every ISA path is compared against.
#pragma once
#include <random>
#include <vector>

#include "cpu_kernels/bf16.h"

inline std::vector<bf16> rand_bf16(std::mt19937& rng, size_t n, float scale = 1.0f) {
    std::vector<bf16> v(n);
    for (auto& x : v) x = f32_to_bf16(std::uniform_real_distribution<float>(-scale, scale)(rng));
    return v;
}

// y (m, n) = x (m, k) @ W (n, k)^T in double.
inline std::vector<double> matmul_ref(const float* x, const bf16* w, int m, int n, int k) {
    std::vector<double> y(size_t(m) * n);
    for (int i = 0; i < m; i++)
        for (int r = 0; r < n; r++) {
            double s = 0;
            for (int j = 0; j < k; j++) s += double(bf16_to_f32(w[size_t(r) * k + j])) * x[size_t(i) * k + j];
            y[size_t(i) * n + r] = s;
        }
    return y;
}
