// ThreadPool: every index runs exactly once per fork, ranges cover [0, n)
// exactly once with the requested alignment, a slowed thread's pieces are
// taken by the others, sleeping workers wake up, and
// many back-to-back forks neither lose nor duplicate work; the physical core
// count matches the kernel's topology in sysfs.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
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
    for (long n : {0L, 1L, 15L, 16L, 17L, 100L, 1000L, 100003L}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, 16, [&](long b, long e) {
            REQUIRE(b % 16 == 0);
            REQUIRE(b < e);
            for (long i = b; i < e; i++) hits[i]++;
        });
        for (auto& h : hits) REQUIRE(h.load() == 1);
    }
}

TEST_CASE("parallel_for: a thread done early takes the slow thread's pieces", "[thread_pool]") {
    // The caller (thread 0) is slowed on every piece it runs; the worker
    // finishes its own share, then takes what is left of the caller's from
    // the back. Without that the caller would run half the pieces.
    ThreadPool pool(2);
    const auto caller = std::this_thread::get_id();
    const long n = 64 * 16;  // 16 pieces of 64
    std::vector<std::atomic<int>> hits(n);
    std::atomic<long> by_caller{0};
    pool.parallel_for(n, 64, [&](long b, long e) {
        REQUIRE(b % 64 == 0);
        for (long i = b; i < e; i++) hits[i]++;
        if (std::this_thread::get_id() == caller) {
            by_caller += e - b;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    });
    for (auto& h : hits) REQUIRE(h.load() == 1);
    INFO("items run by the slowed caller: " << by_caller.load() << " of " << n);
    REQUIRE(by_caller.load() < n / 2);
}

TEST_CASE("back-to-back forks and forks after sleeping", "[thread_pool][slow]") {
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

// The kernel's CPU topology in sysfs, read independently of /proc/cpuinfo
// (which physical_core_count parses): distinct (package, core) pairs of the
// CPUs listed there; 0 when sysfs has no topology.
int sysfs_physical_cores() {
    std::set<std::pair<std::string, std::string>> cores;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/sys/devices/system/cpu", ec)) {
        const std::string name = entry.path().filename().string();
        if (name.size() < 4 || name.compare(0, 3, "cpu") != 0 ||
            name.find_first_not_of("0123456789", 3) != std::string::npos)
            continue;
        std::ifstream package(entry.path() / "topology" / "physical_package_id");
        std::ifstream core(entry.path() / "topology" / "core_id");
        std::string p, c;
        if (package >> p && core >> c) cores.insert({p, c});
    }
    return int(cores.size());
}

TEST_CASE("physical_core_count counts physical cores, hyper-threads once", "[thread_pool]") {
    const int n = physical_core_count();
    const int logical = int(std::thread::hardware_concurrency());
    const int sysfs = sysfs_physical_cores();
    INFO("physical_core_count " << n << ", sysfs " << sysfs << ", logical " << logical);
    REQUIRE(n >= 1);
    if (logical > 0) REQUIRE(n <= logical);
    if (sysfs > 0)
        REQUIRE(n == sysfs);
    else
        WARN("no CPU topology in sysfs: only the bounds are checked");
}
