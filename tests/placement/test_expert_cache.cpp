// The dynamic expert cache (placement/expert_cache.h): each eviction policy
// on a trace whose hits and evictions were worked out by hand, the protected
// set (a copy never evicts an expert its own layer's plan uses), the per-layer
// pools, the warm start, Belady never beaten by any policy (nor by never
// admitting, the static plan) on random traces of one expert per layer step
// and its rare losses bounded with several, and no allocation per access.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "alloc_count.h"
#include "placement/expert_cache.h"

namespace {

// One access per step on layer 0 (the expert is its own protected set):
// the steps that hit and the experts evicted, in order.
struct Replay {
    std::vector<int> hit_steps;
    std::vector<int> evicted;
};

Replay replay_single(CachePolicy kind, const std::vector<int>& trace, int n_experts, int slots,
                     const CacheOptions& options = {}, const std::vector<uint64_t>& popularity = {}) {
    ExpertCache cache(Residency(1, n_experts), slots, eviction_policy_make(kind, 1, n_experts, popularity, options),
                      options);
    // Next uses for Belady.
    std::vector<uint64_t> next(trace.size(), CACHE_NEVER);
    for (size_t t = 0; t < trace.size(); t++)
        for (size_t u = t + 1; u < trace.size(); u++)
            if (trace[u] == trace[t]) {
                next[t] = u;
                break;
            }
    Replay r;
    for (size_t t = 0; t < trace.size(); t++) {
        const int e = trace[t];
        if (cache.lookup(0, e, t, next[t]) != CacheHit::MISS) {
            r.hit_steps.push_back(int(t));
            continue;
        }
        AdmitResult a = cache.admit(0, e, std::vector<int>{e}, t);
        if (a.evicted_expert >= 0) r.evicted.push_back(a.evicted_expert);
    }
    return r;
}

}  // namespace

TEST_CASE("LRU evicts the least recently used (hand-computed trace)", "[placement][cache]") {
    // {0}, {0,1}, hit 0, 2 evicts 1, 1 evicts 0, 3 evicts 2, 0 evicts 1, 1 evicts 3.
    Replay r = replay_single(CachePolicy::LRU, {0, 1, 0, 2, 1, 3, 0, 1}, 4, 2);
    CHECK(r.hit_steps == std::vector<int>{2});
    CHECK(r.evicted == std::vector<int>{1, 0, 2, 1, 3});
    // 2 evicts 0 (last used at 2, 1 at 3); 3 evicts 1; 0 evicts 2.
    r = replay_single(CachePolicy::LRU, {0, 0, 0, 1, 2, 1, 2, 3, 0}, 4, 2);
    CHECK(r.hit_steps == std::vector<int>{1, 2, 5, 6});
    CHECK(r.evicted == std::vector<int>{0, 1, 2});
}

TEST_CASE("LFU evicts the least frequently used, decayed (hand-computed trace)", "[placement][cache]") {
    const std::vector<int> trace = {0, 0, 0, 1, 2, 1, 2, 3, 0};
    CacheOptions slow;
    slow.lfu_half_life_tokens = 1e9;  // plain counts: 0 (3 uses) stays, 1 and 2 evict each other
    Replay r = replay_single(CachePolicy::LFU, trace, 4, 2, slow);
    CHECK(r.hit_steps == std::vector<int>{1, 2, 8});
    CHECK(r.evicted == std::vector<int>{1, 2, 1, 2});
    // Half-life one step: at step 4, 0's 1.75 (step 2) has decayed to 0.4375
    // and 1's 1 (step 3) to 0.5, so 0 goes; at 7, 1 = 1.5 * 2^-2 < 2 = 1.25 / 2;
    // at 8, 2 = 1.25 * 2^-2 < 3 = 0.5.
    CacheOptions fast;
    fast.lfu_half_life_tokens = 1;
    r = replay_single(CachePolicy::LFU, trace, 4, 2, fast);
    CHECK(r.hit_steps == std::vector<int>{1, 2, 5, 6});
    CHECK(r.evicted == std::vector<int>{0, 1, 2});
}

TEST_CASE("score keeps the profile's popular expert over recent ones (hand-computed trace)", "[placement][cache]") {
    // Expert 3 is popular (score 1 + recency); 0, 1, 2 have only recency.
    CacheOptions o;
    o.score_half_life_tokens = 1;
    const std::vector<uint64_t> popularity = {0, 0, 0, 100};
    Replay r = replay_single(CachePolicy::SCORE, {3, 0, 1, 0, 2, 3}, 4, 2, o, popularity);
    CHECK(r.hit_steps == std::vector<int>{5});
    CHECK(r.evicted == std::vector<int>{0, 1, 0});
    // LRU on the same trace drops 3 first and misses it at the end.
    r = replay_single(CachePolicy::LRU, {3, 0, 1, 0, 2, 3}, 4, 2);
    CHECK(r.hit_steps == std::vector<int>{3});
    CHECK(r.evicted == std::vector<int>{3, 1, 0});
}

TEST_CASE("Belady keeps what is used soonest and bypasses what is used later (hand-computed trace)",
          "[placement][cache]") {
    // Step 3: 2 is never used again, 0 (next 6) and 1 (next 4) stay; step 5
    // likewise for 3. Hits at 2, 4, 6, 7, no eviction.
    Replay r = replay_single(CachePolicy::BELADY, {0, 1, 0, 2, 1, 3, 0, 1}, 4, 2);
    CHECK(r.hit_steps == std::vector<int>{2, 4, 6, 7});
    CHECK(r.evicted.empty());
    // 2 evicts 0 (next use 8, after 1's 5); 3 then evicts 2 (never again).
    r = replay_single(CachePolicy::BELADY, {0, 0, 0, 1, 2, 1, 2, 3, 0}, 4, 2);
    CHECK(r.hit_steps == std::vector<int>{1, 2, 5, 6});
    CHECK(r.evicted == std::vector<int>{0});
}

TEST_CASE("a copy never evicts an expert its own layer's plan uses", "[placement][cache]") {
    for (CachePolicy kind : {CachePolicy::LRU, CachePolicy::LFU, CachePolicy::SCORE, CachePolicy::BELADY}) {
        INFO(cache_policy_name(kind));
        // Two layers of 3 experts, one pool of 2 slots holding (0, 0) and (1, 0).
        CacheOptions global;
        global.scope = CacheScope::GLOBAL;
        ExpertCache cache(Residency(2, 3), 2, eviction_policy_make(kind, 2, 3, {}, global), global);
        REQUIRE(cache.admit(0, 0, {}, 0).admitted);
        REQUIRE(cache.admit(1, 0, {}, 1).admitted);
        // Layer 0 routes {0, 2}: 0 is protected, so only layer 1's expert 0 may go,
        // even though expert 0 of layer 0 was used longer ago.
        const std::vector<int> routed = {0, 2};
        cache.lookup(0, 0, 2, 10);
        cache.lookup(0, 2, 2, 3);
        AdmitResult a = cache.admit(0, 2, routed, 2);
        REQUIRE(a.admitted);
        CHECK(a.evicted_layer == 1);
        CHECK(a.evicted_expert == 0);
        CHECK(cache.cached(0, 0));
        CHECK(cache.cached(0, 2));
        // Layer 0 now routes {0, 1, 2}: every cached expert is protected, 1 is not admitted.
        const std::vector<int> all = {0, 1, 2};
        a = cache.admit(0, 1, all, 3);
        CHECK_FALSE(a.admitted);
        CHECK(cache.cached(0, 0));
        CHECK(cache.cached(0, 2));
        CHECK(cache.stats().bypasses == 1);
    }
}

TEST_CASE("per-layer pools never take another layer's slot", "[placement][cache]") {
    CacheOptions o;
    o.scope = CacheScope::PER_LAYER;
    // 3 slots over 2 layers: layer 0 gets 2, layer 1 gets 1.
    ExpertCache cache(Residency(2, 4), 3, eviction_policy_make(CachePolicy::LRU, 2, 4, {}, o), o);
    REQUIRE(cache.admit(1, 0, {}, 0).admitted);
    REQUIRE(cache.admit(0, 0, {}, 1).admitted);
    REQUIRE(cache.admit(0, 1, {}, 2).admitted);
    AdmitResult a = cache.admit(0, 2, {}, 3);  // layer 0's pool is full: its LRU (0, 0) goes, not (1, 0)
    CHECK(a.evicted_layer == 0);
    CHECK(a.evicted_expert == 0);
    a = cache.admit(1, 3, {}, 4);
    CHECK(a.evicted_layer == 1);
    CHECK(a.evicted_expert == 0);
    CHECK(cache.n_cached() == 3);
}

TEST_CASE("warm start fills free slots in the given order, skipping pinned experts", "[placement][cache]") {
    Residency pinned(2, 4);
    pinned.set(0, 1, true);
    const std::vector<uint64_t> counts = {5, 9, 7, 0, 8, 1, 6, 2};  // order: (0,1) (1,0) (0,2) (1,2) (0,0) ...
    const std::vector<int> order = popularity_order(counts, 2, 4);
    CHECK(order == std::vector<int>{1, 4, 2, 6, 0, 7, 5, 3});
    CacheOptions global;
    global.scope = CacheScope::GLOBAL;
    ExpertCache cache(pinned, 2, eviction_policy_make(CachePolicy::LRU, 2, 4, {}, global), global);
    cache.warm(order);
    CHECK(cache.cached(1, 0));
    CHECK(cache.cached(0, 2));
    CHECK_FALSE(cache.cached(0, 1));  // pinned, not cached
    CHECK(cache.lookup(0, 1, 0) == CacheHit::PINNED);
    CHECK(cache.lookup(0, 2, 0) == CacheHit::CACHED);
    CHECK(cache.lookup(1, 3, 0) == CacheHit::MISS);
    CHECK(cache.n_cached() == 2);
}

namespace {

// A random trace of layer steps: per step and layer 1..top distinct
// experts, drawn from a skewed distribution so there is something to cache.
struct RandomTrace {
    int n_layers, n_experts;
    std::vector<std::vector<std::vector<int>>> steps;  // [step][layer] -> experts
};

RandomTrace random_trace(std::mt19937_64& rng, int n_layers, int n_experts, int top, int n_steps) {
    RandomTrace t{n_layers, n_experts, {}};
    std::vector<double> w(static_cast<size_t>(n_experts));
    for (double& x : w) x = std::uniform_real_distribution<double>(0.05, 1)(rng);
    std::discrete_distribution<int> pick(w.begin(), w.end());
    for (int s = 0; s < n_steps; s++) {
        std::vector<std::vector<int>> layers(static_cast<size_t>(n_layers));
        for (auto& experts : layers) {
            const int k = 1 + int(rng() % uint64_t(top));
            while (int(experts.size()) < k) {
                const int e = pick(rng);
                if (std::find(experts.begin(), experts.end(), e) == experts.end()) experts.push_back(e);
            }
        }
        t.steps.push_back(std::move(layers));
    }
    return t;
}

// Hits of one policy on a trace (admit every miss; no policy: never admit,
// the static plan's behaviour), the cache warmed with `warm`.
uint64_t replay_hits(const RandomTrace& t, const Residency& pinned, int slots, const CacheOptions& o,
                     const std::vector<int>& warm, const std::vector<uint64_t>& popularity, CachePolicy kind,
                     bool admit) {
    const int L = t.n_layers, E = t.n_experts;
    // Step of each access (step * L + layer) and its next use, per key.
    std::vector<uint64_t> next_seen(size_t(L) * E, CACHE_NEVER), after_seen(size_t(L) * E, CACHE_NEVER);
    std::vector<std::vector<std::vector<uint64_t>>> next(t.steps.size());
    for (size_t s = t.steps.size(); s-- > 0;) {
        next[s].resize(size_t(L));
        for (int l = L; l-- > 0;) {
            for (int e : t.steps[s][size_t(l)]) {
                const size_t k = size_t(l) * E + e;
                next[s][size_t(l)].push_back(cache_future(next_seen[k], after_seen[k]));
                after_seen[k] = next_seen[k];
                next_seen[k] = s * L + l;
            }
        }
    }
    ExpertCache cache(pinned, slots, eviction_policy_make(kind, L, E, popularity, o), o);
    cache.warm(warm);
    for (int k = 0; k < L * E; k++)
        cache.first_use(k / E, k % E, cache_future(next_seen[size_t(k)], after_seen[size_t(k)]));
    std::vector<int> missed;
    for (size_t s = 0; s < t.steps.size(); s++)
        for (int l = 0; l < L; l++) {
            const uint64_t now = s * L + l;
            const std::vector<int>& experts = t.steps[s][size_t(l)];
            missed.clear();
            for (size_t i = 0; i < experts.size(); i++)
                if (cache.lookup(l, experts[i], now, next[s][size_t(l)][i]) == CacheHit::MISS)
                    missed.push_back(experts[i]);
            if (admit) cache.admit_misses(l, missed, experts, now);
        }
    return cache.stats().pinned_hits + cache.stats().cache_hits;
}

}  // namespace

// Belady, every other policy and never admitting (the static plan) on 20 000
// random traces (both scopes, pinned and warm experts). With one expert per
// layer step (top-1 decode) Belady with bypass is optimal (the classic MIN
// argument; the protected set is the expert itself) and is never beaten.
// With several experts per step the protected set constrains every policy
// and Belady's greedy choice is no longer provably optimal (two experts of
// one future step tie, and only one may hit there): the test bounds how
// often and by how much it loses (placement/README.md gives the figures).
TEST_CASE("Belady is never beaten on random traces of one expert per step, rarely with several", "[placement][cache]") {
    std::mt19937_64 rng(18);
    int strictly_best = 0, grouped = 0, grouped_lost = 0;
    double worst_loss = 0;
    for (int trial = 0; trial < 20000; trial++) {
        const int L = 1 + int(rng() % 3), E = 3 + int(rng() % 6);
        const int top = trial % 2 ? 1 : std::min(E, 2 + int(rng() % 2));
        RandomTrace t = random_trace(rng, L, E, top, 10 + int(rng() % 60));
        std::vector<uint64_t> popularity(size_t(L) * E);
        for (uint64_t& c : popularity) c = rng() % 100;
        const int n_pinned = int(rng() % uint64_t(L * E / 2 + 1));
        const Residency pinned = static_plan_popularity(popularity, L, E, n_pinned);
        const int slots = int(rng() % uint64_t(L * E - n_pinned + 1));
        CacheOptions o;
        o.scope = rng() % 2 ? CacheScope::GLOBAL : CacheScope::PER_LAYER;
        o.lfu_half_life_tokens = 0.5 + double(rng() % 20);
        o.score_half_life_tokens = 0.5 + double(rng() % 8);
        std::vector<int> warm;
        if (rng() % 2) warm = popularity_order(popularity, L, E);
        INFO("trial " << trial << " layers " << L << " experts " << E << " top " << top << " slots " << slots
                      << " scope " << cache_scope_name(o.scope));
        const uint64_t belady = replay_hits(t, pinned, slots, o, warm, popularity, CachePolicy::BELADY, true);
        uint64_t best_other = replay_hits(t, pinned, slots, o, warm, popularity, CachePolicy::LRU, false);
        for (CachePolicy kind : {CachePolicy::LRU, CachePolicy::LFU, CachePolicy::SCORE})
            best_other = std::max(best_other, replay_hits(t, pinned, slots, o, warm, popularity, kind, true));
        strictly_best += belady > best_other;
        if (top == 1) {
            REQUIRE(belady >= best_other);
        } else {
            grouped++;
            grouped_lost += belady < best_other;
            if (belady < best_other)
                worst_loss = std::max(worst_loss, double(best_other - belady) / double(best_other));
        }
    }
    CHECK(strictly_best > 2000);  // the comparison has teeth
    INFO("Belady lost " << grouped_lost << " of " << grouped << " traces with several experts per step, worst by "
                        << 100 * worst_loss << " % of the hits");
    CHECK(grouped_lost * 200 < grouped);  // measured: 17 of 10 000
    CHECK(worst_loss < 0.15);             // measured: 2 hits of 21
}

TEST_CASE("lookup and admit allocate nothing once constructed", "[placement][cache]") {
    for (int kind = 0; kind < CACHE_POLICY_COUNT; kind++) {
        CacheOptions o;
        o.scope = kind % 2 ? CacheScope::PER_LAYER : CacheScope::GLOBAL;
        std::vector<uint64_t> popularity(32 * 8, 1);
        ExpertCache cache(Residency(32, 8), 40, eviction_policy_make(CachePolicy(kind), 32, 8, popularity, o), o);
        std::mt19937_64 rng(7);
        const std::vector<int> routed = {1, 5}, other = {0, 2, 7};
        long before = global_allocation_count();
        std::vector<int>(10).swap(*std::make_unique<std::vector<int>>());  // the counter does count
        REQUIRE(global_allocation_count() > before);
        before = global_allocation_count();
        for (uint64_t now = 0; now < 2000; now++) {
            const int layer = int(now % 32);
            const std::vector<int>& use = now % 3 ? routed : other;
            for (int e : use) cache.lookup(layer, e, now, now + rng() % 100);
            cache.admit_misses(layer, use, use, now);
            cache.admit(layer, int(rng() % 8), use, now);
        }
        REQUIRE(global_allocation_count() == before);
        CHECK(cache.stats().evictions > 0);
    }
}
