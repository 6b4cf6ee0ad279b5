// Ceilings and kernel benchmarks (see bench.h). Buffers are plain anonymous
// memory with 4 KB pages, like the weights' file mapping in the engine, and
// the weights rotate over copies totalling far more than the last-level
// cache, so every call streams from DRAM. Timings are the best of several
// repetitions.
#include "cpu_kernels/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "cpu_kernels/kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};

template <class T>
std::unique_ptr<T[], FreeDeleter> alloc_array(size_t n) {
    size_t bytes = (n * sizeof(T) + 4095) / 4096 * 4096;
    return std::unique_ptr<T[], FreeDeleter>(static_cast<T*>(std::aligned_alloc(4096, bytes)));
}

// Weights rotate over copies totalling at least this much (last-level caches
// of desktop and server CPUs stay well below it).
constexpr double ROTATION_BYTES = 1.0e9;
constexpr long CEILING_BUFFER_BYTES = 1L << 30;
constexpr long READ_WINDOW_BYTES = 128L << 20;

// Best time of fn() over at least min_reps calls and about budget_s seconds.
template <class F>
double best_time(F fn, int min_reps, double budget_s) {
    double best = 1e30;
    Clock::time_point start = Clock::now();
    for (int rep = 0; rep < min_reps || seconds_since(start) < budget_s; rep++) {
        Clock::time_point t0 = Clock::now();
        fn(rep);
        best = std::min(best, seconds_since(t0));
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
        for (long i = b; i < e; i += 4096) std::memset(buf.get() + i, int(i >> 12), 4096);
    });
    long slice = READ_WINDOW_BYTES / pool.size() / 4096 * 4096;
    long windows = CEILING_BUFFER_BYTES / READ_WINDOW_BYTES;
    std::vector<float> sinks(pool.size());
    for (int streams : {1, 2, 4}) {
        double read_s = best_time(
            [&](int rep) {
                const unsigned char* base = buf.get() + (rep % windows) * READ_WINDOW_BYTES;
                pool.run([&](int i) { sinks[i] = t.read_stream(base + i * slice, slice, streams); });
            },
            3 * int(windows), 1.0);
        c.read_gbs = std::max(c.read_gbs, double(slice) * pool.size() / read_s / 1e9);
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

    if (print)
        std::printf("{\"bench\":\"ceiling\",\"threads\":%d,\"isa\":\"%s\",\"read_gbs\":%.2f,\"fma_gflops\":%.1f,"
                    "\"fork_join_us\":%.2f,\"read_buffer_mb\":%ld,\"read_window_mb\":%ld}\n",
                    c.threads, isa_name(t.isa), c.read_gbs, c.fma_gflops, c.fork_join_us, CEILING_BUFFER_BYTES >> 20,
                    READ_WINDOW_BYTES >> 20);
    std::fflush(stdout);
    return c;
}

namespace {

// One weight matrix of an expert shape: n output rows of k inputs.
struct Shape {
    const char* model;
    const char* name;
    int n, k;
};

// Rotating copies of one random bf16 matrix set.
struct WeightCopies {
    std::unique_ptr<bf16[], FreeDeleter> data;
    size_t elems_per_copy = 0;
    int copies = 0;
    const bf16* copy(int i) const { return data.get() + size_t(i % copies) * elems_per_copy; }
};

WeightCopies make_weights(size_t elems, ThreadPool& pool) {
    WeightCopies w;
    w.elems_per_copy = (elems + 2047) / 2048 * 2048;
    w.copies = std::max(2, int(ROTATION_BYTES / (2.0 * double(w.elems_per_copy))) + 1);
    size_t total = w.elems_per_copy * w.copies;
    w.data = alloc_array<bf16>(total);
    pool.parallel_for(long(total), 4096, [&](long b, long e) {
        // xorshift: values in [-0.05, 0.05), fast enough for a gigabyte.
        uint32_t r = uint32_t(b) * 2654435761u + 1;
        for (long i = b; i < e; i++) {
            r ^= r << 13, r ^= r >> 17, r ^= r << 5;
            w.data[i] = f32_to_bf16((float(r >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.1f);
        }
    });
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
    long slice = long(bytes) / pool.size() / 4096 * 4096;
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

void print_line(const char* kernel, const Shape& s, Isa isa, int m, const char* path, Timing tm, double bytes,
                double flops, const Ceiling& c) {
    double sec = tm.kernel_s;
    double gbs = bytes / sec / 1e9, gflops = flops / sec / 1e9;
    std::printf("{\"bench\":\"kernels\",\"kernel\":\"%s\",\"model\":\"%s\",\"weights\":\"%s\",\"n\":%d,\"k\":%d,"
                "\"isa\":\"%s\",\"m\":%d,\"path\":\"%s\",\"threads\":%d,\"ms\":%.3f,\"weight_gbs\":%.2f,"
                "\"gflops\":%.1f,\"read_gbs_ceiling\":%.2f,\"fma_gflops_ceiling\":%.1f,\"bw_ratio\":%.3f,"
                "\"flop_ratio\":%.3f,\"read_gbs_paired\":%.2f,\"bw_ratio_paired\":%.3f}\n",
                kernel, s.model, s.name, s.n, s.k, isa_name(isa), m, path, c.threads, sec * 1e3, gbs, gflops,
                c.read_gbs, c.fma_gflops, gbs / c.read_gbs, gflops / c.fma_gflops, tm.read_gbs, gbs / tm.read_gbs);
    std::fflush(stdout);
}

// The matmul path the dispatcher takes for m tokens (with oneDNN allowed).
const char* path_name(const KernelTable& t, int m) {
    if (m < t.packed_min_m) return "rows";
    return t.isa == Isa::AVX512BF16 && m >= 128 && matmul_dnnl_select(true) ? "onednn" : "packed";
}

}  // namespace

void bench_kernels(ThreadPool& pool, const Ceiling& ceiling, const std::vector<Isa>& isas,
                   const std::vector<BenchExpertShape>& shapes) {
    const int MS[] = {1, 2, 4, 8, 16, 64, 256};
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (const BenchExpertShape& expert : shapes) {
        const char* model = expert.label.c_str();
        for (Shape s : {Shape{model, "w1/w3", expert.hidden_dim, expert.dim},
                        Shape{model, "w2", expert.dim, expert.hidden_dim}}) {
            WeightCopies w = make_weights(size_t(s.n) * s.k, pool);
            std::vector<float> x(size_t(256) * s.k), y(size_t(256) * s.n);
            for (auto& v : x) v = d(rng);
            for (Isa isa : isas) {
                const KernelTable& t = kernel_table(isa);
                for (int m : MS) {
                    if (isa == Isa::SCALAR && m > 2) continue;
                    double flops = matmul_bf16_flops(m, s.n, s.k);
                    // Large m on the bf16 path: oneDNN (the default where native)
                    // and our own packed kernel, both measured.
                    bool both = isa == Isa::AVX512BF16 && m >= t.packed_min_m && matmul_dnnl_select(true);
                    // (oneDNN is only taken from m = 128; below, both lines are ours.)
                    for (bool dnnl : both ? std::vector<bool>{true, false} : std::vector<bool>{true}) {
                        matmul_dnnl_select(dnnl);
                        Timing tm = time_paired(
                            pool, w, size_t(matmul_bf16_bytes(s.n, s.k)),
                            [&](int rep) { matmul_bf16(t, y.data(), x.data(), w.copy(rep), m, s.n, s.k, pool); },
                            flops > 1e10 ? 0.0 : 0.5);
                        print_line("matmul_bf16", s, isa, m, both && !dnnl ? "packed" : path_name(t, m), tm,
                                   matmul_bf16_bytes(s.n, s.k), flops, ceiling);
                    }
                    matmul_dnnl_select(true);
                }
            }
        }
    }
    // Fused expert FFN: w1, w3 (hidden, dim) and w2 (dim, hidden) per copy.
    for (const BenchExpertShape& expert : shapes) {
        const int dim = expert.dim, hidden = expert.hidden_dim;
        size_t per = size_t(dim) * hidden;
        WeightCopies w = make_weights(3 * per, pool);
        Shape s{expert.label.c_str(), "expert", hidden, dim};
        for (Isa isa : isas) {
            if (isa == Isa::SCALAR) continue;
            const KernelTable& t = kernel_table(isa);
            for (int m : {1, 128}) {
                std::vector<float> x(size_t(m) * dim, 0.5f), y(size_t(m) * dim), scratch(2 * size_t(m) * hidden);
                double flops = 3 * matmul_bf16_flops(m, hidden, dim);
                Timing tm = time_paired(
                    pool, w, size_t(3 * matmul_bf16_bytes(hidden, dim)),
                    [&](int rep) {
                        const bf16* base = w.copy(rep);
                        expert_ffn_bf16(t, y.data(), x.data(), base, base + per, base + 2 * per, m, dim, hidden,
                                        scratch.data(), pool);
                    },
                    flops > 1e10 ? 0.0 : 0.5);
                print_line("expert_ffn_bf16", s, isa, m, path_name(t, m), tm, 3 * matmul_bf16_bytes(hidden, dim),
                           flops, ceiling);
            }
        }
    }
}
