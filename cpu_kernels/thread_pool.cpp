// Fork/join pool. A fork bumps a generation counter; workers spin on it for a
// while after each job (a decode step forks dozens of times, and waking a
// sleeping thread costs tens of microseconds), then sleep on a futex so an
// idle server uses no CPU. The join is a counter the caller spins on. The
// futex calls happen only when someone actually sleeps.
#include "cpu_kernels/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <fstream>
#include <linux/futex.h>
#include <set>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>

namespace {

// How long an idle worker spins before it sleeps, and how long the caller
// spins on the join before it sleeps.
constexpr auto SPIN_TIME = std::chrono::microseconds(200);

void cpu_relax() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* addr) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// Spins until pred() holds or SPIN_TIME has passed; returns pred().
template <class Pred>
bool spin_until(Pred pred) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0;; i++) {
        if (pred()) return true;
        cpu_relax();
        if ((i & 255) == 255 && std::chrono::steady_clock::now() - start > SPIN_TIME) return pred();
    }
}

}  // namespace

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex needs a plain 32-bit word");

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)), shares_(size_t(n_threads_)) {
    for (int i = 1; i < n_threads_; i++) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    generation_.fetch_add(1);
    futex_wake_all(&generation_);
    for (auto& t : workers_) t.join();
}

void ThreadPool::worker(int index) {
    uint32_t seen = 0;
    for (;;) {
        auto changed = [&] { return generation_.load(std::memory_order_acquire) != seen; };
        if (!spin_until(changed)) {
            // seq_cst pairs with run(): either run() sees a sleeper and wakes
            // us, or futex_wait sees the new generation and returns at once.
            sleepers_.fetch_add(1);
            while (generation_.load() == seen) futex_wait(&generation_, seen);
            sleepers_.fetch_sub(1);
        }
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load()) return;
        (*job_)(index);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1 && caller_sleeping_.load()) futex_wake_all(&pending_);
    }
}

void ThreadPool::run(const std::function<void(int)>& fn) {
    if (n_threads_ == 1) {
        fn(0);
        return;
    }
    job_ = &fn;
    pending_.store(uint32_t(n_threads_ - 1), std::memory_order_relaxed);
    generation_.fetch_add(1);  // seq_cst: publishes job_ and pending_
    if (sleepers_.load() > 0) futex_wake_all(&generation_);
    fn(0);
    auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
    if (!spin_until(done)) {
        caller_sleeping_.store(1);
        for (uint32_t p; (p = pending_.load()) != 0;) futex_wait(&pending_, p);
        caller_sleeping_.store(0);
    }
}

namespace {

// A share's unclaimed pieces [front, back) as one word.
uint64_t span_of(uint32_t front, uint32_t back) {
    return uint64_t(front) << 32 | back;
}

// Claims the front piece of a share (its owner) or the back one (a thief);
// -1 when the share is empty.
long claim(std::atomic<uint64_t>& span, bool front) {
    uint64_t s = span.load(std::memory_order_relaxed);
    for (;;) {
        uint32_t f = uint32_t(s >> 32), b = uint32_t(s);
        if (f >= b) return -1;
        uint64_t next = front ? span_of(f + 1, b) : span_of(f, b - 1);
        if (span.compare_exchange_weak(s, next, std::memory_order_relaxed)) return front ? long(f) : long(b - 1);
    }
}

// Pieces per thread's share: enough that a thread done early finds work to
// take, few enough that the claims cost nothing against the piece.
constexpr long PIECES_PER_SHARE = 8;

}  // namespace

void ThreadPool::parallel_for(long n, long align, const std::function<void(long, long)>& fn) {
    if (n <= 0) return;
    int t = n_threads_;
    long units = (n + align - 1) / align;  // aligned units of work
    if (t == 1 || units == 1) return fn(0, n);
    long per_share = (units + t - 1) / t;
    long piece = std::max(1L, per_share / PIECES_PER_SHARE);  // in units
    long n_pieces = (units + piece - 1) / piece;
    long share_pieces = (n_pieces + t - 1) / t;
    for (int i = 0; i < t; i++) {
        long f = std::min(n_pieces, i * share_pieces), b = std::min(n_pieces, f + share_pieces);
        shares_[size_t(i)].span.store(span_of(uint32_t(f), uint32_t(b)), std::memory_order_relaxed);
    }
    auto run_piece = [&](long p) { fn(p * piece * align, std::min(n, (p + 1) * piece * align)); };
    // run()'s fork publishes the shares to the workers.
    run([&](int i) {
        for (long p; (p = claim(shares_[size_t(i)].span, true)) >= 0;) run_piece(p);
        for (int k = 1; k < t; k++) {
            auto& other = shares_[size_t((i + k) % t)].span;
            for (long p; (p = claim(other, false)) >= 0;) run_piece(p);
        }
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
