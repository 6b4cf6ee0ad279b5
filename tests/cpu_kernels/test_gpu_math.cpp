// The per-element math of the CUDA kernels (gpu_kernels/gpu_math.h), run on
// the CPU against cpu_kernels and plain references: the same functions the
// kernels apply on the device, so a wrong formula fails here without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "cpu_kernels/kernels.h"
#include "gpu_kernels/gpu_math.h"

namespace {

std::vector<float> random_floats(size_t n, float scale, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

}  // namespace

TEST_CASE("gpu math: routing of a row equals softmax, top_k and renormalisation", "[unit][gpu_math]") {
    for (int n : {8, 60, 128})
        for (int k : {1, 2, 4, 8}) {
            for (unsigned seed = 0; seed < 20; seed++) {
                std::vector<float> logits = random_floats(size_t(n), 2.0f, seed);
                if (seed == 0) logits[3] = logits[5] = 9.0f;  // a tie: the lower index first
                std::vector<float> p = logits;
                softmax(p.data(), n);
                std::vector<int> want(k);
                top_k(want.data(), p.data(), n, k);
                float sum = 0;
                for (int j = 0; j < k; j++) sum += p[want[j]];
                for (bool renorm : {true, false}) {
                    int experts[GM_MAX_TOP_K];
                    float weights[GM_MAX_TOP_K];
                    gm_route_row(experts, weights, logits.data(), n, k, renorm);
                    for (int j = 0; j < k; j++) {
                        INFO("n " << n << ", k " << k << ", seed " << seed << ", choice " << j);
                        REQUIRE(experts[j] == want[j]);
                        REQUIRE(weights[j] == Approx(renorm ? p[want[j]] / sum : p[want[j]]).epsilon(1e-5));
                    }
                    if (seed == 0 && k >= 2) {
                        REQUIRE(experts[0] == 3);
                        REQUIRE(experts[1] == 5);
                    }
                }
            }
        }
}

TEST_CASE("gpu math: RoPE pairs, RMSNorm scale and SiLU-mul equal cpu_kernels", "[unit][gpu_math]") {
    for (int head_dim : {8, 72, 128})
        for (int pos : {0, 1, 77, 4095, 100000}) {
            std::vector<float> x = random_floats(size_t(head_dim) * 2, 1.0f, unsigned(pos + head_dim));
            std::vector<float> want = x;
            rope_rotate_half(want.data(), 2, head_dim, pos, 1e6f);
            const int half = head_dim / 2;
            for (int h = 0; h < 2; h++)
                for (int i = 0; i < half; i++) gm_rope_pair(&x[size_t(h * head_dim + i)], &x[size_t(h * head_dim + i + half)], i, head_dim, pos, 1e6f);
            for (size_t i = 0; i < x.size(); i++) REQUIRE(x[i] == Approx(want[i]).margin(1e-5));
        }
    std::vector<float> x = random_floats(1000, 3.0f, 1), w = random_floats(1000, 1.0f, 2), want(1000);
    rmsnorm(want.data(), x.data(), w.data(), 1000, 1e-5f);
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const float scale = gm_rms_scale(float(ss), 1000, 1e-5f);
    for (int i = 0; i < 1000; i++) REQUIRE(x[i] * scale * w[i] == Approx(want[i]).epsilon(1e-5).margin(1e-6));

    std::vector<float> a = random_floats(1000, 4.0f, 3), b = random_floats(1000, 1.0f, 4), s = a;
    silu_mul(s.data(), b.data(), 1000);
    for (int i = 0; i < 1000; i++) REQUIRE(gm_silu_mul(a[i], b[i]) == Approx(s[i]).epsilon(1e-5).margin(1e-6));
}

TEST_CASE("gpu math: online softmax, split and merged, equals the softmax-weighted sum", "[unit][gpu_math]") {
    const int n = 300;
    std::vector<float> scores = random_floats(n, 5.0f, 9), values = random_floats(n, 1.0f, 10);
    double mx = -1e30, sum = 0, ref = 0;
    for (float s : scores) mx = std::max(mx, double(s));
    for (int i = 0; i < n; i++) {
        sum += std::exp(scores[i] - mx);
        ref += std::exp(scores[i] - mx) * values[i];
    }
    ref /= sum;
    // Three streams over interleaved positions, as the kernel's warps take them.
    float m[3] = {-INFINITY, -INFINITY, -INFINITY}, l[3] = {0, 0, 0}, acc[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        int w = i % 3;
        float rescale, p;
        gm_online_softmax_step(scores[i], &m[w], &l[w], &rescale, &p);
        acc[w] = acc[w] * rescale + p * values[i];
    }
    float empty_m = -INFINITY, empty_l = 0, s1, s2;  // a stream that saw nothing merges as nothing
    for (int w = 1; w < 3; w++) {
        gm_online_softmax_merge(&m[0], &l[0], m[w], l[w], &s1, &s2);
        acc[0] = acc[0] * s1 + acc[w] * s2;
    }
    gm_online_softmax_merge(&m[0], &l[0], empty_m, empty_l, &s1, &s2);
    acc[0] = acc[0] * s1;
    REQUIRE(acc[0] / l[0] == Approx(ref).epsilon(1e-5));
}

TEST_CASE("gpu math: the shared expert's sigmoid gate", "[unit][gpu_math]") {
    for (float x : {-30.0f, -4.0f, -0.5f, 0.0f, 0.25f, 3.0f, 30.0f}) {
        INFO(x);
        const double want = 1.0 / (1.0 + std::exp(-double(x)));
        CHECK(std::abs(double(gm_sigmoid(x)) - want) <= 1e-6 * want + 1e-12);
    }
    CHECK(gm_sigmoid(0.0f) == 0.5f);
}
