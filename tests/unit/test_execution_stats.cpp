// ExecutionStats and the one description of its figures: every member is
// shaped, cleared, merged and subtracted; the table reaches each member once
// and the names the renderers print are unique; routing statistics count
// expert runs. Plain numbers, no model.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <string>

#include "engine/devices/execution_stats.h"
#include "profiles/routing_stats.h"

namespace {

constexpr int LAYERS = 2, EXPERTS = 3;

using S = ExecutionStats;

// The members, named here rather than taken from the table, so that a
// figure the table misses shows.
constexpr uint64_t S::*COUNTS[] = {&S::copy_bytes,  &S::layers,          &S::cache_hits,     &S::cache_evictions,
                                   &S::cache_fills, &S::prefetch_copies, &S::prefetch_useful};
constexpr std::vector<uint64_t> S::*LAYER_COUNTS[] = {&S::layer_prefetch_copies, &S::layer_prefetch_useful};
constexpr double S::*TIMES[] = {&S::predicted_cpu_ms,   &S::predicted_device_ms, &S::predicted_ms, &S::measured_cpu_ms,
                                &S::measured_device_ms, &S::measured_ms,         &S::planner_ms};
constexpr std::vector<double> S::*LAYER_TIMES[] = {&S::layer_predicted_cpu_ms, &S::layer_predicted_device_ms,
                                                   &S::layer_measured_cpu_ms, &S::layer_measured_device_ms};

// Every figure of s, in member order.
std::vector<double> figures(const ExecutionStats& s) {
    std::vector<double> v;
    for (const auto& t : s.tokens) v.insert(v.end(), t.begin(), t.end());
    v.insert(v.end(), std::begin(s.runs), std::end(s.runs));
    for (auto m : COUNTS) v.push_back(double(s.*m));
    for (auto m : TIMES) v.push_back(s.*m);
    for (auto m : LAYER_TIMES) v.insert(v.end(), (s.*m).begin(), (s.*m).end());
    for (auto m : LAYER_COUNTS)
        for (uint64_t x : s.*m) v.push_back(double(x));
    return v;
}

// Every figure of s set to a distinct value from `seed`.
ExecutionStats filled(uint64_t seed) {
    ExecutionStats s(LAYERS, EXPERTS);
    uint64_t v = seed;
    for (auto& t : s.tokens)
        for (uint64_t& x : t) x = v++;
    for (uint64_t& r : s.runs) r = v++;
    for (auto m : COUNTS) s.*m = v++;
    for (auto m : TIMES) s.*m = double(v++) / 4;
    for (auto m : LAYER_TIMES)
        for (double& x : s.*m) x = double(v++) / 4;
    for (auto m : LAYER_COUNTS)
        for (uint64_t& x : s.*m) x = v++;
    return s;
}

}  // namespace

TEST_CASE("execution statistics: merge, subtract and clear reach every figure", "[execution_stats]") {
    const ExecutionStats a = filled(1), b = filled(1000);
    const std::vector<double> fa = figures(a), fb = figures(b);
    REQUIRE(fa.size() == size_t(EXPERT_SITE_COUNT * (LAYERS * EXPERTS + 1) + 7 + 7 + 4 * LAYERS + 2 * LAYERS));
    ExecutionStats sum = a;
    sum.merge(b);
    const std::vector<double> fs = figures(sum);
    for (size_t i = 0; i < fa.size(); i++) {
        INFO("figure " << i);
        REQUIRE(fs[i] == fa[i] + fb[i]);
    }
    sum.subtract(b);
    REQUIRE(figures(sum) == fa);
    sum.clear();
    REQUIRE(figures(sum) == std::vector<double>(fa.size(), 0.0));
    REQUIRE(figures(ExecutionStats(LAYERS, EXPERTS)) == figures(sum));  // the constructor shapes every per-layer figure
}

TEST_CASE("execution statistics: the table reaches every member once", "[execution_stats]") {
    std::vector<uint64_t S::*> counts;
    std::vector<double S::*> times;
    std::vector<std::vector<double> S::*> layer_times;
    for (const ExecutionField& f : execution_stats_fields()) {
        if (auto* count = std::get_if<ExecutionField::Count>(&f.value)) counts.push_back(count->member);
        if (auto* ms = std::get_if<ExecutionField::Ms>(&f.value)) times.push_back(*ms);
        if (auto* layer = std::get_if<ExecutionField::PerLayer>(&f.value)) layer_times.push_back(layer->ms);
    }
    REQUIRE(counts == std::vector<uint64_t S::*>(std::begin(COUNTS), std::end(COUNTS)));
    REQUIRE(times.size() == std::size(TIMES));
    for (auto m : TIMES) REQUIRE(std::count(times.begin(), times.end(), m) == 1);
    REQUIRE(layer_times.size() == std::size(LAYER_TIMES));
    for (auto m : LAYER_TIMES) REQUIRE(std::count(layer_times.begin(), layer_times.end(), m) == 1);
    // The per-site values read the per-site members.
    const ExecutionStats s = filled(1);
    int per_site = 0;
    for (const ExecutionField& f : execution_stats_fields())
        if (auto* site_value = std::get_if<ExecutionField::PerSite>(&f.value)) {
            per_site++;
            for (int site = 0; site < EXPERT_SITE_COUNT; site++) {
                uint64_t want = std::string(f.key) == "runs" ? s.runs[site] : s.total_tokens(ExpertSite(site));
                REQUIRE((*site_value)(s, ExpertSite(site)) == want);
            }
        }
    REQUIRE(per_site == 2);
}

TEST_CASE("execution statistics: each figure has its own names", "[execution_stats]") {
    std::set<std::string> keys, metrics, layer_keys, labels;
    int per_site = 0, per_layer = 0;
    for (const ExecutionField& f : execution_stats_fields()) {
        INFO(f.key);
        REQUIRE(std::string(f.help).size() > 0);
        if (std::holds_alternative<ExecutionField::PerLayer>(f.value)) {
            REQUIRE(layer_keys.insert(f.key).second);
            REQUIRE(std::string(f.metric) == "moe_expert_layer_ms_total");
            per_layer++;
            continue;
        }
        per_site += std::holds_alternative<ExecutionField::PerSite>(f.value);
        REQUIRE(keys.insert(f.key).second);
        REQUIRE(metrics.insert(f.metric).second);
        REQUIRE(labels.insert(f.label).second);
    }
    REQUIRE(per_site == 2);   // runs and tokens
    REQUIRE(per_layer == 4);  // each side's prediction and measurement
    REQUIRE(keys.size() == 16);
}

TEST_CASE("routing statistics count the expert runs they were added in", "[execution_stats]") {
    RoutingStats step(LAYERS, EXPERTS), total(LAYERS, EXPERTS);
    step.add(0, 1, 3);
    step.add(1, 2, 1);
    step.add(1, 0, 0);  // no tokens: not a run
    REQUIRE(step.runs() == 2);
    total.merge(step);
    total.merge(step);
    REQUIRE(total.runs() == 4);
    REQUIRE(total.get(0, 1) == 6);
    step.clear();
    REQUIRE(step.runs() == 0);
}
