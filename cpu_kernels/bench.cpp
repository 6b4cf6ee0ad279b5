// Ceilings and kernel benchmarks (see bench.h). Buffers are anonymous memory
// advised for 2 MiB pages, as the engine holds the weights it lays out
// itself (HostArena), so the read ceiling is the machine's best streaming
// read; the weights rotate over copies totalling far more than the
// last-level cache, so every call streams from DRAM. Timings are the best of
// several repetitions.
#include "cpu_kernels/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels/huge_pages.h"
#include "cpu_kernels/kernels.h"
#include "cpu_kernels/quant.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// n elements of T in huge-page-advised memory (huge_pages.h); aborts when the
// kernel refuses (a benchmark has nothing to fall back to).
template <class T>
HugeBuffer alloc_array(size_t n) {
    HugeBuffer b = huge_alloc(n * sizeof(T));
    if (!b) {
        std::fprintf(stderr, "bench: cannot map %zu MiB\n", (n * sizeof(T)) >> 20);
        std::abort();
    }
    return b;
}

// The buffer's bytes as T.
template <class T>
T* as(const HugeBuffer& b) {
    return reinterpret_cast<T*>(b.get());
}

// Weights rotate over copies totalling at least this much (last-level caches
// of desktop and server CPUs stay well below it).
constexpr double ROTATION_BYTES = 1.0e9;
constexpr long CEILING_BUFFER_BYTES = 1L << 30;
constexpr long READ_WINDOW_BYTES = 128L << 20;

// Best time of fn() over at least min_reps calls and about budget_s seconds;
// every call's time into *times when given.
template <class F>
double best_time(F fn, int min_reps, double budget_s, std::vector<double>* times = nullptr) {
    double best = 1e30;
    Clock::time_point start = Clock::now();
    for (int rep = 0; rep < min_reps || seconds_since(start) < budget_s; rep++) {
        Clock::time_point t0 = Clock::now();
        fn(rep);
        const double t = seconds_since(t0);
        best = std::min(best, t);
        if (times) times->push_back(t);
        if (rep > 200) break;
    }
    return best;
}

Isa widest_isa() {
    Isa best = Isa::SCALAR;
    for (Isa isa : bench_supported_isas())
        if (isa != Isa::AVX512BF16) best = isa;
    return best;
}

}  // namespace

std::vector<Isa> bench_supported_isas() {
    std::vector<Isa> out;
    for (Isa isa : {Isa::SCALAR, Isa::AVX2, Isa::AVX512, Isa::AVX512BF16})
        if (isa_supported(isa)) out.push_back(isa);
    return out;
}

double roofline_decode_tok_s(double weight_bytes_per_token, const Ceiling& ceiling) {
    return ceiling.read_gbs * 1e9 / weight_bytes_per_token;
}

Ceiling bench_ceiling(ThreadPool& pool, bool print) {
    Ceiling c{};
    c.threads = pool.size();

    // Read bandwidth: windows of READ_WINDOW_BYTES (the size of a big expert
    // matrix) rotate over the buffer; each thread streams its own contiguous
    // slice of the window. Best window, best of 1, 2 and 4 streams per
    // thread: the bandwidth a kernel can get at its luckiest, so a kernel's
    // ratio stays honest on a machine whose bandwidth varies from moment to
    // moment.
    const KernelTable& t = kernel_table(widest_isa());
    auto buf = alloc_array<unsigned char>(CEILING_BUFFER_BYTES);
    pool.parallel_for(CEILING_BUFFER_BYTES, 4096, [&](long b, long e) {
        for (long i = b; i < e; i += 4096) std::memset(as<unsigned char>(buf) + i, int(i >> 12), 4096);
    });
    long slice = READ_WINDOW_BYTES / pool.size() / 4096 * 4096;
    long windows = CEILING_BUFFER_BYTES / READ_WINDOW_BYTES;
    std::vector<float> sinks(pool.size());
    for (int streams : {1, 2, 4}) {
        std::vector<double> times;
        double read_s = best_time(
            [&](int rep) {
                const unsigned char* base = as<unsigned char>(buf) + (rep % windows) * READ_WINDOW_BYTES;
                pool.run([&](int i) { sinks[i] = t.read_stream(base + i * slice, slice, streams); });
            },
            3 * int(windows), 1.0, &times);
        const double gbs = double(slice) * pool.size() / read_s / 1e9;
        if (gbs > c.read_gbs) {
            // The median window of the same stream count beside the best: how
            // steady this machine's bandwidth was while it was measured.
            std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
            c.read_gbs = gbs;
            c.read_gbs_median = double(slice) * pool.size() / times[times.size() / 2] / 1e9;
        }
    }

    // FMA peak: every thread runs independent FMA chains of the widest ISA.
    long iterations = 2'000'000;
    double flops = 0;
    double fma_s = best_time(
        [&](int) {
            std::vector<double> f(pool.size());
            pool.run([&](int i) { f[i] = t.fma_peak(iterations, &sinks[i]); });
            flops = 0;
            for (double x : f) flops += x;
        },
        5, 0.5);
    c.fma_gflops = flops / fma_s / 1e9;

    // Fork/join: an empty run, averaged over many.
    constexpr int FORKS = 20000;
    double fj_s = best_time(
        [&](int) {
            for (int i = 0; i < FORKS; i++) pool.run([](int) {});
        },
        3, 0.3);
    c.fork_join_us = fj_s / FORKS * 1e6;

    if (print) bench_ceiling_print(c);
    std::fflush(stdout);
    return c;
}

void bench_ceiling_print(const Ceiling& c) {
    std::printf("{\"bench\":\"ceiling\",\"threads\":%d,\"isa\":\"%s\",\"read_gbs\":%.2f,\"read_gbs_median\":%.2f,"
                "\"fma_gflops\":%.1f,\"fork_join_us\":%.2f,\"read_buffer_mb\":%ld,\"read_window_mb\":%ld}\n",
                c.threads, isa_name(widest_isa()), c.read_gbs, c.read_gbs_median, c.fma_gflops, c.fork_join_us,
                CEILING_BUFFER_BYTES >> 20, READ_WINDOW_BYTES >> 20);
}

namespace {

// One weight matrix of an expert shape: n output rows of k inputs.
struct Shape {
    const char* model;
    const char* name;
    int n, k;
};

// Rotating copies of one random matrix set of one type: rows of cols
// elements each, matrices back to back.
struct WeightCopies {
    HugeBuffer data;
    size_t bytes_per_copy = 0;
    int copies = 0;
    DType type = DType::BF16;
    long cols = 0;
    const unsigned char* copy(int i) const { return as<unsigned char>(data) + size_t(i % copies) * bytes_per_copy; }
    // Matrix `first_row / rows` of copy i as a view: rows x cols from row first_row.
    WeightView view(int i, long first_row, long rows) const {
        return weight_view(type, copy(i) + size_t(first_row) * *dtype_row_bytes(type, cols), rows, cols);
    }
};

// bf16 values in [-0.05, 0.05) (xorshift: fast enough for a gigabyte), each
// copy its own; a quantized type: one such matrix quantized, then copied.
WeightCopies make_weights(DType type, long rows, long cols, ThreadPool& pool) {
    WeightCopies w;
    w.type = type;
    w.cols = cols;
    size_t bytes = size_t(rows) * *dtype_row_bytes(type, cols);
    w.bytes_per_copy = (bytes + 4095) / 4096 * 4096;
    w.copies = std::max(2, int(ROTATION_BYTES / double(w.bytes_per_copy)) + 1);
    size_t total = w.bytes_per_copy * w.copies;
    w.data = alloc_array<unsigned char>(total);
    auto fill = [](bf16* out, long b, long e) {  // elements [b, e) to out[0, e - b)
        uint32_t r = uint32_t(b) * 2654435761u + 1;
        for (long i = b; i < e; i++) {
            r ^= r << 13, r ^= r >> 17, r ^= r << 5;
            out[i - b] = f32_to_bf16((float(r >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.1f);
        }
    };
    if (type == DType::BF16) {
        bf16* all = as<bf16>(w.data);
        pool.parallel_for(long(total / 2), 4096, [&](long b, long e) { fill(all + b, b, e); });
        return w;
    }
    // The bf16 rows (each filled from its own start, as the bf16 copies are not), quantized.
    std::vector<bf16> src(size_t(rows) * size_t(cols));
    pool.parallel_for(rows, 1, [&](long r0, long r1) {
        for (long r = r0; r < r1; r++) fill(src.data() + size_t(r) * cols, r * cols, (r + 1) * cols);
    });
    quantize_matrix(type, weight_view(DType::BF16, src.data(), rows, cols), w.data.get(), pool);
    for (int c = 1; c < w.copies; c++)
        std::memcpy(as<unsigned char>(w.data) + size_t(c) * w.bytes_per_copy, w.data.get(), bytes);
    return w;
}

// Best time of a kernel call and, interleaved with it, best time of a plain
// streaming read of as many bytes of another weight copy: the paired read
// bandwidth sees the same moments of a noisy machine as the kernel does.
struct Timing {
    double kernel_s;
    double read_gbs;
};

template <class F>
Timing time_paired(ThreadPool& pool, const WeightCopies& w, size_t bytes, F kernel, double budget_s) {
    const KernelTable& t = kernel_table(widest_isa());
    // (At most one copy: the expert FFN's w2 lives in another set.)
    long slice = long(std::min(bytes, w.bytes_per_copy)) / pool.size() / 4096 * 4096;
    std::vector<float> sinks(pool.size());
    double best_read = 1e30, best = 1e30;
    best_time(
        [&](int rep) {
            // Half the rotation away: not the copy the kernel reads next, so the
            // read does not warm the cache for it.
            const unsigned char* base = reinterpret_cast<const unsigned char*>(w.copy(rep + w.copies / 2));
            Clock::time_point t0 = Clock::now();
            pool.run([&](int i) { sinks[i] = t.read_stream(base + i * slice, slice, rep % 2 ? 4 : 1); });
            best_read = std::min(best_read, seconds_since(t0));
            t0 = Clock::now();
            kernel(rep);
            best = std::min(best, seconds_since(t0));
        },
        4, budget_s);
    return {best, double(slice) * pool.size() / best_read / 1e9};
}

void print_line(const char* kernel, const std::string& type, const Shape& s, Isa isa, int m, const char* path,
                Timing tm, double bytes, double flops, const Ceiling& c) {
    double sec = tm.kernel_s;
    double gbs = bytes / sec / 1e9, gflops = flops / sec / 1e9;
    std::printf(
        "{\"bench\":\"kernels\",\"kernel\":\"%s\",\"type\":\"%s\",\"model\":\"%s\",\"weights\":\"%s\","
        "\"n\":%d,\"k\":%d,"
        "\"isa\":\"%s\",\"m\":%d,\"path\":\"%s\",\"threads\":%d,\"ms\":%.3f,\"weight_gbs\":%.2f,"
        "\"gflops\":%.1f,\"read_gbs_ceiling\":%.2f,\"fma_gflops_ceiling\":%.1f,\"bw_ratio\":%.3f,"
        "\"flop_ratio\":%.3f,\"read_gbs_paired\":%.2f,\"bw_ratio_paired\":%.3f}\n",
        kernel, type.c_str(), s.model, s.name, s.n, s.k, isa_name(isa), m, path, c.threads, sec * 1e3, gbs, gflops,
        c.read_gbs, c.fma_gflops, gbs / c.read_gbs, gflops / c.fma_gflops, tm.read_gbs, gbs / tm.read_gbs);
    std::fflush(stdout);
}

// The matmul path the dispatcher takes for m tokens of weights of `type`
// (with oneDNN allowed); quantized weights on the packed path are
// dequantized to bf16 first.
const char* path_name(const KernelTable& t, DType type, int m) {
    bool quant = dtype_quantized(type);
    if (m < (quant ? t.quant_packed_min_m : t.packed_min_m)) return "rows";
    bool dnnl = t.isa == Isa::AVX512BF16 && m >= 128 && matmul_dnnl_select(true);
    if (quant) return dnnl ? "dequant+onednn" : "dequant+packed";
    return dnnl ? "onednn" : "packed";
}

}  // namespace

void bench_kernels(ThreadPool& pool, const Ceiling& ceiling, const std::vector<Isa>& isas,
                   const std::vector<BenchExpertShape>& shapes, const std::vector<DType>& types) {
    const int MS[] = {1, 2, 4, 8, 16, 64, 256};
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (const BenchExpertShape& expert : shapes) {
        const char* model = expert.label.c_str();
        for (Shape s : {Shape{model, "w1/w3", expert.hidden_dim, expert.dim},
                        Shape{model, "w2", expert.dim, expert.hidden_dim}}) {
            std::vector<float> x(size_t(256) * s.k), y(size_t(256) * s.n);
            for (auto& v : x) v = d(rng);
            for (DType type : types) {
                if (!dtype_row_bytes(type, s.k)) continue;  // k is not whole blocks of the type
                WeightCopies w = make_weights(type, s.n, s.k, pool);
                double bytes = matmul_bytes(w.view(0, 0, s.n));
                for (Isa isa : isas) {
                    const KernelTable& t = kernel_table(isa);
                    for (int m : MS) {
                        if (isa == Isa::SCALAR && m > 2) continue;
                        double flops = matmul_flops(w.view(0, 0, s.n), m);
                        // Large m on the bf16 path: oneDNN (the default where
                        // native) and our own packed kernel, both measured.
                        // (oneDNN is only taken from m = 128; below, both lines are ours.)
                        bool both = isa == Isa::AVX512BF16 && m >= t.packed_min_m && matmul_dnnl_select(true) &&
                                    (type == DType::BF16 || m >= t.quant_packed_min_m);
                        for (bool dnnl : both ? std::vector<bool>{true, false} : std::vector<bool>{true}) {
                            matmul_dnnl_select(dnnl);
                            Timing tm = time_paired(
                                pool, w, size_t(bytes),
                                [&](int rep) { matmul(t, y.data(), x.data(), w.view(rep, 0, s.n), m, pool); },
                                flops > 1e10 ? 0.0 : 0.5);
                            const char* path = path_name(t, type, m);
                            if (both && !dnnl) path = dtype_quantized(type) ? "dequant+packed" : "packed";
                            print_line("matmul", dtype_name(type), s, isa, m, path, tm, bytes, flops, ceiling);
                        }
                        matmul_dnnl_select(true);
                    }
                }
            }
        }
    }
    // Fused expert FFN: w1, w3 (hidden, dim) and w2 (dim, hidden) per copy;
    // each type alone, and Q4_K w1/w3 with a Q6_K w2.
    struct Mix {
        DType w13, w2;
    };
    std::vector<Mix> mixes;
    for (DType type : types) mixes.push_back({type, type});
    auto has = [&](DType x) { return std::find(types.begin(), types.end(), x) != types.end(); };
    if (has(DType::Q4_K) && has(DType::Q6_K)) mixes.push_back({DType::Q4_K, DType::Q6_K});
    if (has(DType::Q4_K_R8) && has(DType::Q6_K_R8)) mixes.push_back({DType::Q4_K_R8, DType::Q6_K_R8});
    for (const BenchExpertShape& expert : shapes) {
        const int dim = expert.dim, hidden = expert.hidden_dim;
        Shape s{expert.label.c_str(), "expert", hidden, dim};
        for (const Mix& mix : mixes) {
            if (!dtype_row_bytes(mix.w13, dim) || !dtype_row_bytes(mix.w2, hidden)) continue;
            WeightCopies w13 = make_weights(mix.w13, 2L * hidden, dim, pool);
            WeightCopies w2 = make_weights(mix.w2, dim, hidden, pool);
            std::string type =
                mix.w13 == mix.w2 ? dtype_name(mix.w13) : std::string(dtype_name(mix.w13)) + "/" + dtype_name(mix.w2);
            double bytes = matmul_bytes(w13.view(0, 0, 2L * hidden)) + matmul_bytes(w2.view(0, 0, dim));
            for (Isa isa : isas) {
                if (isa == Isa::SCALAR) continue;
                const KernelTable& t = kernel_table(isa);
                for (int m : {1, 128}) {
                    std::vector<float> x(size_t(m) * dim, 0.5f), y(size_t(m) * dim), scratch(2 * size_t(m) * hidden);
                    double flops = 3 * matmul_bf16_flops(m, hidden, dim);
                    Timing tm = time_paired(
                        pool, w13, size_t(bytes),
                        [&](int rep) {
                            expert_ffn(t, y.data(), x.data(), w13.view(rep, 0, hidden), w13.view(rep, hidden, hidden),
                                       w2.view(rep, 0, dim), m, scratch.data(), pool);
                        },
                        flops > 1e10 ? 0.0 : 0.5);
                    print_line("expert_ffn", type, s, isa, m, path_name(t, mix.w13, m), tm, bytes, flops, ceiling);
                }
            }
        }
    }
}

void bench_attention(ThreadPool& pool, const Ceiling& ceiling, const std::vector<Isa>& isas,
                     const std::vector<BenchAttentionShape>& shapes) {
    std::mt19937 rng(12);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    constexpr int BLOCK = 16;  // the engine's KV_BLOCK
    const Isa saved = isa_active();
    for (const BenchAttentionShape& sh : shapes) {
        const int hd = sh.head_dim, group = sh.n_heads / sh.n_kv_heads;
        const long q_dim = long(sh.n_heads) * hd, kv_dim = long(sh.n_kv_heads) * hd;
        for (int n : {512, 2048}) {
            // Pages of BLOCK positions, K rows then V rows, in order (one run).
            const int n_blocks = (n + BLOCK - 1) / BLOCK;
            std::vector<float> cache(size_t(n_blocks) * 2 * BLOCK * kv_dim), q(size_t(n) * q_dim),
                out(size_t(n) * q_dim);
            for (auto& e : cache) e = d(rng);
            for (auto& e : q) e = d(rng);
            std::vector<const float*> blocks(static_cast<size_t>(n_blocks));
            for (int b = 0; b < n_blocks; b++) blocks[size_t(b)] = cache.data() + size_t(b) * 2 * BLOCK * kv_dim;
            const long v_offset = long(BLOCK) * kv_dim;
            std::vector<float> scratch(size_t(pool.size()) * group * n);
            const AttnMask mask{sh.window, nullptr};
            double seen = 0;  // positions summed over the queries
            for (int t = 0; t < n; t++) seen += sh.window > 0 ? std::min(t + 1, sh.window) : t + 1;
            const double flops = 4.0 * hd * sh.n_heads * seen;
            for (Isa isa : isas) {
                if (isa == Isa::SCALAR && n > 512) continue;
                isa_select(isa);
                for (bool run : {true, false}) {
                    const double sec = best_time(
                        [&](int) {
                            if (run) {
                                attention_run(out.data(), q_dim, q.data(), q_dim, blocks.data(), 0, v_offset, BLOCK, 0,
                                              n, sh.n_heads, sh.n_kv_heads, hd, int(kv_dim), pool, mask);
                                return;
                            }
                            const long items = long(n) * sh.n_kv_heads;
                            pool.run([&](int thread) {
                                float* s = scratch.data() + size_t(thread) * group * n;
                                for (long it = thread; it < items; it += pool.size()) {
                                    const int i = int(it / sh.n_kv_heads), j = int(it % sh.n_kv_heads);
                                    const long head0 = long(j) * group * hd;
                                    attention_paged(out.data() + i * q_dim + head0, q.data() + i * q_dim + head0,
                                                    blocks.data(), long(j) * hd, v_offset + long(j) * hd, BLOCK, i + 1,
                                                    group, 1, hd, int(kv_dim), s, mask);
                                }
                            });
                        },
                        3, 0.3);
                    const double gflops = flops / sec / 1e9;
                    std::printf(
                        "{\"bench\":\"kernels\",\"kernel\":\"attention\",\"model\":\"%s\",\"heads\":%d,"
                        "\"kv_heads\":%d,\"head_dim\":%d,\"window\":%d,\"isa\":\"%s\",\"tokens\":%d,\"path\":\"%s\","
                        "\"threads\":%d,\"ms\":%.3f,\"tok_s\":%.1f,\"gflops\":%.1f,\"fma_gflops_ceiling\":%.1f,"
                        "\"flop_ratio\":%.3f}\n",
                        sh.label.c_str(), sh.n_heads, sh.n_kv_heads, hd, sh.window, isa_name(isa), n,
                        run ? "run" : "query", ceiling.threads, sec * 1e3, n / sec, gflops, ceiling.fma_gflops,
                        gflops / ceiling.fma_gflops);
                    std::fflush(stdout);
                }
            }
        }
    }
    isa_select(saved);
}

void bench_delta_rule(ThreadPool& pool, const Ceiling& ceiling, const std::vector<Isa>& isas,
                      const std::vector<BenchDeltaShape>& shapes) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (const BenchDeltaShape& sh : shapes) {
        const int nk = sh.n_k_heads, nv = sh.n_v_heads, dk = sh.dk, dv = sh.dv;
        const long key_dim = long(nk) * dk, conv_dim = 2 * key_dim + long(nv) * dv;
        constexpr int N_MAX = 512;
        // Rows as Gated DeltaNet lays them out: q, k (unit vectors) and v of
        // every head side by side; g and beta per value head.
        std::vector<float> x(size_t(N_MAX) * conv_dim), g(size_t(N_MAX) * nv), beta(g.size());
        for (auto& e : x) e = d(rng);
        for (int i = 0; i < N_MAX; i++)
            for (int h = 0; h < 2 * nk; h++) {
                float* v = x.data() + size_t(i) * conv_dim + size_t(h) * dk;
                float ss = 0;
                for (int j = 0; j < dk; j++) ss += v[j] * v[j];
                for (int j = 0; j < dk; j++) v[j] /= std::sqrt(ss);
            }
        for (size_t e = 0; e < g.size(); e++) {
            g[e] = -0.5f * (d(rng) + 1.0f) - 0.01f;
            beta[e] = 0.5f + 0.4f * d(rng);
        }
        std::vector<float> state(size_t(nv) * dk * dv, 0.0f), out(size_t(N_MAX) * nv * dv);
        for (Isa isa : isas) {
            const KernelTable& t = kernel_table(isa);
            for (int n : {1, 16, 64, N_MAX}) {
                if (isa == Isa::SCALAR && n > 64) continue;
                for (bool chunked : {true, false}) {
                    if (!chunked && n < DELTA_CHUNK_MIN) continue;
                    auto head = [&](long h) {
                        const int kh = int(h / (nv / nk));
                        float* S = state.data() + size_t(h) * dk * dv;
                        const float *q = x.data() + size_t(kh) * dk, *k = q + key_dim,
                                    *v = x.data() + 2 * key_dim + size_t(h) * dv;
                        float* o = out.data() + size_t(h) * dv;
                        const long ov = long(nv) * dv;
                        if (chunked) {
                            gated_delta_rule(t, S, o, ov, q, k, conv_dim, v, conv_dim, g.data() + h, beta.data() + h,
                                             nv, n, dk, dv);
                            return;
                        }
                        for (int i = 0; i < n; i++)
                            t.delta_rule_step(S, o + i * ov, q + i * conv_dim, k + i * conv_dim, v + i * conv_dim,
                                              g[size_t(i) * nv + h], beta[size_t(i) * nv + h], dk, dv);
                    };
                    const double sec = best_time(
                        [&](int) {
                            pool.parallel_for(nv, 1, [&](long h0, long h1) {
                                for (long h = h0; h < h1; h++) head(h);
                            });
                        },
                        3, 0.3);
                    const double flops = double(nv) * (chunked ? gated_delta_rule_flops(n, dk, dv)
                                                               : 8.0 * double(n) * dk * dv);
                    const double gflops = flops / sec / 1e9;
                    std::printf(
                        "{\"bench\":\"kernels\",\"kernel\":\"delta_rule\",\"model\":\"%s\",\"k_heads\":%d,"
                        "\"v_heads\":%d,\"dk\":%d,\"dv\":%d,\"isa\":\"%s\",\"tokens\":%d,\"path\":\"%s\","
                        "\"threads\":%d,\"ms\":%.3f,\"tok_s\":%.1f,\"gflops\":%.1f,\"fma_gflops_ceiling\":%.1f,"
                        "\"flop_ratio\":%.3f}\n",
                        sh.label.c_str(), nk, nv, dk, dv, isa_name(isa), n, chunked && n >= DELTA_CHUNK_MIN ? "chunked" : "step",
                        ceiling.threads, sec * 1e3, n / sec, gflops, ceiling.fma_gflops, gflops / ceiling.fma_gflops);
                    std::fflush(stdout);
                }
            }
        }
    }
}
