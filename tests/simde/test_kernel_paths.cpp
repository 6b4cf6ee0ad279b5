// The public entry points of cpu_kernels/kernels.h: thread splitting, the
// rows / packed choice, the fused expert, attention (decode, paged and
// blockwise prefill), softmax, RoPE and top-k, against straightforward
// references.
// Table-taking overloads run every table (SIMDe ones included); the
// active-table functions run under every native path via isa_select.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cpu_kernels/kernels.h"
#include "simde/kernel_reference.h"
#include "simde/simde_tables.h"

namespace {

std::vector<float> rand_f32(std::mt19937& rng, size_t n, float scale = 1.0f) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

double tol_for(const KernelTable& t, int k) {
    return (t.isa == Isa::AVX512BF16 ? 4e-3 : 2e-5) * std::sqrt(double(k)) + 1e-6;
}

// Runs the body once under each native path the CPU supports, then restores.
template <class F>
void for_each_native_isa(F body) {
    Isa saved = isa_active();
    for (Isa isa : {Isa::SCALAR, Isa::AVX2, Isa::AVX512, Isa::AVX512BF16}) {
        if (!isa_select(isa)) continue;
        INFO("isa " << isa_name(isa));
        body(isa);
    }
    isa_select(saved);
}

// Naive attention of one query vector set at position n_pos - 1: positions
// [0, n_pos), or the last `window` of them; sinks (n_heads,) or null: one
// more logit each in the softmax, with no value. Written from the
// definitions (Hugging Face's gpt-oss: the sink concatenated to the scores
// before the softmax, its probability dropped after).
std::vector<double> attention_ref(const float* q, const float* k, const float* v, int n_pos, int n_heads,
                                  int n_kv_heads, int head_dim, int kv_stride, int window = 0,
                                  const float* sinks = nullptr) {
    std::vector<double> out(size_t(n_heads) * head_dim);
    int group = n_heads / n_kv_heads;
    int first = window > 0 ? std::max(0, n_pos - window) : 0;
    for (int h = 0; h < n_heads; h++) {
        int j = h / group;
        std::vector<double> s;
        for (int p = first; p < n_pos; p++) {
            double d = 0;
            for (int e = 0; e < head_dim; e++) d += double(q[h * head_dim + e]) * k[size_t(p) * kv_stride + j * head_dim + e];
            s.push_back(d / std::sqrt(double(head_dim)));
        }
        if (sinks) s.push_back(sinks[h]);
        double mx = *std::max_element(s.begin(), s.end()), sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int p = first; p < n_pos; p++)
            for (int e = 0; e < head_dim; e++)
                out[size_t(h) * head_dim + e] += s[size_t(p - first)] / sum * v[size_t(p) * kv_stride + j * head_dim + e];
    }
    return out;
}

}  // namespace

TEST_CASE("matmul_bf16 splits rows and columns correctly over threads", "[kernels]") {
    std::mt19937 rng(10);
    ThreadPool pool2(2), pool3(3);
    for (const auto& [name, t] : tables_under_test()) {
        for (ThreadPool* pool : {&pool2, &pool3})
            for (int m : {1, 2, 7, t->packed_min_m, 20})
                for (auto [n, k] : {std::pair{1, 1}, std::pair{130, 67}, std::pair{300, 129}}) {
                    INFO(name << " threads " << pool->size() << " m " << m << " n " << n << " k " << k);
                    auto x = rand_f32(rng, size_t(m) * k);
                    auto w = rand_bf16(rng, size_t(n) * k);
                    std::vector<float> y(size_t(m) * n, NAN);
                    matmul_bf16(*t, y.data(), x.data(), w.data(), m, n, k, *pool);
                    auto ref = matmul_ref(x.data(), w.data(), m, n, k);
                    for (size_t e = 0; e < y.size(); e++) REQUIRE(std::abs(y[e] - ref[e]) <= tol_for(*t, k));
                }
    }
}

TEST_CASE("expert_ffn_bf16 equals silu(x W1) * (x W3) then W2", "[kernels]") {
    std::mt19937 rng(11);
    ThreadPool pool(2);
    for (const auto& [name, t] : tables_under_test()) {
        std::vector<int> ms{1, 3, t->packed_min_m + 1};
        if (t->ffn_packed_min_m < 1000) ms.push_back(t->ffn_packed_min_m + 1);  // the FFN's own switch
        for (int m : ms)
            for (auto [dim, hidden] : {std::pair{64, 200}, std::pair{100, 130}}) {
                INFO(name << " m " << m << " dim " << dim << " hidden " << hidden);
                auto x = rand_f32(rng, size_t(m) * dim);
                auto w1 = rand_bf16(rng, size_t(hidden) * dim), w3 = rand_bf16(rng, size_t(hidden) * dim);
                auto w2 = rand_bf16(rng, size_t(dim) * hidden);
                std::vector<float> y(size_t(m) * dim), scratch(2 * size_t(m) * hidden);
                expert_ffn_bf16(*t, y.data(), x.data(), w1.data(), w3.data(), w2.data(), m, dim, hidden,
                                scratch.data(), pool);
                auto a = matmul_ref(x.data(), w1.data(), m, hidden, dim);
                auto b = matmul_ref(x.data(), w3.data(), m, hidden, dim);
                std::vector<float> h(a.size());
                for (size_t e = 0; e < h.size(); e++) h[e] = float(a[e] / (1.0 + std::exp(-a[e])) * b[e]);
                auto ref = matmul_ref(h.data(), w2.data(), m, dim, hidden);
                // |h| reaches ~sqrt(dim) / 3, so scale the matmul tolerance by it.
                double tol = tol_for(*t, hidden) * (1.0 + std::sqrt(double(dim))) * 2.0;
                for (size_t e = 0; e < y.size(); e++) REQUIRE(std::abs(y[e] - ref[e]) <= tol);
            }
    }
}

TEST_CASE("attention_one matches naive attention, each head bit for bit as alone", "[kernels]") {
    std::mt19937 rng(12);
    for_each_native_isa([&](Isa) {
        for (auto [n_heads, n_kv_heads, head_dim] : {std::tuple{4, 4, 16}, std::tuple{8, 2, 64}, std::tuple{6, 3, 10}})
            for (int n_pos : {1, 5, 70}) {
                INFO("heads " << n_heads << "/" << n_kv_heads << " head_dim " << head_dim << " positions " << n_pos);
                int kv_stride = n_kv_heads * head_dim + 5, group = n_heads / n_kv_heads;
                auto q = rand_f32(rng, size_t(n_heads) * head_dim, 2.0f);
                auto k = rand_f32(rng, size_t(n_pos) * kv_stride, 2.0f), v = rand_f32(rng, size_t(n_pos) * kv_stride);
                auto ref = attention_ref(q.data(), k.data(), v.data(), n_pos, n_heads, n_kv_heads, head_dim, kv_stride);
                std::vector<float> out(ref.size()), alone(ref.size()), scratch(size_t(group) * n_pos);
                attention_one(out.data(), q.data(), k.data(), v.data(), n_pos, n_heads, n_kv_heads, head_dim, kv_stride,
                              scratch.data());
                for (size_t e = 0; e < ref.size(); e++) REQUIRE(std::abs(out[e] - ref[e]) <= 1e-5);
                // The group's heads read K and V together; each gets what it gets alone.
                for (int h = 0; h < n_heads; h++)
                    attention_one(alone.data() + size_t(h) * head_dim, q.data() + size_t(h) * head_dim,
                                  k.data() + size_t(h / group) * head_dim, v.data() + size_t(h / group) * head_dim, n_pos,
                                  1, 1, head_dim, kv_stride, scratch.data());
                REQUIRE(out == alone);
            }
    });
}

namespace {

// K and V rows (n_pos, kv_stride) laid out as a paged cache lays out one
// layer: all blocks' K rows, then all their V rows (after 7 floats of
// something else), block b in slot[b]: "in order" makes one run,
// "shuffled" none, "two runs" two. Unused floats are NaN.
struct PagedKv {
    std::vector<float> pool;
    std::vector<const float*> blocks;
    long k_offset = 7, v_offset = 0;

    PagedKv(std::mt19937& rng, const std::vector<float>& k, const std::vector<float>& v, int n_pos, int kv_stride,
            int block_size, const std::string& order) {
        int n_blocks = (n_pos + block_size - 1) / block_size;
        long block_floats = long(block_size) * kv_stride;
        v_offset = k_offset + n_blocks * block_floats;
        std::vector<int> slot(static_cast<size_t>(n_blocks));
        for (int b = 0; b < n_blocks; b++) slot[size_t(b)] = b;
        if (order == "shuffled") std::shuffle(slot.begin(), slot.end(), rng);
        if (order == "two runs") std::rotate(slot.begin(), slot.begin() + n_blocks / 2, slot.end());
        pool.assign(size_t(v_offset + n_blocks * block_floats), NAN);
        blocks.resize(size_t(n_blocks));
        for (int b = 0; b < n_blocks; b++) blocks[size_t(b)] = pool.data() + slot[size_t(b)] * block_floats;
        for (int p = 0; p < n_pos; p++) {
            float* base = pool.data() + slot[size_t(p / block_size)] * block_floats;
            long row = long(p % block_size) * kv_stride;
            std::copy_n(k.data() + size_t(p) * kv_stride, kv_stride, base + k_offset + row);
            std::copy_n(v.data() + size_t(p) * kv_stride, kv_stride, base + v_offset + row);
        }
    }
};

}  // namespace

TEST_CASE("attention_paged over blocks in any order equals attention_one bit for bit", "[kernels]") {
    std::mt19937 rng(15);
    for_each_native_isa([&](Isa) {
        for (auto [n_heads, n_kv_heads, head_dim] : {std::tuple{4, 4, 16}, std::tuple{8, 2, 64}, std::tuple{6, 3, 10}})
            for (int block_size : {1, 16, 64})
                for (int n_pos : {1, 15, 16, 17, 70, 200})
                    for (const char* order : {"shuffled", "in order", "two runs"}) {
                        INFO("heads " << n_heads << "/" << n_kv_heads << " head_dim " << head_dim << " block "
                                      << block_size << " positions " << n_pos << " blocks " << order);
                        int kv_stride = n_kv_heads * head_dim + 3;
                        auto q = rand_f32(rng, size_t(n_heads) * head_dim, 2.0f);
                        auto k = rand_f32(rng, size_t(n_pos) * kv_stride, 2.0f);
                        auto v = rand_f32(rng, size_t(n_pos) * kv_stride);
                        PagedKv paged(rng, k, v, n_pos, kv_stride, block_size, order);
                        auto sinks = rand_f32(rng, size_t(n_heads), 3.0f);
                        // Plain; a window of 7 (from an unaligned position)
                        // with sinks; a window past the start.
                        for (AttnMask mask : {AttnMask{}, AttnMask{7, sinks.data()}, AttnMask{500, nullptr}}) {
                            INFO("window " << mask.window << (mask.sinks ? " with sinks" : ""));
                            std::vector<float> want(size_t(n_heads) * head_dim), got(want.size());
                            std::vector<float> scratch(size_t(n_heads / n_kv_heads) * n_pos);
                            attention_one(want.data(), q.data(), k.data(), v.data(), n_pos, n_heads, n_kv_heads,
                                          head_dim, kv_stride, scratch.data(), mask);
                            attention_paged(got.data(), q.data(), paged.blocks.data(), paged.k_offset,
                                            paged.v_offset, block_size, n_pos, n_heads, n_kv_heads, head_dim,
                                            kv_stride, scratch.data(), mask);
                            REQUIRE(got == want);
                            auto ref = attention_ref(q.data(), k.data(), v.data(), n_pos, n_heads, n_kv_heads,
                                                     head_dim, kv_stride, mask.window, mask.sinks);
                            for (size_t e = 0; e < ref.size(); e++) REQUIRE(std::abs(got[e] - ref[e]) <= 1e-5);
                        }
                    }
    });
}

TEST_CASE("attention_run is causal attention of each token, the same bits however the run is cut", "[kernels]") {
    std::mt19937 rng(13);
    ThreadPool pool(2), one(1);
    for_each_native_isa([&](Isa) {
        for (auto [n_heads, n_kv_heads, head_dim] :
             {std::tuple{8, 2, 32}, std::tuple{4, 4, 16}, std::tuple{6, 3, 10}, std::tuple{16, 2, 80}})
            for (auto [n_tokens, pos0] : {std::pair{1, 0}, std::pair{5, 0}, std::pair{37, 0}, std::pair{20, 100},
                                          std::pair{70, 3}, std::pair{150, 60}})
                for (auto [order, window, sinked] : {std::tuple{"shuffled", 0, false}, std::tuple{"in order", 0, false},
                                                      std::tuple{"shuffled", 7, true}, std::tuple{"in order", 100, false},
                                                      std::tuple{"in order", 0, true}, std::tuple{"shuffled", 1, true}}) {
                    INFO("heads " << n_heads << "/" << n_kv_heads << " head_dim " << head_dim << " tokens " << n_tokens
                                  << " from " << pos0 << " blocks " << order << " window " << window
                                  << (sinked ? " with sinks" : ""));
                    int kv_stride = n_kv_heads * head_dim + 3, n_pos = pos0 + n_tokens, block_size = 16;
                    long qs = long(n_heads) * head_dim + 5, os = long(n_heads) * head_dim + 2;
                    auto q = rand_f32(rng, size_t(n_tokens) * qs, 2.0f);
                    auto k = rand_f32(rng, size_t(n_pos) * kv_stride, 2.0f), v = rand_f32(rng, size_t(n_pos) * kv_stride);
                    PagedKv paged(rng, k, v, n_pos, kv_stride, block_size, order);
                    auto sinks = rand_f32(rng, size_t(n_heads), 3.0f);
                    const AttnMask mask{window, sinked ? sinks.data() : nullptr};
                    // Positions before the run's first window are never read: a sliding cache may have dropped them.
                    const int dropped = window > 0 ? std::max(0, pos0 - window + 1) : 0;
                    for (int p = 0; p < dropped; p++)
                        for (int c = 0; c < kv_stride; c++) {
                            const_cast<float*>(paged.blocks[size_t(p / block_size)])[paged.k_offset + (p % block_size) * kv_stride + c] = NAN;
                            const_cast<float*>(paged.blocks[size_t(p / block_size)])[paged.v_offset + (p % block_size) * kv_stride + c] = NAN;
                        }
                    // Copies: clang-14 does not let a lambda capture structured bindings.
                    const int nh = n_heads, nkv = n_kv_heads, hd = head_dim, p0 = pos0;
                    auto run = [&](std::vector<float>& out, int t0, int nt, ThreadPool& p) {
                        attention_run(out.data() + t0 * os, os, q.data() + t0 * qs, qs, paged.blocks.data(),
                                      paged.k_offset, paged.v_offset, block_size, p0 + t0, nt, nh, nkv, hd,
                                      kv_stride, p, mask);
                    };
                    std::vector<float> out(size_t(n_tokens) * os, -7.0f);
                    run(out, 0, n_tokens, pool);
                    for (int t = 0; t < n_tokens; t++) {
                        INFO("token " << t);
                        auto ref = attention_ref(q.data() + t * qs, k.data(), v.data(), pos0 + t + 1, n_heads,
                                                 n_kv_heads, head_dim, kv_stride, mask.window, mask.sinks);
                        for (size_t e = 0; e < ref.size(); e++) REQUIRE(std::abs(out[t * os + e] - ref[e]) <= 1e-5);
                        for (long e = long(ref.size()); e < os; e++) REQUIRE(out[t * os + e] == -7.0f);  // padding kept
                    }
                    // One thread, and the run cut in random pieces (the first
                    // ones' own k, v are in the cache already): the same bits.
                    std::vector<float> serial(out.size(), -7.0f), pieces(out.size(), -7.0f);
                    run(serial, 0, n_tokens, one);
                    REQUIRE(serial == out);
                    for (int t0 = 0, nt = 0; t0 < n_tokens; t0 += nt) {
                        nt = std::min(n_tokens - t0, 1 + int(rng() % 40));
                        run(pieces, t0, nt, pool);
                    }
                    REQUIRE(pieces == out);
                }
    });
}

TEST_CASE("softmax, rmsnorm, silu_mul, rope and top_k under every native path", "[kernels]") {
    std::mt19937 rng(14);
    for_each_native_isa([&](Isa) {
        for (int n : {1, 7, 32, 33, 200}) {
            auto x = rand_f32(rng, n, 30.0f);
            double mx = *std::max_element(x.begin(), x.end()), sum = 0;
            for (float a : x) sum += std::exp(a - mx);
            auto y = x;
            softmax(y.data(), n);
            for (int i = 0; i < n; i++) REQUIRE(y[i] == Approx(std::exp(x[i] - mx) / sum).margin(1e-7).epsilon(1e-5));

            auto w = rand_f32(rng, n);
            double ss = 0;
            for (float a : x) ss += double(a) * a;
            std::vector<float> r(n);
            rmsnorm(r.data(), x.data(), w.data(), n, 1e-5f);
            for (int i = 0; i < n; i++) REQUIRE(r[i] == Approx(x[i] / std::sqrt(ss / n + 1e-5) * w[i]).epsilon(1e-5).margin(1e-6));

            auto a = rand_f32(rng, n, 10.0f), b = rand_f32(rng, n), c = a;
            silu_mul(c.data(), b.data(), n);
            for (int i = 0; i < n; i++) REQUIRE(c[i] == Approx(a[i] / (1 + std::exp(-double(a[i]))) * b[i]).epsilon(1e-5).margin(1e-6));
        }
        // RoPE at a long-context position: angles from double frequencies;
        // cos and sin scaled (YaRN's attention factor).
        int head_dim = 128, n_heads = 2, pos = 100000;
        double theta = 1e6;
        std::vector<double> freq(static_cast<size_t>(head_dim / 2));
        for (int i = 0; i < head_dim / 2; i++) freq[size_t(i)] = std::pow(theta, -2.0 * i / head_dim);
        for (float mscale : {1.0f, 1.25f}) {
            auto x = rand_f32(rng, size_t(n_heads) * head_dim), y = x;
            rope_rotate_half(y.data(), n_heads, head_dim, pos, freq.data(), mscale);
            // Partial rotary: the first 32 dims of each head, as heads of 32 of their own; the rest kept.
            auto partial = x, alone = x;
            rope_rotate_half(partial.data(), n_heads, head_dim, pos, freq.data(), mscale, 32);
            for (int h = 0; h < n_heads; h++)
                rope_rotate_half(alone.data() + h * head_dim, 1, 32, pos, freq.data(), mscale);
            REQUIRE(partial == alone);
            for (int h = 0; h < n_heads; h++)
                for (int i = 32; i < head_dim; i++) REQUIRE(partial[size_t(h * head_dim + i)] == x[size_t(h * head_dim + i)]);
            for (int h = 0; h < n_heads; h++)
                for (int i = 0; i < head_dim / 2; i++) {
                    double ang = pos * std::pow(theta, -2.0 * i / head_dim);
                    double a = x[h * head_dim + i], b = x[h * head_dim + i + head_dim / 2];
                    REQUIRE(y[h * head_dim + i] == Approx(mscale * (a * std::cos(ang) - b * std::sin(ang))).margin(1e-5));
                    REQUIRE(y[h * head_dim + i + head_dim / 2] ==
                            Approx(mscale * (b * std::cos(ang) + a * std::sin(ang))).margin(1e-5));
                }
        }

        std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, 2.5f, 0.0f, 7.0f, 3.0f};
        int idx[3];
        top_k(idx, logits.data(), 8, 3);
        REQUIRE(idx[0] == 6);
        REQUIRE(idx[1] == 1);
        REQUIRE(idx[2] == 3);
    });
}

TEST_CASE("large-m bf16 matmul through oneDNN and through our packed kernel agree", "[kernels]") {
    if (!isa_supported(Isa::AVX512BF16)) {
        WARN("native avx512bf16 path skipped: this CPU cannot run it");
        return;
    }
    if (!matmul_dnnl_select(true)) WARN("oneDNN bf16 brgemm not available: only our packed kernel runs");
    std::mt19937 rng(15);
    ThreadPool pool(2);
    const KernelTable& t = kernel_table(Isa::AVX512BF16);
    for (auto [m, n, k] : {std::tuple{140, 200, 130}, std::tuple{130, 129, 1001}}) {
        auto x = rand_f32(rng, size_t(m) * k);
        auto w = rand_bf16(rng, size_t(n) * k);
        auto ref = matmul_ref(x.data(), w.data(), m, n, k);
        for (bool dnnl : {true, false}) {
            INFO("m " << m << " n " << n << " k " << k << " oneDNN " << dnnl);
            matmul_dnnl_select(dnnl);
            std::vector<float> y(size_t(m) * n, NAN);
            matmul_bf16(t, y.data(), x.data(), w.data(), m, n, k, pool);
            for (size_t e = 0; e < y.size(); e++) REQUIRE(std::abs(y[e] - ref[e]) <= tol_for(t, k));
        }
    }
    matmul_dnnl_select(true);
}
