// Residency, expert capacity and the static plans (popularity, even,
// random) with hand-computed cases, and hit_rate.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "placement/residency.h"

namespace {

std::vector<std::pair<int, int>> resident_list(const Residency& r) {
    std::vector<std::pair<int, int>> out;
    for (int l = 0; l < r.n_layers(); l++)
        for (int e = 0; e < r.n_experts(); e++)
            if (r.resident(l, e)) out.emplace_back(l, e);
    return out;
}

}  // namespace

TEST_CASE("Residency counts per layer and overall", "[placement]") {
    Residency r(3, 4);
    REQUIRE(r.n_resident() == 0);
    r.set(0, 1, true);
    r.set(2, 3, true);
    r.set(2, 0, true);
    r.set(2, 0, false);
    REQUIRE(r.n_resident() == 2);
    REQUIRE(r.n_resident(0) == 1);
    REQUIRE(r.n_resident(1) == 0);
    REQUIRE(r.n_resident(2) == 1);
    REQUIRE(r.resident(2, 3));
    REQUIRE_FALSE(r.resident(2, 0));
}

TEST_CASE("expert_capacity: free bytes over expert bytes, minus staging, clamped", "[placement]") {
    DeviceBudget b;
    b.budget_bytes = 24e9;
    b.dense_bytes = 3e9;
    b.kv_bytes = 2e9;
    b.margin_bytes = 1e9;
    b.expert_bytes = 352e6;  // Mixtral 8x7B: 3 * 14336 * 4096 * 2
    b.staging = 1;
    // (24 - 3 - 2 - 1) GB / 352 MB = 51.1 -> 51 slots, one kept for staging.
    REQUIRE(expert_capacity(b, 32, 8) == 50);
    b.staging = 0;
    REQUIRE(expert_capacity(b, 32, 8) == 51);
    // Never more than the model has.
    REQUIRE(expert_capacity(b, 2, 8) == 16);
    // Never negative: a budget smaller than dense + kv, or staging larger than the slots.
    b.budget_bytes = 5e9;
    REQUIRE(expert_capacity(b, 32, 8) == 0);
    b.budget_bytes = 6.5e9;  // one slot, two staging
    b.staging = 2;
    REQUIRE(expert_capacity(b, 32, 8) == 0);
    b.budget_bytes = 0;
    REQUIRE(expert_capacity(b, 32, 8) == 0);
    b.expert_bytes = 0;
    REQUIRE_THROWS_AS(expert_capacity(b, 32, 8), std::invalid_argument);
}

TEST_CASE("static_plan_popularity takes the most popular first, ties by (layer, expert)", "[placement]") {
    // 2 layers x 3 experts.
    std::vector<uint64_t> counts = {5, 9, 1,  //
                                    9, 0, 5};
    REQUIRE(resident_list(static_plan_popularity(counts, 2, 3, 0)).empty());
    // 9 (0,1) and 9 (1,0) tie: layer 0 first.
    REQUIRE(resident_list(static_plan_popularity(counts, 2, 3, 1)) == std::vector<std::pair<int, int>>{{0, 1}});
    REQUIRE(resident_list(static_plan_popularity(counts, 2, 3, 2)) == std::vector<std::pair<int, int>>{{0, 1}, {1, 0}});
    // Then 5 (0,0) before 5 (1,2).
    REQUIRE(resident_list(static_plan_popularity(counts, 2, 3, 3)) ==
            std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}});
    REQUIRE(static_plan_popularity(counts, 2, 3, 4).resident(1, 2));
    Residency all = static_plan_popularity(counts, 2, 3, 100);  // capacity clamped to the table
    REQUIRE(all.n_resident() == 6);
    REQUIRE_THROWS_AS(static_plan_popularity(counts, 2, 2, 1), std::invalid_argument);
    REQUIRE_THROWS_AS(static_plan_popularity(counts, 2, 3, -1), std::invalid_argument);
}

TEST_CASE("static_plan_popularity never lets a less popular expert in before a more popular one", "[placement]") {
    std::vector<uint64_t> counts(8 * 16);
    uint64_t x = 12345;
    for (auto& c : counts) c = (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 58;  // 0..63, many ties
    for (int cap : {0, 1, 7, 40, 127, 128}) {
        Residency r = static_plan_popularity(counts, 8, 16, cap);
        REQUIRE(r.n_resident() == cap);
        uint64_t min_in = UINT64_MAX, max_out = 0;
        for (int i = 0; i < 128; i++) {
            bool in = r.resident(i / 16, i % 16);
            if (in)
                min_in = std::min(min_in, counts[i]);
            else
                max_out = std::max(max_out, counts[i]);
        }
        if (cap > 0 && cap < 128) REQUIRE(min_in >= max_out);
        // Same input, same plan.
        REQUIRE(resident_list(static_plan_popularity(counts, 8, 16, cap)) == resident_list(r));
    }
}

TEST_CASE("static_plan_even spreads capacity over layers, the first layers get the remainder", "[placement]") {
    Residency r = static_plan_even(4, 8, 10);  // 2 per layer, layers 0 and 1 get a third
    REQUIRE(r.n_resident() == 10);
    REQUIRE(r.n_resident(0) == 3);
    REQUIRE(r.n_resident(1) == 3);
    REQUIRE(r.n_resident(2) == 2);
    REQUIRE(r.n_resident(3) == 2);
    REQUIRE(r.resident(0, 2));
    REQUIRE_FALSE(r.resident(2, 2));
    REQUIRE(r.resident(3, 0));
    REQUIRE(r.resident(3, 1));
    REQUIRE(static_plan_even(4, 8, 0).n_resident() == 0);
    REQUIRE(static_plan_even(4, 8, 32).n_resident() == 32);
    REQUIRE(static_plan_even(4, 8, 99).n_resident() == 32);
    Residency few = static_plan_even(4, 8, 3);
    REQUIRE(few.n_resident(3) == 0);
    REQUIRE(few.n_resident(2) == 1);
}

TEST_CASE("static_plan_random is reproducible from its seed and differs across seeds", "[placement]") {
    Residency a = static_plan_random(8, 8, 20, 42), b = static_plan_random(8, 8, 20, 42);
    REQUIRE(a.n_resident() == 20);
    REQUIRE(resident_list(a) == resident_list(b));
    int differing = 0;
    for (uint64_t seed = 1; seed <= 10; seed++)
        if (resident_list(static_plan_random(8, 8, 20, seed)) != resident_list(a)) differing++;
    REQUIRE(differing == 10);
    REQUIRE(static_plan_random(8, 8, 64, 3).n_resident() == 64);
    REQUIRE(static_plan_random(8, 8, 0, 3).n_resident() == 0);
    // Roughly uniform: over many seeds every slot is drawn about 20/64 of the time.
    std::vector<int> hits(64);
    for (uint64_t seed = 0; seed < 2000; seed++) {
        Residency r = static_plan_random(8, 8, 20, seed);
        for (int i = 0; i < 64; i++) hits[i] += r.resident(i / 8, i % 8);
    }
    for (int h : hits) REQUIRE(std::abs(h / 2000.0 - 20.0 / 64) < 0.05);
}

TEST_CASE("hit_rate: share of routed tokens whose expert is resident", "[placement]") {
    std::vector<uint64_t> counts = {5, 9, 1,   //
                                    9, 0, 5};  // 29 tokens
    Residency r(2, 3);
    REQUIRE(hit_rate(r, counts) == 0.0);
    r.set(0, 1, true);
    r.set(1, 1, true);
    REQUIRE(hit_rate(r, counts) == Approx(9.0 / 29));
    r.set(1, 2, true);
    REQUIRE(hit_rate(r, counts) == Approx(14.0 / 29));
    REQUIRE(hit_rate(static_plan_popularity(counts, 2, 3, 6), counts) == 1.0);
    // The plan from one workload scored on another.
    std::vector<uint64_t> other = {0, 0, 4, 0, 0, 4};
    REQUIRE(hit_rate(static_plan_popularity(counts, 2, 3, 2), other) == 0.0);
    REQUIRE(hit_rate(r, std::vector<uint64_t>(6, 0)) == 0.0);
    REQUIRE_THROWS_AS(hit_rate(r, std::vector<uint64_t>(5, 1)), std::invalid_argument);
}
