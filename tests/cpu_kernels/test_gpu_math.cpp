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
            const int half = head_dim / 2;
            std::vector<double> freq(static_cast<size_t>(half));
            for (int i = 0; i < half; i++) freq[size_t(i)] = std::pow(1e6, -2.0 * i / head_dim) / (i % 3 + 1);
            for (float mscale : {1.0f, 1.3466f}) {
                std::vector<float> got = x, want = x;
                rope_rotate_half(want.data(), 2, head_dim, pos, freq.data(), mscale);
                for (int h = 0; h < 2; h++)
                    for (int i = 0; i < half; i++)
                        gm_rope_pair(&got[size_t(h * head_dim + i)], &got[size_t(h * head_dim + i + half)], pos,
                                     freq[size_t(i)], mscale);
                for (size_t i = 0; i < x.size(); i++) REQUIRE(got[i] == Approx(want[i]).margin(1e-5));
            }
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

TEST_CASE("gpu math: the delta rule column by column equals cpu_kernels' scalar step", "[unit][gpu_math]") {
    // The CUDA kernel runs one state column a thread: column by column, the
    // same sums in the same order as the scalar table's delta_rule_step, so
    // bit for bit on the CPU; over three tokens with a state that is not zero.
    for (auto [dk, dv] : {std::pair{16, 24}, std::pair{128, 128}}) {
        INFO("dk " << dk << " dv " << dv);
        std::vector<float> q = random_floats(size_t(3) * dk, 0.1f, 11), k = random_floats(size_t(3) * dk, 0.1f, 12),
                           v = random_floats(size_t(3) * dv, 1.0f, 13), s0 = random_floats(size_t(dk) * dv, 0.3f, 14);
        std::vector<float> want_s = s0, got_s = s0, want_o(static_cast<size_t>(dv)), got_o(static_cast<size_t>(dv));
        const float g[3] = {-0.3f, -0.01f, -2.0f}, beta[3] = {0.2f, 0.9f, 0.5f};
        for (int t = 0; t < 3; t++) {
            kernel_table_scalar().delta_rule_step(want_s.data(), want_o.data(), &q[size_t(t) * dk], &k[size_t(t) * dk],
                                                  &v[size_t(t) * dv], g[t], beta[t], dk, dv);
            for (int j = 0; j < dv; j++)
                got_o[size_t(j)] = gm_delta_rule_column(got_s.data() + j, dv, &q[size_t(t) * dk], &k[size_t(t) * dk],
                                                        v[size_t(t) * dv + j], g[t], beta[t], dk);
            CHECK(got_o == want_o);
        }
        CHECK(got_s == want_s);
    }
}

TEST_CASE("gpu math: the gated RMSNorm element by element equals the whole-head form", "[unit][gpu_math]") {
    const int n = 40;
    std::vector<float> o = random_floats(n, 2.0f, 21), z = random_floats(n, 1.5f, 22), w = random_floats(n, 1.0f, 23);
    std::vector<float> whole = o;
    gm_rmsnorm_gated(whole.data(), z.data(), w.data(), n, 1e-6f);
    double ss = 0;
    for (float x : o) ss += double(x) * x;
    const double r = 1.0 / std::sqrt(ss / n + 1e-6);
    float sum_sq = 0.0f;
    for (float x : o) sum_sq += x * x;
    for (int i = 0; i < n; i++) {
        const double want = o[i] * r * w[i] * (z[i] / (1.0 + std::exp(-double(z[i]))));
        CHECK(std::abs(whole[i] - want) <= 1e-5 * (std::abs(want) + 1e-3));
        CHECK(gm_gated_norm_element(o[i], z[i], w[i], gm_rms_scale(sum_sq, n, 1e-6f)) ==
              Approx(whole[i]).epsilon(1e-6));
    }
}
