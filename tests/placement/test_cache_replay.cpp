// The replay simulator (placement/cache_replay.h) on a trace small enough
// to count by hand: which lookups hit, how many experts are copied and how
// many bytes (a planner's copy that fills a cache slot is one copy, not
// two; a CPU-run miss is filled in only while the copy stream is predicted
// idle at its step's end), and the predicted expert time of each step, for static
// popularity and LRU, with copies the planner never makes and with copies
// it makes.
#include <catch2/catch.hpp>
#include <vector>

#include "placement/cache_replay.h"

namespace {

// One MoE layer of 4 experts, top-1: a 2-token prefill on expert 0, then
// decode tokens on 0 1 0 2 1 3 0 1.
RoutingTrace hand_trace() {
    ModelFingerprint f{"MixtralForCausalLM", 1, 4, 1, 1};
    RoutingTrace t = routing_trace_empty(f);
    auto add = [&](TracePhase phase, int pos, int expert) {
        t.request.push_back(0);
        t.phase.push_back(phase);
        t.position.push_back(pos);
        t.experts.push_back(expert);
        t.weights.push_back(1.0f);
    };
    add(TracePhase::PREFILL, 0, 0);
    add(TracePhase::PREFILL, 1, 0);
    int pos = 2;
    for (int e : {0, 1, 0, 2, 1, 3, 0, 1}) add(TracePhase::DECODE, pos++, e);
    return t;
}

// CPU 1 ms... per expert whatever its tokens, device 0.1 ms, a copy
// copy_ms: the planner copies a lone miss when copy_ms + 0.1 < cpu_ms.
LatencyModel flat_model(double cpu_ms, double copy_ms) {
    LatencyModel m;
    m.has_device = true;
    m.cpu.stream_ms = cpu_ms;
    m.device.stream_ms = 0.1;
    m.copy.latency_ms = copy_ms;
    m.copy.bytes_per_ms = 1e30;
    return m;
}

constexpr double EXPERT_BYTES = 1000;
// All counts 0: the popularity order is by key, so experts 0 and 1 are the
// static plan's (and the cache's warm start).
const std::vector<uint64_t> POPULARITY = {0, 0, 0, 0};

CacheReplayResult run(std::optional<CachePolicy> policy, const LatencyModel& m) {
    CacheReplayConfig c;
    c.policy = policy;
    c.capacity = 2;
    c.cache_slots = policy ? 2 : 0;
    return cache_replay(hand_trace(), POPULARITY, c, m, EXPERT_BYTES);
}

}  // namespace

TEST_CASE("cache replay counts hits, copies and bytes as by hand: no planner copies", "[placement][cache]") {
    const LatencyModel m = flat_model(1.0, 2.0);  // a copy (2 + 0.1) never beats the CPU (1)
    // Static: 0 and 1 pinned. Prefill hits 0; decode hits 0 1 0 _ 1 _ 0 1, misses 2 and 3 on the CPU.
    CacheReplayResult s = run(std::nullopt, m);
    CHECK(s.cache.lookups() == 9);
    CHECK(s.cache.pinned_hits == 7);
    CHECK(s.decode_hits == 6);
    CHECK(s.copies == 0);
    CHECK(s.bytes_copied == 0);
    CHECK(s.routed == 10);
    CHECK(s.routed_hits == 8);
    CHECK(s.decode_expert_ms == Approx(6 * 0.1 + 2 * 1.0));
    CHECK(s.expert_ms == Approx(0.1 + 6 * 0.1 + 2 * 1.0));
    // LRU, 2 slots warm with 0 and 1. A CPU-run miss is copied in beside
    // it (a fill) while the copy stream is predicted idle at the step's end;
    // a fill (2 ms) outlasts the step (1 ms) and the rest spills into the
    // next. Hits 0 (prefill), 0 1 0. 2: idle, filled, evicts 1 (1 ms
    // spills). 1: the spill ends with the step, filled, evicts 0 (2 ms
    // spill). 3: still busy (1 ms left at its end), not filled. 0: the
    // stream free at its end, filled, evicts 2. 1 hits. So 5 hits, 4 misses,
    // 3 fills; a step takes max(its layer, its copies): 2 2 1 2 for the misses.
    CacheReplayResult l = run(CachePolicy::LRU, m);
    CHECK(l.cache.cache_hits == 5);
    CHECK(l.cache.misses == 4);
    CHECK(l.cache.evictions == 3);
    CHECK(l.copies == 3);
    CHECK(l.bytes_copied == 3 * EXPERT_BYTES);
    CHECK(l.decode_expert_ms == Approx(4 * 0.1 + 2 + 2 + 1 + 2));
    // The CPU at 2.05 ms: still faster than a copy and the device (2.1),
    // and now a fill (2 ms) ends within its step, never spilling. Hits 0 (prefill), 0 1 0; then 2
    // evicts 1, 1 evicts 0, 3 evicts 2, 0 evicts 1, 1 evicts 3: 5 misses, each
    // run on the CPU and filled in; each such step takes max(2.05, 2).
    CacheReplayResult f = run(CachePolicy::LRU, flat_model(2.05, 2.0));
    CHECK(f.cache.cache_hits == 4);
    CHECK(f.cache.misses == 5);
    CHECK(f.cache.evictions == 5);
    CHECK(f.copies == 5);
    CHECK(f.bytes_copied == 5 * EXPERT_BYTES);
    CHECK(f.decode_expert_ms == Approx(3 * 0.1 + 5 * 2.05));
    CHECK(f.decode_expert_ms_per_token() == Approx((3 * 0.1 + 5 * 2.05) / 8));
}

TEST_CASE("cache replay counts a planner's copy into a cache slot once", "[placement][cache]") {
    const LatencyModel m = flat_model(5.0, 1.0);  // a lone miss is copied: 1 + 0.1 < 5
    CacheReplayResult s = run(std::nullopt, m);
    CHECK(s.copies == 2);  // 2 and 3, each copied for its layer and dropped
    CHECK(s.bytes_copied == 2 * EXPERT_BYTES);
    CHECK(s.decode_expert_ms == Approx(6 * 0.1 + 2 * 1.1));
    CacheReplayResult l = run(CachePolicy::LRU, m);
    CHECK(l.cache.misses == 5);
    CHECK(l.copies == 5);  // the planner's copies, which stay in the slots
    CHECK(l.bytes_copied == 5 * EXPERT_BYTES);
    CHECK(l.decode_expert_ms == Approx(3 * 0.1 + 5 * 1.1));
    // Belady, same slots: 2 (never again) and 3 (never again) are run from
    // staging and not kept: 0 and 1 hit throughout.
    CacheReplayResult b = run(CachePolicy::BELADY, m);
    CHECK(b.cache.misses == 2);
    CHECK(b.cache.bypasses == 2);
    CHECK(b.copies == 2);
    CHECK(b.hit_rate() == Approx(7.0 / 9));
}
