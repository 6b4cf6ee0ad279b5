// Fork/join pool: workers spin briefly on a generation counter (a decode step
// forks dozens of times, and a sleeping wake-up costs tens of microseconds),
// then fall back to a condition variable so an idle server uses no CPU.
#include "cpu_kernels/thread_pool.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace {
constexpr int SPIN_ITERATIONS = 20000;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; i++) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
        generation_++;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int)>* job = nullptr;
        for (int spin = 0; spin < SPIN_ITERATIONS; spin++) {
            if (__atomic_load_n(&generation_, __ATOMIC_ACQUIRE) != seen) break;
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
        }
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return generation_ != seen; });
            seen = generation_;
            if (stop_) return;
            job = job_;
        }
        (*job)(index);
        {
            std::lock_guard lock(mutex_);
            if (--pending_ == 0) done_.notify_one();
        }
    }
}

void ThreadPool::run(const std::function<void(int)>& fn) {
    if (n_threads_ == 1) {
        fn(0);
        return;
    }
    {
        std::lock_guard lock(mutex_);
        job_ = &fn;
        pending_ = n_threads_ - 1;
        __atomic_store_n(&generation_, generation_ + 1, __ATOMIC_RELEASE);
    }
    wake_.notify_all();
    fn(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
}

void ThreadPool::parallel_for(long n, long align, const std::function<void(long, long)>& fn) {
    int t = n_threads_;
    long chunk = (n + t - 1) / t;
    chunk = (chunk + align - 1) / align * align;
    run([&](int i) {
        long b = std::min(n, i * chunk), e = std::min(n, b + chunk);
        if (b < e) fn(b, e);
    });
}

int physical_core_count() {
    // Count distinct (physical id, core id) pairs; fall back to the logical count.
    std::ifstream in("/proc/cpuinfo");
    std::set<std::pair<std::string, std::string>> cores;
    std::string line, phys = "0";
    while (std::getline(in, line)) {
        auto value = [&] { return line.substr(line.find(':') + 1); };
        if (line.rfind("physical id", 0) == 0) phys = value();
        if (line.rfind("core id", 0) == 0) cores.insert({phys, value()});
    }
    int n = int(cores.size());
    if (n == 0) n = int(std::thread::hardware_concurrency());
    return std::max(1, n);
}
