// ThreadPool: every index runs exactly once per fork, ranges cover [0, n)
// exactly once with the requested alignment, sleeping workers wake up, and
// many back-to-back forks neither lose nor duplicate work.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cpu_kernels/thread_pool.h"

TEST_CASE("run calls every thread index once", "[thread_pool]") {
    for (int n : {1, 2, 3, 8}) {
        ThreadPool pool(n);
        REQUIRE(pool.size() == n);
        std::vector<std::atomic<int>> hits(n);
        for (int rep = 0; rep < 100; rep++) pool.run([&](int i) { hits[i]++; });
        for (auto& h : hits) REQUIRE(h.load() == 100);
    }
}

TEST_CASE("parallel_for covers the range once with aligned splits", "[thread_pool]") {
    ThreadPool pool(3);
    for (long n : {0L, 1L, 15L, 16L, 17L, 100L, 1000L}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, 16, [&](long b, long e) {
            REQUIRE(b % 16 == 0);
            REQUIRE(b < e);
            for (long i = b; i < e; i++) hits[i]++;
        });
        for (auto& h : hits) REQUIRE(h.load() == 1);
    }
}

TEST_CASE("back-to-back forks and forks after sleeping", "[thread_pool]") {
    ThreadPool pool(4);
    std::atomic<long> total{0};
    for (int rep = 0; rep < 20000; rep++) pool.run([&](int i) { total += i + 1; });
    REQUIRE(total.load() == 20000L * 10);
    // Long enough for the workers to stop spinning and sleep on the futex.
    for (int rep = 0; rep < 3; rep++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        pool.run([&](int i) { total += i + 1; });
    }
    REQUIRE(total.load() == 20003L * 10);
}

TEST_CASE("uneven work: the caller waits for the slowest thread", "[thread_pool]") {
    ThreadPool pool(2);
    std::atomic<int> done{0};
    pool.run([&](int i) {
        if (i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        done++;
    });
    REQUIRE(done.load() == 2);
}

TEST_CASE("physical_core_count is positive", "[thread_pool]") { REQUIRE(physical_core_count() >= 1); }
