// The gated delta rule (Gated DeltaNet's token mixer, kernels.h) and its two
// table pieces, gemm_f32 and delta_rule_step, on every table (the SIMDe
// builds included): against a float64 recurrence written here, the chunked
// form against the token-by-token form of the same table, and each vector
// table against the scalar one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cpu_kernels/kernels.h"
#include "simde/simde_tables.h"

namespace {

std::vector<float> rand_f32(std::mt19937& rng, size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// n tokens of one head as Gated DeltaNet feeds them: q and k unit vectors
// (q scaled by 1/sqrt(dk)) in rows of qk_stride (other heads' columns
// between them), v, a log decay g in [-2, -0.001] (some heads barely decay:
// the state keeps its whole history) and beta in (0, 1) per token, and a
// state S_0 that is not zero.
struct HeadInputs {
    int n, dk, dv;
    long qk_stride, v_stride, gb_stride;
    std::vector<float> q, k, v, g, beta, s0;

    HeadInputs(std::mt19937& rng, int n_, int dk_, int dv_, float g_lo)
        : n(n_), dk(dk_), dv(dv_), qk_stride(dk_ + 5), v_stride(dv_ + 3), gb_stride(2) {
        q = rand_f32(rng, size_t(n) * qk_stride, -1, 1);
        k = rand_f32(rng, size_t(n) * qk_stride, -1, 1);
        v = rand_f32(rng, size_t(n) * v_stride, -1, 1);
        g = rand_f32(rng, size_t(n) * gb_stride, g_lo, -0.001f);
        beta = rand_f32(rng, size_t(n) * gb_stride, 0.05f, 0.95f);
        s0 = rand_f32(rng, size_t(dk) * dv, -0.5f, 0.5f);
        for (int i = 0; i < n; i++)
            for (auto [x, scale] : {std::pair{q.data(), 1.0 / std::sqrt(double(dk))}, std::pair{k.data(), 1.0}}) {
                float* row = x + i * qk_stride;
                double ss = 0;
                for (int j = 0; j < dk; j++) ss += double(row[j]) * row[j];
                for (int j = 0; j < dk; j++) row[j] = float(row[j] * scale / std::sqrt(ss));
            }
    }

    // Outputs (n, dv) and the final state, in float64, token by token.
    void reference(std::vector<double>& o, std::vector<double>& s) const {
        s.assign(s0.begin(), s0.end());
        o.assign(size_t(n) * dv, 0.0);
        std::vector<double> u(static_cast<size_t>(dv));
        for (int i = 0; i < n; i++) {
            const float *qi = &q[i * qk_stride], *ki = &k[i * qk_stride], *vi = &v[i * v_stride];
            const double decay = std::exp(double(g[i * gb_stride])), b = beta[i * gb_stride];
            for (auto& x : s) x *= decay;
            for (int j = 0; j < dv; j++) {
                double sk = 0;
                for (int r = 0; r < dk; r++) sk += s[size_t(r) * dv + j] * ki[r];
                u[j] = b * (vi[j] - sk);
            }
            for (int r = 0; r < dk; r++)
                for (int j = 0; j < dv; j++) s[size_t(r) * dv + j] += ki[r] * u[j];
            for (int j = 0; j < dv; j++) {
                double oq = 0;
                for (int r = 0; r < dk; r++) oq += s[size_t(r) * dv + j] * qi[r];
                o[size_t(i) * dv + j] = oq;
            }
        }
    }

    // gated_delta_rule on table t from S_0, as `pieces` calls of
    // consecutive runs (run lengths cycling through pieces).
    void run(const KernelTable& t, std::vector<float>& o, std::vector<float>& s,
             const std::vector<int>& pieces = {}) const {
        s = s0;
        o.assign(size_t(n) * dv, NAN);
        for (int i = 0, p = 0; i < n; p++) {
            const int len = pieces.empty() ? n : std::min(pieces[size_t(p) % pieces.size()], n - i);
            gated_delta_rule(t, s.data(), o.data() + size_t(i) * dv, dv, &q[i * qk_stride], &k[i * qk_stride],
                             qk_stride, &v[i * v_stride], v_stride, &g[i * gb_stride], &beta[i * gb_stride],
                             gb_stride, len, dk, dv);
            i += len;
        }
    }
};

template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
    return m;
}

struct Shape {
    int n, dk, dv;
};

std::vector<NamedTable> all_tables() {
    std::vector<NamedTable> tables = {{"scalar", &kernel_table_scalar()}};
    for (const NamedTable& t : tables_under_test())
        if (t.table->isa != Isa::SCALAR) tables.push_back(t);
    return tables;
}

}  // namespace

TEST_CASE("gemm_f32 of every table equals the double product, strided, transposed, triangular", "[kernels][delta]") {
    std::mt19937 rng(31);
    for (const auto& [name, t] : all_tables())
        for (auto [m, n, k] : {std::tuple{1, 1, 1}, std::tuple{5, 7, 3}, std::tuple{13, 40, 29},
                               std::tuple{64, 64, 128}, std::tuple{64, 128, 64}, std::tuple{37, 37, 37}})
            for (bool trans : {false, true})
                for (bool lower : {false, true})
                    for (float c_scale : {0.0f, 1.0f, 0.37f}) {
                        INFO(name << " m " << m << " n " << n << " k " << k << " transposed A " << trans
                                  << " lower " << lower << " c_scale " << c_scale);
                        // A (m, k): row-major with padding, or stored as its transpose.
                        const long lda = (trans ? m : k) + 3, ldb = n + 2, ldc = n + 1;
                        std::vector<float> a = rand_f32(rng, size_t(trans ? k : m) * lda, -1, 1);
                        const long a_rs = trans ? 1 : lda, a_cs = trans ? lda : 1;
                        if (lower)
                            for (int i = 0; i < m; i++)
                                for (int p = i + 1; p < k; p++) a[i * a_rs + p * a_cs] = 0.0f;
                        const std::vector<float> b = rand_f32(rng, size_t(k) * ldb, -1, 1);
                        std::vector<float> c = rand_f32(rng, size_t(m) * ldc, -1, 1);
                        if (c_scale == 0.0f)
                            for (int i = 0; i < m; i++) c[i * ldc] = NAN;  // overwritten, never read
                        std::vector<double> want(size_t(m) * n);
                        for (int i = 0; i < m; i++)
                            for (int j = 0; j < n; j++) {
                                double s = c_scale == 0.0f ? 0.0 : double(c_scale) * c[i * ldc + j];
                                for (int p = 0; p < k; p++) s += double(a[i * a_rs + p * a_cs]) * b[p * ldb + j];
                                want[size_t(i) * n + j] = s;
                            }
                        t->gemm_f32(c.data(), ldc, c_scale, a.data(), a_rs, a_cs, b.data(), ldb, m, n, k, lower);
                        double err = 0;
                        for (int i = 0; i < m; i++)
                            for (int j = 0; j < n; j++)
                                err = std::max(err, std::abs(c[i * ldc + j] - want[size_t(i) * n + j]));
                        CHECK(err < 1e-5 * k + 1e-6);
                        // The padding between rows of c is not written.
                        for (int i = 0; i < m; i++) CHECK(std::isfinite(c[i * ldc + n]));
                    }
}

TEST_CASE("gated_delta_rule of every table equals a float64 recurrence, chunked and token by token",
          "[kernels][delta]") {
    std::mt19937 rng(32);
    // Below DELTA_CHUNK_MIN token by token; from there whole and partial
    // chunks of DELTA_CHUNK; head sizes with and without vector tails.
    for (Shape sh : {Shape{1, 32, 32}, Shape{5, 16, 40}, Shape{DELTA_CHUNK_MIN, 32, 32}, Shape{63, 24, 20},
                     Shape{DELTA_CHUNK, 32, 32}, Shape{DELTA_CHUNK + 1, 16, 48}, Shape{200, 64, 64},
                     Shape{130, 128, 128}})
        for (float g_lo : {-2.0f, -0.02f}) {
            HeadInputs in(rng, sh.n, sh.dk, sh.dv, g_lo);
            std::vector<double> want_o, want_s;
            in.reference(want_o, want_s);
            for (const auto& [name, t] : all_tables()) {
                INFO(name << " n " << sh.n << " dk " << sh.dk << " dv " << sh.dv << " g from " << g_lo);
                std::vector<float> o, s;
                in.run(*t, o, s);
                CHECK(max_abs_diff(o, want_o) < 5e-6);
                CHECK(max_abs_diff(s, want_s) < 5e-6);
            }
        }
}

TEST_CASE("gated_delta_rule: chunked prefill equals the token-by-token recurrence of the same table",
          "[kernels][delta]") {
    // The same tokens as one call (chunks of 64), as calls of 1 token
    // (delta_rule_step only), and as uneven runs that mix both forms.
    std::mt19937 rng(33);
    for (const auto& [name, t] : all_tables())
        for (Shape sh : {Shape{150, 32, 32}, Shape{70, 128, 128}}) {
            INFO(name << " n " << sh.n << " dk " << sh.dk);
            HeadInputs in(rng, sh.n, sh.dk, sh.dv, -1.0f);
            std::vector<float> o1, s1, o2, s2, o3, s3;
            in.run(*t, o1, s1);
            in.run(*t, o2, s2, {1});
            in.run(*t, o3, s3, {3, DELTA_CHUNK + 9, 1, 17});
            CHECK(max_abs_diff(o1, o2) < 5e-6);
            CHECK(max_abs_diff(s1, s2) < 5e-6);
            CHECK(max_abs_diff(o3, o2) < 5e-6);
            CHECK(max_abs_diff(s3, s2) < 5e-6);
        }
}

TEST_CASE("delta_rule_step of every vector table equals the scalar table's", "[kernels][delta]") {
    std::mt19937 rng(34);
    for (auto [dk, dv] : {std::pair{32, 32}, std::pair{128, 128}, std::pair{16, 40}, std::pair{8, 7}}) {
        HeadInputs in(rng, 3, dk, dv, -1.0f);
        std::vector<float> want_o, want_s;
        for (const auto& [name, t] : all_tables()) {
            INFO(name << " dk " << dk << " dv " << dv);
            std::vector<float> s = in.s0, o(size_t(3) * dv);
            for (int i = 0; i < 3; i++)
                t->delta_rule_step(s.data(), o.data() + i * dv, &in.q[i * in.qk_stride], &in.k[i * in.qk_stride],
                                   &in.v[i * in.v_stride], in.g[i * in.gb_stride], in.beta[i * in.gb_stride], dk, dv);
            if (t->isa == Isa::SCALAR && want_o.empty()) {
                want_o = o;
                want_s = s;
                continue;
            }
            CHECK(max_abs_diff(o, want_o) < 1e-6);
            CHECK(max_abs_diff(s, want_s) < 1e-6);
        }
    }
}
