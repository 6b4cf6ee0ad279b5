// The kernels over WeightViews of every type (cpu_kernels/kernels.h, the
// quantized paths of quant_impl.h) on every table: native paths this CPU
// runs and the SIMDe builds. Each matmul is checked against the scalar
// dequantize-then-fp32 reference in double (within the bound of int8
// activation rounding on the rows path, of bf16 rounding on the packed
// path), and the rows path against the scalar table's integer kernel to
// fp32 rounding; the activation quantizer and the bf16 dequantizer of each
// table against quant.h's scalar ones. Shapes are not multiples of
// anything beyond the block: k = 3 blocks of 256 or 5 of 32, odd n, m = 1,
// 3, 17, 64, 130 (the last two on the packed path). The _R8 types (rows in
// groups of 8) take n rounded up to whole groups (72, 136: a group past the
// 64-row thread split).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels/kernels.h"
#include "cpu_kernels/quant.h"
#include "simde/simde_tables.h"

namespace {

const DType kQuantTypes[] = {DType::Q8_0,    DType::Q4_0,    DType::Q4_K,    DType::Q5_K,  DType::Q6_K,
                             DType::Q8_0_R8, DType::Q4_K_R8, DType::Q6_K_R8, DType::MXFP4};

std::vector<float> rand_normal(std::mt19937& rng, size_t n, float sigma = 1.0f) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// A (rows, cols) weight of `type` quantized from normal data, with its
// dequantized fp32 values (an _R8 type: rows of its plain type, then interleaved).
struct TestWeight {
    std::vector<uint8_t> bytes;
    std::vector<float> values;
    WeightView view;
};

TestWeight make_weight(std::mt19937& rng, DType type, int rows, int cols) {
    TestWeight w;
    std::vector<float> src = rand_normal(rng, size_t(rows) * cols, 0.05f);
    const DType plain = dtype_plain(type);
    size_t row = *dtype_row_bytes(type, cols);
    w.bytes.resize(row * rows);
    w.values.resize(src.size());
    for (int r = 0; r < rows; r++) {
        quantize_row(plain, src.data() + size_t(r) * cols, w.bytes.data() + row * r, cols);
        dequantize_row(plain, w.bytes.data() + row * r, w.values.data() + size_t(r) * cols, cols);
    }
    if (type != plain) {
        std::vector<uint8_t> rows_plain = w.bytes;
        quant_repack_r8(type, rows_plain.data(), w.bytes.data(), rows, row);
    }
    w.view = weight_view(type, w.bytes.data(), rows, cols);
    return w;
}

// y = x @ W^T in double with the bound on |y - ref| a table may reach:
// int8 activations (each element off by at most half its block's step,
// amax / 254) plus bf16 rounding of weights and activations (packed path,
// 2^-8 relative each) plus fp32 sums.
struct Reference {
    std::vector<double> y, tol;
};

Reference reference(const float* x, const std::vector<float>& w, DType type, int m, int n, int k) {
    Reference ref{std::vector<double>(size_t(m) * n), std::vector<double>(size_t(m) * n)};
    const int block = dtype_info(type).block;
    std::vector<double> half_step(static_cast<size_t>(k));
    for (int i = 0; i < m; i++) {
        const float* xi = x + size_t(i) * k;
        for (int b = 0; b < k / block; b++) {
            float amax = 0;
            for (int j = 0; j < block; j++) amax = std::max(amax, std::fabs(xi[b * block + j]));
            for (int j = 0; j < block; j++) half_step[size_t(b) * block + j] = amax / 254.0;
        }
        for (int r = 0; r < n; r++) {
            double s = 0, act = 0, mag = 0;
            for (int j = 0; j < k; j++) {
                double wv = w[size_t(r) * k + j];
                s += wv * xi[j];
                act += std::fabs(wv) * half_step[size_t(j)];
                mag += std::fabs(wv * xi[j]);
            }
            ref.y[size_t(i) * n + r] = s;
            ref.tol[size_t(i) * n + r] = 1.001 * act + 0x1p-7 * mag + 1e-6 * std::sqrt(double(k));
        }
    }
    return ref;
}

}  // namespace

TEST_CASE("quant kernels: matmul over quantized views matches the dequantized reference", "[kernels][quant]") {
    std::mt19937 rng(21);
    ThreadPool pool(3);
    std::vector<NamedTable> tables = tables_under_test();
    tables.insert(tables.begin(), {"scalar", &kernel_table_scalar()});
    for (DType type : kQuantTypes) {
        int k = dtype_info(type).block == 32 ? 32 * 5 : 256 * 3;
        for (int n : {67, 131}) {
            const int group = dtype_row_group(type);
            n = (n + group - 1) / group * group;
            TestWeight w = make_weight(rng, type, n, k);
            for (int m : {1, 3, 17, 64, 130}) {  // 64: packed for quantized W, rows for bf16 on avx512
                std::vector<float> x = rand_normal(rng, size_t(m) * k);
                Reference ref = reference(x.data(), w.values, type, m, n, k);
                std::vector<float> scalar(size_t(m) * n);
                matmul(kernel_table_scalar(), scalar.data(), x.data(), w.view, m, pool);
                for (const auto& [name, t] : tables) {
                    INFO(name << " " << dtype_name(type) << " m " << m << " n " << n << " k " << k);
                    std::vector<float> y(size_t(m) * n, NAN);
                    matmul(*t, y.data(), x.data(), w.view, m, pool);
                    bool rows = m < t->quant_packed_min_m;
                    for (size_t e = 0; e < y.size(); e++) {
                        REQUIRE(std::fabs(y[e] - ref.y[e]) <= ref.tol[e]);
                        // The rows path sums the same integers as the scalar table.
                        if (rows)
                            REQUIRE(std::fabs(y[e] - scalar[e]) <= 2e-6 * (std::fabs(ref.y[e]) + 0.1 * std::sqrt(k)));
                    }
                }
            }
        }
    }
}

TEST_CASE("quant kernels: each table quantizes activations and dequantizes weights as quant.h does",
          "[kernels][quant]") {
    std::mt19937 rng(22);
    for (const auto& [name, t] : tables_under_test()) {
        for (DType type : kQuantTypes) {
            INFO(name << " " << dtype_name(type));
            int k = 256 * 3;
            std::vector<float> x = rand_normal(rng, size_t(k));
            x[3] = 0.0f;
            std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // a zero block
            x[600] = 40.0f;                                     // an outlier
            x[601] = -40.0f * 0.5f / 127.0f;                    // lands on a tie: to even
            size_t bytes = quant_x_row_bytes(type, k);
            std::vector<uint8_t> a(bytes), b(bytes);
            quantize_x_row(type, x.data(), a.data(), k);
            t->quantize_x(type, x.data(), b.data(), k);
            CHECK(a == b);
            TestWeight w = make_weight(rng, type, 8, k);
            std::vector<bf16> d(size_t(3) * k);
            t->dequant_bf16(type, d.data(), w.bytes.data(), w.view.row_bytes, k, 1, 4);
            for (size_t e = 0; e < size_t(3) * k; e++) {
                float want = w.values[size_t(k) + e], got = bf16_to_f32(d[e]);
                // One bf16 step at most (the fp32 value may differ in its last bit).
                REQUIRE(std::fabs(got - want) <= std::fabs(want) * 0x1p-8f + 1e-30f);
            }
        }
    }
}

TEST_CASE("quant kernels: float views, bf16 views run matmul_bf16, weight_row_f32", "[kernels][quant]") {
    std::mt19937 rng(23);
    ThreadPool pool(2);
    for (const auto& [name, t] : tables_under_test()) {
        for (int m : {1, 3, 130}) {
            INFO(name << " m " << m);
            int n = 67, k = 99;
            std::vector<float> x = rand_normal(rng, size_t(m) * k);
            TestWeight wb = make_weight(rng, DType::BF16, n, k);
            std::vector<float> y(size_t(m) * n), y2(size_t(m) * n);
            matmul(*t, y.data(), x.data(), wb.view, m, pool);
            matmul_bf16(*t, y2.data(), x.data(), reinterpret_cast<const bf16*>(wb.bytes.data()), m, n, k, pool);
            REQUIRE(std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)) == 0);
            for (DType type : {DType::F32, DType::F16}) {
                TestWeight w = make_weight(rng, type, n, k);
                matmul(*t, y.data(), x.data(), w.view, m, pool);
                for (int i = 0; i < m; i++)
                    for (int r = 0; r < n; r++) {
                        double s = 0;
                        for (int j = 0; j < k; j++) s += double(w.values[size_t(r) * k + j]) * x[size_t(i) * k + j];
                        REQUIRE(std::fabs(y[size_t(i) * n + r] - s) <= 1e-5);
                    }
                std::vector<float> row(static_cast<size_t>(k));
                weight_row_f32(row.data(), w.view, 66);
                CHECK(std::memcmp(row.data(), w.values.data() + size_t(66) * k, size_t(k) * 4) == 0);
            }
        }
    }
    std::vector<float> row(256);
    TestWeight q = make_weight(rng, DType::Q4_K, 3, 256);
    weight_row_f32(row.data(), q.view, 2);
    CHECK(std::memcmp(row.data(), q.values.data() + 512, 256 * 4) == 0);
    for (DType type : {DType::Q8_0_R8, DType::Q4_K_R8, DType::Q6_K_R8}) {
        TestWeight q8 = make_weight(rng, type, 16, 256);
        for (int r : {0, 5, 11}) {
            weight_row_f32(row.data(), q8.view, r);
            CHECK(std::memcmp(row.data(), q8.values.data() + 256 * r, 256 * 4) == 0);
        }
    }
}

TEST_CASE("quant kernels: expert_ffn with mixed types equals its three matmuls and the reference", "[kernels][quant][slow]") {
    std::mt19937 rng(24);
    ThreadPool pool(2);
    struct Mix {
        DType w13, w2;
    };
    const Mix mixes[] = {{DType::Q4_K, DType::Q6_K},       {DType::Q8_0, DType::Q8_0},
                         {DType::Q5_K, DType::BF16},       {DType::BF16, DType::Q4_0},
                         {DType::Q4_K_R8, DType::Q6_K_R8}, {DType::Q8_0_R8, DType::Q8_0_R8}};
    std::vector<NamedTable> tables = tables_under_test();
    tables.insert(tables.begin(), {"scalar", &kernel_table_scalar()});
    for (const Mix& mix : mixes) {
        int dim = 256 * 3, hidden = 256 * 5;
        TestWeight w1 = make_weight(rng, mix.w13, hidden, dim), w3 = make_weight(rng, mix.w13, hidden, dim);
        TestWeight w2 = make_weight(rng, mix.w2, dim, hidden);
        for (int m : {1, 3, 64, 130}) {
            std::vector<float> x = rand_normal(rng, size_t(m) * dim);
            // The reference in double on the dequantized weights.
            std::vector<double> ref(size_t(m) * dim);
            double rms = 0;
            for (int i = 0; i < m; i++) {
                std::vector<float> h(static_cast<size_t>(hidden));
                for (int r = 0; r < hidden; r++) {
                    double a = 0, b = 0;
                    for (int j = 0; j < dim; j++) {
                        a += double(w1.values[size_t(r) * dim + j]) * x[size_t(i) * dim + j];
                        b += double(w3.values[size_t(r) * dim + j]) * x[size_t(i) * dim + j];
                    }
                    h[size_t(r)] = float(a / (1 + std::exp(-a)) * b);
                }
                for (int r = 0; r < dim; r++) {
                    double s = 0;
                    for (int j = 0; j < hidden; j++) s += double(w2.values[size_t(r) * hidden + j]) * h[size_t(j)];
                    ref[size_t(i) * dim + r] = s;
                    rms += s * s;
                }
            }
            rms = std::sqrt(rms / double(ref.size()));
            for (const auto& [name, t] : tables) {
                INFO(name << " " << dtype_name(mix.w13) << "/" << dtype_name(mix.w2) << " m " << m);
                std::vector<float> y(size_t(m) * dim, NAN), scratch(2 * size_t(m) * hidden);
                expert_ffn(*t, y.data(), x.data(), w1.view, w3.view, w2.view, m, scratch.data(), pool);
                // The same with three matmuls and a scalar silu.
                std::vector<float> a(size_t(m) * hidden), b(size_t(m) * hidden), y2(size_t(m) * dim);
                matmul(*t, a.data(), x.data(), w1.view, m, pool);
                matmul(*t, b.data(), x.data(), w3.view, m, pool);
                for (size_t e = 0; e < a.size(); e++) a[e] = a[e] / (1.0f + std::exp(-a[e])) * b[e];
                matmul(*t, y2.data(), a.data(), w2.view, m, pool);
                double err = 0, err2 = 0;
                for (size_t e = 0; e < y.size(); e++) {
                    REQUIRE(std::isfinite(y[e]));
                    err += (y[e] - ref[e]) * (y[e] - ref[e]);
                    err2 = std::max(err2, std::fabs(double(y[e]) - y2[e]));
                }
                // int8 activations of x and of the heavy-tailed hidden
                // state: measured up to 2.0 % of the output's rms.
                err = std::sqrt(err / double(y.size()));
                CHECK(err <= 0.025 * rms);
                CHECK(err2 <= 0.01 * rms);
            }
        }
    }
}

TEST_CASE("quant kernels: expert_ffn with biases and gpt-oss's clamped gate equals the reference", "[kernels][quant]") {
    // gpt-oss's experts (MXFP4, biases on gate, up and down, the clamped
    // SwiGLU) on every path: rows (1, 3 tokens) and packed (64). A limit of
    // 0.5 so the clamps act on a good share of the gate and up values.
    std::mt19937 rng(25);
    ThreadPool pool(2);
    std::vector<NamedTable> tables = tables_under_test();
    tables.insert(tables.begin(), {"scalar", &kernel_table_scalar()});
    const FfnActivation act{FfnActivation::Kind::CLAMPED_SWIGLU, 1.702f, 0.5f};
    for (DType type : {DType::MXFP4, DType::BF16, DType::Q8_0_R8}) {
        const int dim = 256, hidden = 512;
        TestWeight w1 = make_weight(rng, type, hidden, dim), w3 = make_weight(rng, type, hidden, dim);
        TestWeight w2 = make_weight(rng, type, dim, hidden);
        const std::vector<float> b1 = rand_normal(rng, hidden, 0.3f), b3 = rand_normal(rng, hidden, 0.3f);
        const std::vector<float> b2 = rand_normal(rng, dim, 0.3f);
        const FfnSpec spec{act, b1.data(), b3.data(), b2.data()};
        for (int m : {1, 3, 64}) {
            std::vector<float> x = rand_normal(rng, size_t(m) * dim, 4.0f);
            // The reference in double from Hugging Face's GptOssExperts.
            std::vector<double> ref(size_t(m) * dim);
            double rms = 0;
            int clamped = 0;
            for (int i = 0; i < m; i++) {
                std::vector<double> h(static_cast<size_t>(hidden));
                for (int r = 0; r < hidden; r++) {
                    double gate = b1[size_t(r)], up = b3[size_t(r)];
                    for (int j = 0; j < dim; j++) {
                        gate += double(w1.values[size_t(r) * dim + j]) * x[size_t(i) * dim + j];
                        up += double(w3.values[size_t(r) * dim + j]) * x[size_t(i) * dim + j];
                    }
                    clamped += gate > 0.5 || std::fabs(up) > 0.5;
                    gate = std::min(gate, 0.5);
                    up = std::clamp(up, -0.5, 0.5);
                    h[size_t(r)] = gate / (1 + std::exp(-1.702 * gate)) * (up + 1);
                }
                for (int r = 0; r < dim; r++) {
                    double s = b2[size_t(r)];
                    for (int j = 0; j < hidden; j++) s += double(w2.values[size_t(r) * hidden + j]) * h[size_t(j)];
                    ref[size_t(i) * dim + r] = s;
                    rms += s * s;
                }
            }
            REQUIRE(clamped > m * hidden / 4);
            rms = std::sqrt(rms / double(ref.size()));
            for (const auto& [name, t] : tables) {
                INFO(name << " " << dtype_name(type) << " m " << m);
                std::vector<float> y(size_t(m) * dim, NAN), scratch(2 * size_t(m) * hidden);
                expert_ffn(*t, y.data(), x.data(), w1.view, w3.view, w2.view, m, scratch.data(), pool, spec);
                double err = 0;
                for (size_t e = 0; e < y.size(); e++) {
                    REQUIRE(std::isfinite(y[e]));
                    err += (y[e] - ref[e]) * (y[e] - ref[e]);
                }
                err = std::sqrt(err / double(y.size()));
                CHECK(err <= 0.02 * rms);
                // Without the spec it is another function.
                std::vector<float> plain(y.size());
                expert_ffn(*t, plain.data(), x.data(), w1.view, w3.view, w2.view, m, scratch.data(), pool);
                double diff = 0;
                for (size_t e = 0; e < y.size(); e++) diff = std::max(diff, std::fabs(double(plain[e]) - y[e]));
                CHECK(diff > 0.1 * rms);
            }
        }
    }
}
