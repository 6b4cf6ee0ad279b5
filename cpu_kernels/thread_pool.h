// A persistent pool of worker threads with a fork/join parallel_for.
// The calling thread takes part as worker 0, so a pool of n threads starts
// n-1 workers. Kernels split work over output rows so each thread streams its
// own contiguous slice of weights. Must not know what a model is.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(thread_index) once on each of the size() threads and returns
    // when all have finished. Not reentrant: fn must not call run() again.
    // A fork/join costs a few microseconds while the workers are spinning
    // (they spin for about SPIN_US after each job, then sleep on a futex).
    void run(const std::function<void(int)>& fn);

    // Splits [0, n) into size() contiguous ranges, aligned to `align`, and
    // calls fn(begin, end) for each non-empty range in parallel.
    void parallel_for(long n, long align, const std::function<void(long, long)>& fn);

private:
    void worker(int index);

    int n_threads_;
    std::vector<std::thread> workers_;
    const std::function<void(int)>* job_ = nullptr;
    // Each on its own cache line: the caller writes generation_, workers
    // write pending_.
    alignas(64) std::atomic<uint32_t> generation_{0};
    std::atomic<int> sleepers_{0};
    alignas(64) std::atomic<uint32_t> pending_{0};
    std::atomic<int> caller_sleeping_{0};
    std::atomic<bool> stop_{false};
};

// Physical cores of this machine (hyper-threads not counted), at least 1.
int physical_core_count();
