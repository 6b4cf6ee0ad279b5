// Every CUDA kernel of gpu_kernels against its CPU twin in cpu_kernels
// (label gpu), on random data and shapes that are not multiples of 8, 16
// or 32. Skipped where no CUDA device exists.
//
// Tolerances: conversions, lookups, gathers and KV writes are exact; the
// element-wise math (RMSNorm, RoPE, SiLU, softmax) agrees to fp32 rounding
// (REL_FP32, relative to the row's largest value); the GEMMs are compared
// with the CPU fed the same bf16-rounded inputs, so only the summation order
// differs (REL_GEMM); the expert FFN also rounds its inner activations to
// bf16 on the device where the CPU keeps fp32 (REL_FFN). Block-quantized
// weights: dequantization and quantized lookups agree with dequantize_row
// to one bf16 / fp32 rounding (the device may fuse a multiply-add); the
// GEMV (fp32 throughout) and the dequantized GEMM (x and W in bf16) are
// compared with fp32 / bf16-rounded CPU products, so again only the
// summation order differs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "cpu_kernels/kernels.h"
#include "cpu_kernels/quant.h"
#include "engine/model/model_config.h"
#include "gpu_kernels/gpu_kernels.h"
#include "gpu_kernels/gpu_math.h"
#include "gpu_kernels/gpu_runtime.h"
#include "gpu_support.h"

namespace {

constexpr double REL_FP32 = 2e-5;
constexpr double REL_GEMM = 1e-4;
constexpr double REL_FFN = 2e-2;

std::mt19937 rng(12345);

std::vector<float> random_floats(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

std::vector<bf16> random_bf16(size_t n, float scale = 0.05f) {
    std::vector<float> f = random_floats(n, scale);
    std::vector<bf16> v(n);
    for (size_t i = 0; i < n; i++) v[i] = f32_to_bf16(f[i]);
    return v;
}

template <class T>
GpuBuffer upload(const std::vector<T>& v) {
    GpuBuffer b(std::max<size_t>(1, v.size() * sizeof(T)));
    gpu_copy_h2d(b.data(), v.data(), v.size() * sizeof(T), nullptr);
    gpu_synchronize();
    return b;
}

template <class T>
std::vector<T> download(const GpuBuffer& b, size_t n) {
    std::vector<T> v(n);
    gpu_synchronize();
    gpu_copy_d2h(v.data(), b.data(), n * sizeof(T), nullptr);
    gpu_synchronize();
    return v;
}

// max |got - want| <= rel * (1 + max |want|).
void require_close(const std::vector<float>& got, const std::vector<float>& want, double rel) {
    REQUIRE(got.size() == want.size());
    double scale = 0, worst = 0;
    for (float w : want) scale = std::max(scale, std::fabs(double(w)));
    for (size_t i = 0; i < got.size(); i++) {
        REQUIRE(std::isfinite(got[i]));
        worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    }
    INFO("max |gpu - cpu| = " << worst << ", allowed " << rel * (1 + scale));
    REQUIRE(worst <= rel * (1 + scale));
}

std::vector<float> bf16_rounded(const std::vector<float>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); i++) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
    return r;
}

}  // namespace

TEST_CASE("conversion, embedding, gather, add and kv writes are exact", "[gpu]") {
    GPU_TEST_OR_SKIP();
    for (int n : {1, 3, 1001}) {
        std::vector<float> x = random_floats(size_t(n) * 7);
        GpuBuffer dx = upload(x), dout(x.size() * sizeof(bf16));
        gpu_f32_to_bf16(dout.as<bf16>(), dx.as<float>(), long(x.size()), nullptr);
        std::vector<bf16> got = download<bf16>(dout, x.size());
        for (size_t i = 0; i < x.size(); i++) REQUIRE(got[i] == f32_to_bf16(x[i]));
    }
    const int vocab = 37, dim = 72, n = 5;
    std::vector<bf16> table = random_bf16(size_t(vocab) * dim, 1.0f);
    std::vector<int> tokens{3, 0, 36, 3, 17};
    GpuBuffer dtable = upload(table), dtokens = upload(tokens), dx(size_t(n) * dim * sizeof(float));
    gpu_embed(dx.as<float>(), dtokens.as<int>(), weight_view(DType::BF16, dtable.data(), vocab, dim), n, nullptr);
    std::vector<float> emb = download<float>(dx, size_t(n) * dim);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < dim; j++)
            REQUIRE(emb[size_t(i) * dim + j] == bf16_to_f32(table[size_t(tokens[i]) * dim + j]));

    std::vector<int> src{4, 4, 0, 2};
    GpuBuffer dsrc = upload(src), dg(src.size() * dim * sizeof(float));
    gpu_gather_rows(dg.as<float>(), dx.as<float>(), dsrc.as<int>(), int(src.size()), dim, nullptr);
    std::vector<float> g = download<float>(dg, src.size() * dim);
    for (size_t i = 0; i < src.size(); i++)
        for (int j = 0; j < dim; j++) REQUIRE(g[i * dim + j] == emb[size_t(src[i]) * dim + j]);

    std::vector<float> a = random_floats(1001), b = random_floats(1001);
    GpuBuffer da = upload(a), db = upload(b);
    gpu_add(da.as<float>(), db.as<float>(), 1001, nullptr);
    std::vector<float> sum = download<float>(da, 1001);
    for (int i = 0; i < 1001; i++) REQUIRE(sum[i] == a[i] + b[i]);

    // KV writes: 3 rows into scattered row bases of one buffer.
    const int kv_dim = 24, rows = 3;
    const long k_off = 5, v_off = 200;
    GpuBuffer cache(1024 * sizeof(float));
    gpu_memset(cache.data(), 0, 1024 * sizeof(float), nullptr);
    std::vector<long> base_at{300, 0, 600};
    std::vector<float*> bases;
    for (long at : base_at) bases.push_back(cache.as<float>() + at);
    std::vector<float> k = random_floats(size_t(rows) * kv_dim), v = random_floats(size_t(rows) * kv_dim);
    GpuBuffer dk = upload(k), dv = upload(v), dbases = upload(bases);
    gpu_kv_store(dk.as<float>(), dv.as<float>(), dbases.as<float*>(), k_off, v_off, rows, kv_dim, nullptr);
    std::vector<float> c = download<float>(cache, 1024);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < kv_dim; j++) {
            REQUIRE(c[size_t(base_at[r] + k_off + j)] == k[size_t(r) * kv_dim + j]);
            REQUIRE(c[size_t(base_at[r] + v_off + j)] == v[size_t(r) * kv_dim + j]);
        }
}

TEST_CASE("rmsnorm, rope and silu_mul match cpu_kernels", "[gpu]") {
    GPU_TEST_OR_SKIP();
    for (int rows : {1, 3, 17})
        for (int dim : {72, 1000, 4096}) {
            INFO(rows << " rows of " << dim);
            std::vector<float> x = random_floats(size_t(rows) * dim, 3.0f), w = random_floats(dim);
            std::vector<float> want(x.size());
            for (int r = 0; r < rows; r++)
                rmsnorm(want.data() + size_t(r) * dim, x.data() + size_t(r) * dim, w.data(), dim, 1e-5f);
            GpuBuffer dx = upload(x), dw = upload(w);
            gpu_rmsnorm(dx.as<float>(), dx.as<float>(), dw.as<float>(), rows, dim, 1e-5f, nullptr);  // in place
            require_close(download<float>(dx, x.size()), want, REL_FP32);
        }
    // Plain frequencies; gpt-oss's YaRN (factor 32 over 4096, attention factor 1.35).
    ModelConfig yarn;
    yarn.head_dim = 64;
    yarn.rope_theta = 150000.0f;
    yarn.rope_scaling = {RopeScaling::Type::YARN, 32.0f, 4096, 32.0f, 1.0f, 0.1f * std::log(32.0f) + 1.0f, false};
    for (auto [head_dim, scaled] : {std::pair{72, false}, std::pair{128, false}, std::pair{64, true}}) {
        INFO("head_dim " << head_dim << (scaled ? " YaRN" : ""));
        const int rows = 5, n_heads = 3;
        std::vector<int> pos{0, 1, 17, 4095, 31999};
        std::vector<double> freq(static_cast<size_t>(head_dim / 2));
        for (int i = 0; i < head_dim / 2; i++) freq[size_t(i)] = std::pow(1e6, -2.0 * i / head_dim);
        if (scaled) freq = rope_inv_freq(yarn);
        const float mscale = scaled ? rope_attention_factor(yarn) : 1.0f;
        std::vector<float> x = random_floats(size_t(rows) * n_heads * head_dim), want = x;
        for (int r = 0; r < rows; r++)
            rope_rotate_half(want.data() + size_t(r) * n_heads * head_dim, n_heads, head_dim, pos[r], freq.data(),
                             mscale);
        GpuBuffer dx = upload(x), dpos = upload(pos), dfreq = upload(freq);
        gpu_rope_rotate_half(dx.as<float>(), dpos.as<int>(), rows, n_heads, head_dim, head_dim, dfreq.as<double>(),
                             mscale, nullptr);
        require_close(download<float>(dx, x.size()), want, REL_FP32);
    }
    {
        // Partial rotary (Qwen3.5: a quarter of each head): the first
        // rot_dim dims of each head as a head of their own, the rest kept.
        const int rows = 5, n_heads = 3, head_dim = 256, rot = 64;
        std::vector<int> pos{0, 1, 17, 4095, 31999};
        std::vector<double> freq(static_cast<size_t>(rot / 2));
        for (int i = 0; i < rot / 2; i++) freq[size_t(i)] = std::pow(1e7, -2.0 * i / rot);
        std::vector<float> x = random_floats(size_t(rows) * n_heads * head_dim), want = x;
        for (int r = 0; r < rows; r++)
            for (int h = 0; h < n_heads; h++)
                rope_rotate_half(want.data() + (size_t(r) * n_heads + h) * head_dim, 1, rot, pos[r], freq.data());
        GpuBuffer dx = upload(x), dpos = upload(pos), dfreq = upload(freq);
        gpu_rope_rotate_half(dx.as<float>(), dpos.as<int>(), rows, n_heads, head_dim, rot, dfreq.as<double>(), 1.0f,
                             nullptr);
        require_close(download<float>(dx, x.size()), want, REL_FP32);
    }
    std::vector<float> a = random_floats(1003, 4.0f), b = random_floats(1003), want = a;
    silu_mul(want.data(), b.data(), 1003);
    GpuBuffer da = upload(a), db = upload(b);
    gpu_silu_mul(da.as<float>(), db.as<float>(), 1003, nullptr);
    require_close(download<float>(da, 1003), want, REL_FP32);
}

TEST_CASE("routing and the combine match the CPU's MoE layer", "[gpu]") {
    GPU_TEST_OR_SKIP();
    for (int n_experts : {8, 60})
        for (int k : {1, 2, 4}) {
            const int rows = 300;
            INFO(n_experts << " experts, top " << k);
            std::vector<float> logits = random_floats(size_t(rows) * n_experts, 2.0f);
            GpuBuffer dl = upload(logits), de(size_t(rows) * k * sizeof(int)), dw(size_t(rows) * k * sizeof(float));
            for (bool renorm : {true, false}) {
                gpu_route_topk(de.as<int>(), dw.as<float>(), dl.as<float>(), rows, n_experts, k, renorm, nullptr);
                std::vector<int> e = download<int>(de, size_t(rows) * k);
                std::vector<float> w = download<float>(dw, size_t(rows) * k);
                for (int r = 0; r < rows; r++) {
                    std::vector<float> p(logits.begin() + size_t(r) * n_experts,
                                         logits.begin() + size_t(r + 1) * n_experts);
                    softmax(p.data(), n_experts);
                    std::vector<int> want(k);
                    top_k(want.data(), p.data(), n_experts, k);
                    float sum = 0;
                    for (int j = 0; j < k; j++) sum += p[want[j]];
                    for (int j = 0; j < k; j++) {
                        REQUIRE(e[size_t(r) * k + j] == want[j]);
                        float wj = renorm ? p[want[j]] / sum : p[want[j]];
                        REQUIRE(w[size_t(r) * k + j] == Approx(wj).epsilon(1e-5));
                    }
                }
            }
        }
    const int rows = 17, k = 2, dim = 1000, n_slots = rows * k;
    std::vector<float> y = random_floats(size_t(n_slots) * dim), weights = random_floats(size_t(rows) * k);
    std::vector<int> slots(static_cast<size_t>(n_slots));
    for (int i = 0; i < n_slots; i++) slots[size_t(i)] = (i * 7) % n_slots;
    std::vector<float> want(size_t(rows) * dim, 0.0f);
    for (int i = 0; i < rows; i++)
        for (int r = 0; r < k; r++)
            for (int d = 0; d < dim; d++)
                want[size_t(i) * dim + d] += weights[size_t(i) * k + r] * y[size_t(slots[size_t(i) * k + r]) * dim + d];
    GpuBuffer dy = upload(y), dws = upload(weights), ds = upload(slots), dout(want.size() * sizeof(float));
    gpu_combine(dout.as<float>(), dy.as<float>(), ds.as<int>(), dws.as<float>(), rows, k, dim, nullptr);
    require_close(download<float>(dout, want.size()), want, REL_FP32);
}

TEST_CASE("paged attention matches cpu_kernels attention_paged on decode, prefill and beam rows", "[gpu]") {
    GPU_TEST_OR_SKIP();
    const std::vector<float> sinks = random_floats(8);
    GpuBuffer dsinks = upload(sinks);
    // Plain, and gpt-oss's sliding window with sinks (a window shorter than most rows).
    for (auto [head_dim, window, sinked] : {std::tuple{72, 0, false}, std::tuple{128, 0, false}, std::tuple{64, 40, true}}) {
        const int n_heads = 8, n_kv_heads = 2, kv_dim = n_kv_heads * head_dim, block = 16, n_blocks = 40;
        INFO("head_dim " << head_dim << " window " << window << (sinked ? " with sinks" : ""));
        const AttnMask mask{window, sinked ? sinks.data() : nullptr};
        // One pool of blocks, [K | V] halves of block * kv_dim rows each.
        const long part = long(block) * kv_dim;
        std::vector<float> pool = random_floats(size_t(n_blocks) * 2 * part);
        GpuBuffer dpool = upload(pool);
        // Three sequences over scattered, shared blocks; rows of each length.
        std::vector<std::vector<int>> tables{
            {5, 6, 7, 30, 2}, {5, 6, 11}, {39, 0, 1, 3, 4, 8, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}};
        std::vector<std::pair<int, int>> rows_spec{{0, 1},   {0, 70}, {1, 33},
                                                   {2, 300}, {2, 17}, {1, 48}};  // (seq, n_pos)
        std::vector<const float*> host_blocks, dev_blocks;
        std::vector<int> start(tables.size());
        for (size_t s = 0; s < tables.size(); s++) {
            start[s] = int(host_blocks.size());
            for (int b : tables[s]) {
                host_blocks.push_back(pool.data() + size_t(b) * 2 * part);
                dev_blocks.push_back(dpool.as<float>() + size_t(b) * 2 * part);
            }
        }
        const int rows = int(rows_spec.size()), q_dim = n_heads * head_dim;
        std::vector<float> q = random_floats(size_t(rows) * q_dim), want(size_t(rows) * q_dim);
        std::vector<int> block_start, n_pos;
        std::vector<float> scratch(size_t(n_heads / n_kv_heads) * 300);
        for (int r = 0; r < rows; r++) {
            auto [seq, len] = rows_spec[size_t(r)];
            block_start.push_back(start[size_t(seq)]);
            n_pos.push_back(len);
            attention_paged(want.data() + size_t(r) * q_dim, q.data() + size_t(r) * q_dim,
                            host_blocks.data() + start[size_t(seq)], 0, part, block, len, n_heads, n_kv_heads, head_dim,
                            kv_dim, scratch.data(), mask);
        }
        GpuBuffer dq = upload(q), dout(want.size() * sizeof(float)), dblocks = upload(dev_blocks),
                  dstart = upload(block_start), dpos = upload(n_pos);
        gpu_attention_paged(dout.as<float>(), dq.as<float>(), dblocks.as<const float*>(), dstart.as<int>(),
                            dpos.as<int>(), 0, part, block, rows, n_heads, n_kv_heads, head_dim, kv_dim, window,
                            sinked ? dsinks.as<float>() : nullptr, nullptr);
        require_close(download<float>(dout, want.size()), want, REL_FP32 * 10);
    }
}

TEST_CASE("cuBLAS GEMMs and the expert FFN match the CPU", "[gpu]") {
    GPU_TEST_OR_SKIP();
    GpuStreamOwner stream;
    GpuBlas blas(stream.get());
    ThreadPool pool(2);
    for (int m : {1, 3, 17, 300})
        for (auto [n, k] : {std::pair{1000, 72}, std::pair{72, 1000}, std::pair{4099, 513}}) {
            INFO("m " << m << ", n " << n << ", k " << k);
            std::vector<float> x = random_floats(size_t(m) * k);
            std::vector<bf16> w = random_bf16(size_t(n) * k);
            std::vector<float> xr = bf16_rounded(x), want(size_t(m) * n);
            matmul_bf16(want.data(), xr.data(), w.data(), m, n, k, pool);
            GpuBuffer dx = upload(x), dw = upload(w), dxb(x.size() * sizeof(bf16)), dy(want.size() * sizeof(float));
            gpu_matmul(blas, dy.as<float>(), dx.as<float>(), weight_view(DType::BF16, dw.data(), n, k), m,
                       {dxb.as<bf16>(), nullptr, 0});
            stream.synchronize();
            require_close(download<float>(dy, want.size()), want, REL_GEMM);
        }
    // SwiGLU, and gpt-oss's clamped gate with biases (a limit of 0.5, so the clamps act).
    for (bool oss : {false, true})
        for (int m : {1, 5, 33}) {
            INFO("m " << m << (oss ? ", gpt-oss's gate and biases" : ""));
            const int dim = 200, hidden = 344;
            std::vector<float> x = random_floats(size_t(m) * dim);
            std::vector<bf16> w1 = random_bf16(size_t(hidden) * dim), w3 = random_bf16(size_t(hidden) * dim),
                              w2 = random_bf16(size_t(dim) * hidden);
            const std::vector<float> b1 = random_floats(hidden), b3 = random_floats(hidden), b2 = random_floats(dim);
            GpuBuffer db1 = upload(b1), db3 = upload(b3), db2 = upload(b2);
            const FfnActivation act{FfnActivation::Kind::CLAMPED_SWIGLU, 1.702f, 0.5f};
            const FfnSpec host = oss ? FfnSpec{act, b1.data(), b3.data(), b2.data()} : FfnSpec{};
            const FfnSpec dev = oss ? FfnSpec{act, db1.as<float>(), db3.as<float>(), db2.as<float>()} : FfnSpec{};
            std::vector<float> want(size_t(m) * dim), scratch(size_t(2) * m * hidden);
            expert_ffn_bf16(want.data(), x.data(), w1.data(), w3.data(), w2.data(), m, dim, hidden, scratch.data(),
                            pool, host);
            GpuBuffer dx = upload(x), d1 = upload(w1), d3 = upload(w3), d2 = upload(w2),
                      dy(want.size() * sizeof(float)), sf(size_t(2) * m * hidden * sizeof(float)),
                      sb(size_t(m) * hidden * sizeof(bf16));
            gpu_expert_ffn(blas, dy.as<float>(), dx.as<float>(), weight_view(DType::BF16, d1.data(), hidden, dim),
                           weight_view(DType::BF16, d3.data(), hidden, dim),
                           weight_view(DType::BF16, d2.data(), dim, hidden), m, sf.as<float>(),
                           {sb.as<bf16>(), nullptr, 0}, dev);
            stream.synchronize();
            require_close(download<float>(dy, want.size()), want, REL_FFN);
        }
}

namespace {

// A (rows, cols) matrix of `type` from random values, and its values as the
// CPU's dequantize_row reads them back.
struct QuantMatrix {
    std::vector<uint8_t> bytes;
    std::vector<float> values;
};

QuantMatrix random_quant(DType type, int rows, int cols) {
    const size_t row_bytes = *dtype_row_bytes(type, cols);
    const DType plain = dtype_plain(type);  // an _R8 type: rows of its plain type, then interleaved
    QuantMatrix q{std::vector<uint8_t>(row_bytes * rows), std::vector<float>(size_t(rows) * cols)};
    std::vector<float> src = random_floats(size_t(rows) * cols, 0.05f);
    for (int r = 0; r < rows; r++) {
        quantize_row(plain, src.data() + size_t(r) * cols, q.bytes.data() + r * row_bytes, cols);
        dequantize_row(plain, q.bytes.data() + r * row_bytes, q.values.data() + size_t(r) * cols, cols);
    }
    if (plain != type) {
        const std::vector<uint8_t> rows_plain = q.bytes;
        quant_repack_r8(type, rows_plain.data(), q.bytes.data(), rows, row_bytes);
    }
    return q;
}

// y (m, n) = x (m, k) @ W^T in double, W (n, k) fp32.
std::vector<float> product(const std::vector<float>& x, const std::vector<float>& w, int m, int n, int k) {
    std::vector<float> y(size_t(m) * n);
    for (int i = 0; i < m; i++)
        for (int r = 0; r < n; r++) {
            double s = 0;
            for (int j = 0; j < k; j++) s += double(x[size_t(i) * k + j]) * w[size_t(r) * k + j];
            y[size_t(i) * n + r] = float(s);
        }
    return y;
}

}  // namespace

TEST_CASE("quantized weights: dequantization, lookups, GEMV, GEMM and the expert FFN match the CPU", "[gpu]") {
    GPU_TEST_OR_SKIP();
    GpuStreamOwner stream;
    GpuBlas blas(stream.get());
    ThreadPool pool(2);
    // Whole blocks of every type; the GEMV stages x 1024 columns at a time:
    // one short chunk, and two whole chunks and a short one.
    for (const int k : {768, 2304})
        for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0_R8,
                           DType::Q4_K_R8, DType::Q6_K_R8, DType::MXFP4}) {
            INFO(dtype_name(type) << ", k " << k);
            // n: no multiple of the 8 rows a GEMV block takes, except where rows go in groups of 8.
            const int n = dtype_row_group(type) == 1 ? 300 : 304;
            QuantMatrix w = random_quant(type, n, k);
            GpuBuffer dw = upload(w.bytes);
            const WeightView view = weight_view(type, dw.data(), n, k);

            // Dequantization of rows [7, 300) and a lookup of four rows.
            GpuBuffer db(size_t(n - 7) * k * sizeof(bf16));
            gpu_dequant_bf16(db.as<bf16>(), view, 7, n, nullptr);
            std::vector<bf16> got = download<bf16>(db, size_t(n - 7) * k);
            for (size_t i = 0; i < got.size(); i++) {
                const float want = w.values[size_t(7) * k + i];
                REQUIRE(std::fabs(bf16_to_f32(got[i]) - want) <= std::ldexp(std::fabs(want), -7) + 1e-6f);
            }
            std::vector<int> tokens{299, 0, 5, 299};
            GpuBuffer dtokens = upload(tokens), demb(tokens.size() * k * sizeof(float));
            gpu_embed(demb.as<float>(), dtokens.as<int>(), view, int(tokens.size()), nullptr);
            std::vector<float> emb = download<float>(demb, tokens.size() * k), want_emb;
            for (int t : tokens)
                want_emb.insert(want_emb.end(), w.values.begin() + size_t(t) * k, w.values.begin() + size_t(t + 1) * k);
            require_close(emb, want_emb, REL_FP32);

            // GEMV below GPU_QUANT_GEMV_MAX_M rows, dequantized pieces (of 70
            // rows, so the last is short) above.
            GpuBuffer dpiece(size_t(70) * k * sizeof(bf16));
            for (int m : {1, 3, GPU_QUANT_GEMV_MAX_M, GPU_QUANT_GEMV_MAX_M + 1, 40}) {
                INFO("m " << m);
                std::vector<float> x = random_floats(size_t(m) * k);
                const bool gemv = m <= GPU_QUANT_GEMV_MAX_M;
                std::vector<float> want =
                    gemv ? product(x, w.values, m, n, k) : product(bf16_rounded(x), bf16_rounded(w.values), m, n, k);
                GpuBuffer dx = upload(x), dxb(x.size() * sizeof(bf16)), dy(want.size() * sizeof(float));
                gpu_matmul(blas, dy.as<float>(), dx.as<float>(), view, m,
                           {dxb.as<bf16>(), dpiece.as<bf16>(), size_t(70) * k});
                stream.synchronize();
                require_close(download<float>(dy, want.size()), want, REL_GEMM);
            }
        }
    // A Q4_K_M expert as moe-server holds it: Q4_K_R8 gate and up, Q6_K_R8 down.
    const int dim = 256, hidden = 512;
    QuantMatrix w1 = random_quant(DType::Q4_K_R8, hidden, dim), w3 = random_quant(DType::Q4_K_R8, hidden, dim),
                w2 = random_quant(DType::Q6_K_R8, dim, hidden);
    GpuBuffer d1 = upload(w1.bytes), d3 = upload(w3.bytes), d2 = upload(w2.bytes);
    GpuBuffer dpiece(size_t(100) * hidden * sizeof(bf16));
    for (int m : {1, 5, 33}) {
        INFO("expert, m " << m);
        std::vector<float> x = random_floats(size_t(m) * dim), want(size_t(m) * dim), scratch(size_t(2) * m * hidden);
        expert_ffn(want.data(), x.data(), weight_view(DType::F32, w1.values.data(), hidden, dim),
                   weight_view(DType::F32, w3.values.data(), hidden, dim),
                   weight_view(DType::F32, w2.values.data(), dim, hidden), m, scratch.data(), pool);
        GpuBuffer dx = upload(x), dy(want.size() * sizeof(float)), sf(size_t(2) * m * hidden * sizeof(float)),
                  sb(size_t(m) * hidden * sizeof(bf16));
        gpu_expert_ffn(blas, dy.as<float>(), dx.as<float>(), weight_view(DType::Q4_K_R8, d1.data(), hidden, dim),
                       weight_view(DType::Q4_K_R8, d3.data(), hidden, dim),
                       weight_view(DType::Q6_K_R8, d2.data(), dim, hidden), m, sf.as<float>(),
                       {sb.as<bf16>(), dpiece.as<bf16>(), size_t(100) * hidden});
        stream.synchronize();
        require_close(download<float>(dy, want.size()), want, m <= GPU_QUANT_GEMV_MAX_M ? REL_GEMM * 10 : REL_FFN);
    }
}

TEST_CASE("bias rows and the shared expert's sigmoid scaling match the CPU backend's arithmetic", "[gpu]") {
    GPU_TEST_OR_SKIP();
    for (auto [rows, width] : {std::pair{1, 72}, std::pair{5, 1000}, std::pair{17, 4096}}) {
        INFO(rows << " rows of " << width);
        std::vector<float> x = random_floats(size_t(rows) * width, 3.0f), bias = random_floats(width);
        std::vector<float> want = x;
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < width; j++) want[size_t(r) * width + j] += bias[j];
        GpuBuffer dx = upload(x), dbias = upload(bias);
        gpu_add_bias(dx.as<float>(), dbias.as<float>(), rows, width, nullptr);
        REQUIRE(download<float>(dx, x.size()) == want);  // one fp32 add per element: exact

        std::vector<float> gate = random_floats(size_t(rows), 8.0f);
        std::vector<float> scaled = x;
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < width; j++) scaled[size_t(r) * width + j] *= gm_sigmoid(gate[r]);
        GpuBuffer dy = upload(x), dgate = upload(gate);
        gpu_sigmoid_scale(dy.as<float>(), dgate.as<float>(), rows, width, nullptr);
        require_close(download<float>(dy, x.size()), scaled, REL_FP32);
    }
}

TEST_CASE("the gated attention's head split and sigmoid gate match the CPU backend's arithmetic", "[gpu]") {
    GPU_TEST_OR_SKIP();
    const int rows = 7, n_heads = 3, head_dim = 72;
    const size_t half = size_t(rows) * n_heads * head_dim;
    std::vector<float> x = random_floats(2 * half, 2.0f), want_a(half), want_b(half);
    for (size_t r = 0; r < size_t(rows) * n_heads; r++)
        for (int d = 0; d < head_dim; d++) {
            want_a[r * head_dim + d] = x[2 * r * head_dim + d];
            want_b[r * head_dim + d] = x[(2 * r + 1) * head_dim + d];
        }
    GpuBuffer dx = upload(x), da(half * sizeof(float)), db(half * sizeof(float));
    gpu_split_heads(da.as<float>(), db.as<float>(), dx.as<float>(), rows, n_heads, head_dim, nullptr);
    REQUIRE(download<float>(da, half) == want_a);  // copies: exact
    REQUIRE(download<float>(db, half) == want_b);
    std::vector<float> gated = want_a;
    for (size_t i = 0; i < half; i++) gated[i] *= gm_sigmoid(want_b[i]);
    gpu_sigmoid_mul(da.as<float>(), db.as<float>(), long(half), nullptr);
    require_close(download<float>(da, half), gated, REL_FP32);
}

TEST_CASE("the Gated DeltaNet's conv, norms, gates, delta rule and gated norm match the CPU's", "[gpu]") {
    // Three sequences' runs of 5, 1 and 7 entries, each state not zero, the
    // value heads grouped and tiled over the key heads; the CPU twin runs the
    // same gpu_math.h functions and cpu_kernels' scalar delta_rule_step,
    // entry by entry, as the CPU backend's arithmetic.
    GPU_TEST_OR_SKIP();
    for (bool tiled : {false, true}) {
        INFO("tiled " << tiled);
        const int nk = 2, nv = 4, dk = 32, dv = 48, K = 4;
        const int key_dim = nk * dk, value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim;
        const int runs_n[3] = {5, 1, 7}, n = 13;
        const size_t conv_floats = size_t(K - 1) * conv_dim, state_floats = size_t(nv) * dk * dv;
        std::vector<float> qkv = random_floats(size_t(n) * conv_dim), z = random_floats(size_t(n) * value_dim),
                           b = random_floats(size_t(n) * nv), a = random_floats(size_t(n) * nv),
                           taps = random_floats(size_t(conv_dim) * K, 0.5f), dt_bias = random_floats(nv),
                           norm = random_floats(dv), neg_exp_a(nv);
        for (int h = 0; h < nv; h++) neg_exp_a[h] = -std::exp(random_floats(1, 1.0f)[0]);
        std::vector<float> conv = random_floats(3 * conv_floats, 0.5f), state = random_floats(3 * state_floats, 0.1f);

        // The CPU twin.
        std::vector<float> x = qkv, cconv = conv, cstate = state, want(size_t(n) * value_dim);
        for (int r = 0, first = 0; r < 3; first += runs_n[r], r++)
            for (int i = first; i < first + runs_n[r]; i++) {
                float* xi = x.data() + size_t(i) * conv_dim;
                for (int c = 0; c < conv_dim; c++)
                    xi[c] = gm_conv_channel(cconv.data() + r * conv_floats, xi[c], taps.data(), c, conv_dim, K);
                for (int h = 0; h < 2 * nk; h++)
                    gm_l2_normalize(xi + size_t(h) * dk, dk, h < nk ? 1.0f / std::sqrt(float(dk)) : 1.0f);
                for (int h = 0; h < nv; h++) {
                    const int kh = tiled ? h % nk : h / (nv / nk);
                    const size_t e = size_t(i) * nv + h;
                    const float g = neg_exp_a[h] * gm_softplus(a[e] + dt_bias[h]), beta = gm_sigmoid(b[e]);
                    float* o = want.data() + size_t(i) * value_dim + size_t(h) * dv;
                    kernel_table_scalar().delta_rule_step(cstate.data() + r * state_floats + size_t(h) * dk * dv, o,
                                                          xi + size_t(kh) * dk, xi + key_dim + size_t(kh) * dk,
                                                          xi + 2 * key_dim + size_t(h) * dv, g, beta, dk, dv);
                    gm_rmsnorm_gated(o, z.data() + size_t(i) * value_dim + size_t(h) * dv, norm.data(), dv, 1e-6f);
                }
            }

        GpuBuffer dqkv = upload(qkv), dz = upload(z), db = upload(b), da = upload(a), dtaps = upload(taps),
                  ddt = upload(dt_bias), dnorm = upload(norm), dnea = upload(neg_exp_a), dconv = upload(conv),
                  dstate = upload(state), dout(size_t(n) * value_dim * sizeof(float)),
                  dscratch(size_t(2) * n * nv * sizeof(float));
        std::vector<GpuDeltaRun> runs;
        for (int r = 0, first = 0; r < 3; first += runs_n[r], r++)
            runs.push_back(
                {first, runs_n[r], dconv.as<float>() + r * conv_floats, dstate.as<float>() + r * state_floats});
        GpuBuffer druns = upload(runs);
        const GpuDeltaLayer layer{
            conv_dim,         K, nk, nv, dk, dv, tiled, 1e-6f, dtaps.as<float>(), dnea.as<float>(), ddt.as<float>(),
            dnorm.as<float>()};
        gpu_delta_net(dout.as<float>(), dqkv.as<float>(), dz.as<float>(), db.as<float>(), da.as<float>(),
                      druns.as<GpuDeltaRun>(), 3, 0, n, layer, dscratch.as<float>(), nullptr);
        require_close(download<float>(dout, want.size()), want, REL_GEMM);
        require_close(download<float>(dstate, state.size()), cstate, REL_GEMM);
        require_close(download<float>(dconv, conv.size()), cconv, 0.0);  // the window shifts: copies
    }
}
