// Every ISA table (native where the CPU runs it, SIMDe builds always but in
// the sanitizer build) against
// a double-precision reference and the scalar path, on random shapes that are
// mostly not multiples of any vector width. Tolerances:
//   matmul, fp32 paths:  |y - ref| <= 2e-5 * sqrt(k)   (w, x uniform in [-1, 1])
//   matmul, bf16 path:   |y - ref| <= 4e-3 * sqrt(k) (x rounded to bf16:
//                        relative error <= 2^-9 per element, random signs)
//   vector helpers:      1e-5 x (|ref| + 1) (exp: polynomial, ~2 ulp)
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "simde/kernel_reference.h"
#include "simde/simde_tables.h"

std::vector<NamedTable> tables_under_test() {
    std::vector<NamedTable> out;
    for (Isa isa : {Isa::AVX2, Isa::AVX512, Isa::AVX512BF16}) {
        if (isa_supported(isa))
            out.push_back({std::string(isa_name(isa)) + " (native)", &kernel_table(isa)});
        else
            WARN("native " << isa_name(isa) << " path skipped: this CPU cannot run it");
    }
#if !defined(MOE_TEST_NO_SIMDE)  // the sanitizer build has no SIMDe copies (tests/simde.cmake)
    out.push_back({"avx2 (SIMDe)", &kernel_table_avx2_simde()});
    out.push_back({"avx512 (SIMDe)", &kernel_table_avx512_simde()});
    out.push_back({"avx512bf16 (SIMDe)", &kernel_table_avx512bf16_simde()});
#endif
    return out;
}

namespace {

std::vector<float> random_f32(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

double matmul_tolerance(const KernelTable& t, int k) {
    // rms of U(-1, 1) is 1/sqrt(3): the typical product is 1/3.
    double per = t.isa == Isa::AVX512BF16 ? 4e-3 : 2e-5;
    return per * std::sqrt(double(k)) + 1e-6;
}

// Runs the table's rows or packed kernel over [c0, c1) of every row.
std::vector<float> run_matmul(const KernelTable& t, bool packed, const std::vector<float>& x,
                              const std::vector<bf16>& w, int m, int n, int k, int c0, int c1) {
    std::vector<float> y(size_t(m) * n, 12345.0f);
    const void* xa = x.data();
    std::vector<unsigned char> xp;
    if (t.prepare_x && (!packed || t.packed_x_prepared)) {
        xp.resize(size_t(m) * t.x_stride(k) * t.x_elem_bytes + 64);
        // Prepared in two slices, as threads do.
        int mid = k > 64 ? 64 : k;
        t.prepare_x(xp.data(), x.data(), m, k, 0, mid);
        t.prepare_x(xp.data(), x.data(), m, k, mid, k);
        xa = xp.data();
    }
    (packed ? t.matmul_packed : t.matmul_rows)(y.data(), xa, w.data(), m, n, k, c0, c1);
    return y;
}

void check_matmul(const KernelTable& t, const std::string& name, bool packed, int m, int n, int k, int c0, int c1,
                  std::mt19937& rng) {
    auto x = random_f32(rng, size_t(m) * k);
    auto w = rand_bf16(rng, size_t(n) * k);
    auto ref = matmul_ref(x.data(), w.data(), m, n, k);
    auto y = run_matmul(t, packed, x, w, m, n, k, c0, c1);
    auto ys = run_matmul(kernel_table_scalar(), false, x, w, m, n, k, c0, c1);
    double tol = matmul_tolerance(t, k);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int r = 0; r < n; r++) {
            size_t e = size_t(i) * n + r;
            if (r < c0 || r >= c1) {
                INFO(name << " wrote outside its columns at " << i << "," << r);
                REQUIRE(y[e] == 12345.0f);
                continue;
            }
            worst = std::max(worst, std::abs(y[e] - ref[e]));
            REQUIRE(std::abs(ys[e] - ref[e]) <= 2e-5 * std::sqrt(double(k)) + 1e-6);
        }
    INFO(name << (packed ? " packed" : " rows") << " m=" << m << " n=" << n << " k=" << k << " cols [" << c0 << ","
              << c1 << ") worst " << worst << " tol " << tol);
    REQUIRE(worst <= tol);
}

}  // namespace

TEST_CASE("matmul rows path matches the reference on odd shapes", "[kernels]") {
    std::mt19937 rng(1);
    for (const auto& [name, t] : tables_under_test()) {
        for (int m : {1, 2, 3, 4, 5, 7, 9})
            for (int k : {1, 15, 16, 17, 31, 33, 64, 100, 257}) {
                int n = 1 + int(rng() % 70);
                check_matmul(*t, name, false, m, n, k, 0, n, rng);
            }
        // A row range that starts inside W.
        check_matmul(*t, name, false, 3, 150, 200, 64, 131, rng);
        check_matmul(*t, name, false, 1, 150, 1000, 64, 150, rng);
    }
}

TEST_CASE("matmul packed path matches the reference on odd shapes", "[kernels]") {
    std::mt19937 rng(2);
    for (const auto& [name, t] : tables_under_test()) {
        for (int m : {1, 5, 8, 13, 17, 30})
            for (int k : {1, 3, 16, 33, 130, 300}) {
                int n = 1 + int(rng() % 100);
                check_matmul(*t, name, true, m, n, k, 0, n, rng);
            }
        // Several k blocks and n blocks, a column range not starting at 0.
        check_matmul(*t, name, true, 29, 600, 700, 64, 577, rng);
        check_matmul(*t, name, true, 64, 64, 1029, 0, 64, rng);
    }
}

TEST_CASE("vector helpers match the scalar path", "[kernels]") {
    std::mt19937 rng(3);
    const KernelTable& s = kernel_table_scalar();
    auto close = [](double a, double b, double rel) { return std::abs(a - b) <= rel * (std::abs(b) + 1.0); };
    for (const auto& [name, t] : tables_under_test()) {
        INFO(name);
        for (int n : {1, 5, 8, 16, 17, 33, 64, 127, 1000}) {
            INFO("n " << n);
            auto a = random_f32(rng, n), b = random_f32(rng, n);
            REQUIRE(close(t->dot_f32(a.data(), b.data(), n), s.dot_f32(a.data(), b.data(), n), 1e-4));
            REQUIRE(t->max_f32(a.data(), n) == s.max_f32(a.data(), n));

            auto y1 = b, y2 = b;
            t->axpy_f32(y1.data(), 0.7f, a.data(), n);
            s.axpy_f32(y2.data(), 0.7f, a.data(), n);
            for (int i = 0; i < n; i++) REQUIRE(close(y1[i], y2[i], 1e-6));
            t->scale_f32(y1.data(), -1.5f, n);
            s.scale_f32(y2.data(), -1.5f, n);
            for (int i = 0; i < n; i++) REQUIRE(close(y1[i], y2[i], 1e-6));

            auto e1 = random_f32(rng, n, -90.0f, 10.0f), e2 = e1;
            float s1 = t->exp_sum_f32(e1.data(), n, 5.0f), s2 = s.exp_sum_f32(e2.data(), n, 5.0f);
            REQUIRE(close(s1, s2, 1e-5));
            for (int i = 0; i < n; i++) REQUIRE(std::abs(e1[i] - e2[i]) <= 1e-6f * e2[i] + 1e-37f);

            auto wt = random_f32(rng, n);
            std::vector<float> r1(n), r2(n);
            t->rmsnorm(r1.data(), a.data(), wt.data(), n, 1e-5f);
            s.rmsnorm(r2.data(), a.data(), wt.data(), n, 1e-5f);
            for (int i = 0; i < n; i++) REQUIRE(close(r1[i], r2[i], 1e-5));

            auto g1 = random_f32(rng, n, -20.0f, 20.0f), g2 = g1;
            t->silu_mul(g1.data(), b.data(), n);
            s.silu_mul(g2.data(), b.data(), n);
            for (int i = 0; i < n; i++) REQUIRE(close(g1[i], g2[i], 1e-5));
        }
        // exp at the ends of its range: underflow to exactly 0, no inf.
        std::vector<float> ends = {-INFINITY, -1000.0f, -88.5f, 0.0f, 88.0f};
        t->exp_sum_f32(ends.data(), int(ends.size()), 0.0f);
        REQUIRE(ends[0] == 0.0f);
        REQUIRE(ends[1] == 0.0f);
        REQUIRE(ends[3] == Approx(1.0f));
        REQUIRE(std::isfinite(ends[4]));
    }
}

TEST_CASE("rope and attention pieces match the scalar path", "[kernels]") {
    std::mt19937 rng(4);
    const KernelTable& s = kernel_table_scalar();
    for (const auto& [name, t] : tables_under_test()) {
        INFO(name);
        for (int head_dim : {2, 10, 64, 128}) {
            int half = head_dim / 2, n_heads = 3;
            auto cs = random_f32(rng, half), sn = random_f32(rng, half);
            auto x1 = random_f32(rng, size_t(n_heads) * head_dim), x2 = x1;
            t->rope(x1.data(), n_heads, head_dim, cs.data(), sn.data());
            s.rope(x2.data(), n_heads, head_dim, cs.data(), sn.data());
            for (size_t i = 0; i < x1.size(); i++) REQUIRE(x1[i] == Approx(x2[i]).margin(1e-6));

            int n_q = 3, n_pos = 37, stride = head_dim * 2 + 3;
            auto q = random_f32(rng, size_t(n_q) * head_dim);
            auto kv = random_f32(rng, size_t(n_pos) * stride);
            std::vector<float> s1(size_t(n_q) * 40), s2(s1.size());
            t->attn_scores(s1.data(), 40, q.data(), head_dim, n_q, kv.data() + 1, stride, n_pos, head_dim, 0.3f);
            s.attn_scores(s2.data(), 40, q.data(), head_dim, n_q, kv.data() + 1, stride, n_pos, head_dim, 0.3f);
            for (size_t i = 0; i < s1.size(); i++) REQUIRE(s1[i] == Approx(s2[i]).margin(1e-5));
            std::vector<float> o1(size_t(n_q) * head_dim, 0.5f), o2 = o1;
            t->attn_accum(o1.data(), head_dim, s1.data(), 40, n_q, kv.data() + 2, stride, n_pos, head_dim);
            s.attn_accum(o2.data(), head_dim, s1.data(), 40, n_q, kv.data() + 2, stride, n_pos, head_dim);
            for (size_t i = 0; i < o1.size(); i++) REQUIRE(o1[i] == Approx(o2[i]).margin(1e-5));
        }
    }
}

TEST_CASE("benchmark ceilings measure something", "[kernels]") {
    std::vector<float> buf(1 << 16, 1.0f);
    buf[777] = 3.0f;
    for (const auto& [name, t] : tables_under_test()) {
        INFO(name);
        if (t->isa != Isa::SCALAR)
            for (int streams : {1, 2, 4, 8}) REQUIRE(t->read_stream(buf.data(), long(buf.size() * 4), streams) == 3.0f);
        float sink = 0;
        REQUIRE(t->fma_peak(100, &sink) > 0);
        REQUIRE(std::isfinite(sink));
    }
}
