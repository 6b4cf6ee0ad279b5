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

    // Calls fn(begin, end) in parallel over pieces that cover [0, n) once,
    // each piece starting at a multiple of `align`. Each thread owns a
    // contiguous share and works it front to back a piece at a time; a thread
    // done early takes pieces from the back of the others' shares, so one
    // thread slowed by the machine (a busy neighbour, a slower memory path)
    // does not keep the rest waiting. fn may run several times on a thread.
    void parallel_for(long n, long align, const std::function<void(long, long)>& fn);

private:
    void worker(int index);

    // One thread's share in parallel_for: its unclaimed pieces [front, back),
    // packed into one word so the owner (front) and thieves (back) claim by CAS.
    struct alignas(64) Share {
        std::atomic<uint64_t> span{0};
    };

    int n_threads_;
    std::vector<Share> shares_;
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
