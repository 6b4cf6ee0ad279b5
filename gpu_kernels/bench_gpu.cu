// bench_gpu.h: copies, GEMMs and the expert FFN timed with CUDA events.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <utility>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "gpu_kernels/bench_gpu.h"
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/gpu_kernels.h"

namespace {

constexpr int COPY_REPS = 5;
constexpr int GEMM_REPS = 5;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median ms of one fn() enqueued on stream. The device is first kept busy
// with fn() for WARM_MS (an idle GPU runs at a low clock for a while), and
// each of the reps times enough back-to-back calls to fill BATCH_MS, so
// launch and synchronisation jitter do not swamp a call of a tenth of a
// millisecond.
constexpr double WARM_MS = 50, BATCH_MS = 2;

template <class Fn>
double time_ms(GpuStream stream, int reps, Fn&& fn) {
    GpuEvent start(true), stop(true);
    auto timed = [&](int calls) {
        start.record(stream);
        for (int i = 0; i < calls; i++) fn();
        stop.record(stream);
        stop.synchronize();
        return stop.ms_since(start);
    };
    double one = timed(1);
    for (double spent = one; spent < WARM_MS;) {
        const int calls = std::max(1, int(std::min(1000.0, (WARM_MS - spent) / std::max(one, 1e-3))));
        const double ms = timed(calls);
        spent += ms;
        one = ms / calls;
    }
    const int batch = std::max(1, int(std::ceil(BATCH_MS / std::max(one, 1e-3))));
    std::vector<double> ms;
    for (int r = 0; r < reps; r++) ms.push_back(timed(batch) / batch);
    return median(ms);
}

double gbs(size_t bytes, double ms) { return ms > 0 ? double(bytes) / (ms * 1e6) : 0; }

__global__ void fill_bf16_kernel(bf16* x, long n, unsigned seed) {
    for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n; i += long(gridDim.x) * blockDim.x) {
        unsigned h = unsigned(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = f32_to_bf16((float(h & 0xffff) / 65536.0f - 0.5f) * 0.05f);
    }
}

void fill_bf16(bf16* x, long n, unsigned seed, GpuStream stream) {
    fill_bf16_kernel<<<1024, 256, 0, stream>>>(x, n, seed);
    CUDA_LAUNCH_CHECK();
}

}  // namespace

GpuCeilings gpu_measure_ceilings(size_t copy_bytes, int gemm_size) {
    GpuCeilings c;
    c.copy_bytes = copy_bytes;
    c.gemm_size = gemm_size;
    GpuStreamOwner stream;
    GpuBuffer dev(copy_bytes), dev2(copy_bytes);
    PinnedBuffer pinned(copy_bytes);
    std::memset(pinned.data(), 1, copy_bytes);
    std::unique_ptr<unsigned char[]> pageable(new unsigned char[copy_bytes]);
    std::memset(pageable.get(), 1, copy_bytes);
    GpuStream s = stream.get();
    c.h2d_pinned_gbs = gbs(copy_bytes, time_ms(s, COPY_REPS, [&] { gpu_copy_h2d(dev.data(), pinned.data(), copy_bytes, s); }));
    c.d2h_pinned_gbs = gbs(copy_bytes, time_ms(s, COPY_REPS, [&] { gpu_copy_d2h(pinned.data(), dev.data(), copy_bytes, s); }));
    c.h2d_pageable_gbs =
        gbs(copy_bytes, time_ms(s, COPY_REPS, [&] { gpu_copy_h2d(dev.data(), pageable.get(), copy_bytes, s); }));
    {
        HostRegistration reg(pageable.get(), copy_bytes, false);
        c.h2d_registered_gbs =
            gbs(copy_bytes, time_ms(s, COPY_REPS, [&] { gpu_copy_h2d(dev.data(), pageable.get(), copy_bytes, s); }));
    }
    c.device_gbs =
        gbs(2 * copy_bytes, time_ms(s, COPY_REPS, [&] { gpu_copy_d2d(dev2.data(), dev.data(), copy_bytes, s); }));

    const size_t n = size_t(gemm_size);
    GpuBuffer a(n * n * sizeof(bf16)), b(n * n * sizeof(bf16)), y(n * n * sizeof(float));
    fill_bf16(a.as<bf16>(), long(n * n), 1, s);
    fill_bf16(b.as<bf16>(), long(n * n), 2, s);
    GpuBlas blas(s);
    double ms = time_ms(s, GEMM_REPS, [&] {
        gpu_matmul_bf16(blas, y.as<float>(), a.as<bf16>(), b.as<bf16>(), gemm_size, gemm_size, gemm_size);
    });
    c.bf16_tflops = 2.0 * double(n) * n * n / (ms * 1e9);
    return c;
}

std::vector<double> gpu_time_h2d_pinned(const std::vector<size_t>& sizes, int reps) {
    size_t most = *std::max_element(sizes.begin(), sizes.end());
    GpuStreamOwner stream;
    GpuBuffer dev(most);
    PinnedBuffer pinned(most);
    std::memset(pinned.data(), 1, most);
    std::vector<double> out;
    for (size_t bytes : sizes)
        out.push_back(time_ms(stream.get(), reps, [&] { gpu_copy_h2d(dev.data(), pinned.data(), bytes, stream.get()); }));
    return out;
}

struct GpuCopyLoad::State {
    GpuStreamOwner stream;
    GpuBuffer dev;
    PinnedBuffer pinned;
    std::atomic<bool> running{true};
    std::exception_ptr error;
    double gbs = 0;
    std::thread thread;
    explicit State(size_t bytes) : dev(bytes), pinned(bytes) { std::memset(pinned.data(), 1, bytes); }
    void join();  // stops the copies and waits for the thread
};

GpuCopyLoad::GpuCopyLoad(size_t bytes) : state_(std::make_unique<State>(bytes)) {
    State* st = state_.get();
    st->thread = std::thread([st, bytes] {
        try {
            const auto t0 = std::chrono::steady_clock::now();
            size_t copied = 0;
            while (st->running.load(std::memory_order_relaxed)) {
                gpu_copy_h2d(st->dev.data(), st->pinned.data(), bytes, st->stream.get());
                st->stream.synchronize();
                copied += bytes;
            }
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            st->gbs = s > 0 ? double(copied) / s / 1e9 : 0;
        } catch (...) {
            st->error = std::current_exception();
        }
    });
}

void GpuCopyLoad::State::join() {
    if (!thread.joinable()) return;
    running = false;
    thread.join();
}

double GpuCopyLoad::stop() {
    state_->join();
    if (state_->error) std::rethrow_exception(std::exchange(state_->error, nullptr));
    return state_->gbs;
}

GpuCopyLoad::~GpuCopyLoad() { state_->join(); }

std::vector<double> gpu_time_expert_ffn(const WeightView& w1, const WeightView& w3, const WeightView& w2,
                                        const std::vector<int>& ns, int reps) {
    const int most = *std::max_element(ns.begin(), ns.end());
    const int dim = int(w1.cols), hidden = int(w1.rows);
    GpuStreamOwner stream;
    GpuStream s = stream.get();
    GpuBuffer w(w1.bytes() + w3.bytes() + w2.bytes());
    WeightView dev[3] = {w1, w3, w2};
    size_t at = 0;
    for (WeightView& v : dev) {
        gpu_copy_h2d(w.as<unsigned char>() + at, v.data, v.bytes(), s);
        v.data = w.as<unsigned char>() + at;
        at += v.bytes();
    }
    GpuBuffer x(size_t(most) * dim * sizeof(float)), y(size_t(most) * dim * sizeof(float));
    GpuBuffer sf(size_t(2) * most * hidden * sizeof(float)), sb(size_t(most) * std::max(dim, hidden) * sizeof(bf16));
    const bool quantized = dtype_quantized(w1.type) || dtype_quantized(w3.type) || dtype_quantized(w2.type);
    GpuBuffer sw(quantized ? GPU_DEQUANT_PIECE_ELEMS * sizeof(bf16) : 0);
    const GpuGemmScratch scratch{sb.as<bf16>(), sw.as<bf16>(), quantized ? GPU_DEQUANT_PIECE_ELEMS : 0};
    gpu_memset(x.data(), 0, x.bytes(), s);
    stream.synchronize();  // pageable sources: the copies must finish before the caller frees them
    GpuBlas blas(s);
    std::vector<double> out;
    for (int n : ns)
        out.push_back(time_ms(s, reps, [&] {
            gpu_expert_ffn(blas, y.as<float>(), x.as<float>(), dev[0], dev[1], dev[2], n, sf.as<float>(), scratch);
        }));
    return out;
}
