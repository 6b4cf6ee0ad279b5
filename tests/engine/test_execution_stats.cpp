// ExecutionStats and the one description of its figures: every member is
// shaped, cleared, merged and subtracted; the table reaches each member once
// (checked against the struct's size, not a list kept here) and the names
// the renderers print are unique; routing statistics count
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
using F = ExecutionField;

// Every figure of s, walking the table: the per-site members first, then
// each field's in table order.
std::vector<double> figures(const ExecutionStats& s) {
    std::vector<double> v;
    for (const auto& t : s.tokens) v.insert(v.end(), t.begin(), t.end());
    v.insert(v.end(), std::begin(s.runs), std::end(s.runs));
    for (const ExecutionField& f : execution_stats_fields()) {
        if (auto* count = std::get_if<F::Count>(&f.value)) v.push_back(double(s.*count->member));
        if (auto* ms = std::get_if<F::Ms>(&f.value)) v.push_back(s.*(*ms));
        if (auto* layer = std::get_if<F::PerLayer>(&f.value))
            v.insert(v.end(), (s.*layer->ms).begin(), (s.*layer->ms).end());
        if (auto* layer = std::get_if<F::PerLayerCount>(&f.value))
            for (uint64_t x : s.*layer->counts) v.push_back(double(x));
    }
    return v;
}

// Every figure of s set to a distinct value from `seed`.
ExecutionStats filled(uint64_t seed) {
    ExecutionStats s(LAYERS, EXPERTS);
    uint64_t v = seed;
    for (auto& t : s.tokens)
        for (uint64_t& x : t) x = v++;
    for (uint64_t& r : s.runs) r = v++;
    for (const ExecutionField& f : execution_stats_fields()) {
        if (auto* count = std::get_if<F::Count>(&f.value)) s.*count->member = v++;
        if (auto* ms = std::get_if<F::Ms>(&f.value)) s.*(*ms) = double(v++) / 4;
        if (auto* layer = std::get_if<F::PerLayer>(&f.value))
            for (double& x : s.*layer->ms) x = double(v++) / 4;
        if (auto* layer = std::get_if<F::PerLayerCount>(&f.value))
            for (uint64_t& x : s.*layer->counts) x = v++;
    }
    return s;
}

// The bytes of the members the table reaches (each once: its own slot in
// `seen`), with the shape and the per-site arrays the per-site fields read.
size_t reached_bytes() {
    std::set<const void*> seen;
    const ExecutionStats probe;
    auto slot = [&](const auto& member) {
        REQUIRE(seen.insert(&member).second);  // no member reached twice
        return sizeof(member);
    };
    size_t bytes = sizeof(probe.n_layers) + sizeof(probe.n_experts) + sizeof(probe.tokens) + sizeof(probe.runs);
    for (const ExecutionField& f : execution_stats_fields()) {
        if (auto* count = std::get_if<F::Count>(&f.value)) bytes += slot(probe.*count->member);
        if (auto* ms = std::get_if<F::Ms>(&f.value)) bytes += slot(probe.*(*ms));
        if (auto* layer = std::get_if<F::PerLayer>(&f.value)) bytes += slot(probe.*layer->ms);
        if (auto* layer = std::get_if<F::PerLayerCount>(&f.value)) bytes += slot(probe.*layer->counts);
    }
    return bytes;
}

}  // namespace

TEST_CASE("execution statistics: merge, subtract and clear reach every figure", "[execution_stats]") {
    const ExecutionStats a = filled(1), b = filled(1000);
    const std::vector<double> fa = figures(a), fb = figures(b);
    REQUIRE(fa.size() == size_t(EXPERT_SITE_COUNT * (LAYERS * EXPERTS + 1) + 7 + 7 + 4 * LAYERS + 2 * LAYERS));
    for (size_t i = 0; i < fa.size(); i++) REQUIRE(fa[i] != 0);  // every figure set, so every one is checked below
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
    // Derived from the struct, not from a list kept here: the members the
    // table reaches, each once, plus the shape and the per-site arrays, make
    // up the whole struct (its members are 8-byte aligned: no padding). A
    // member added outside the table changes sizeof and fails this.
    REQUIRE(reached_bytes() == sizeof(ExecutionStats));
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
    int per_site = 0, per_layer = 0, per_layer_count = 0;
    for (const ExecutionField& f : execution_stats_fields()) {
        INFO(f.key);
        REQUIRE(std::string(f.help).size() > 0);
        if (std::holds_alternative<ExecutionField::PerLayer>(f.value)) {
            REQUIRE(layer_keys.insert(f.key).second);
            REQUIRE(std::string(f.metric) == "moe_expert_layer_ms_total");
            per_layer++;
            continue;
        }
        if (std::holds_alternative<ExecutionField::PerLayerCount>(f.value)) {
            REQUIRE(layer_keys.insert(f.key).second);
            REQUIRE(std::string(f.metric) == "moe_expert_layer_prefetch_total");
            per_layer_count++;
            continue;
        }
        per_site += std::holds_alternative<ExecutionField::PerSite>(f.value);
        REQUIRE(keys.insert(f.key).second);
        REQUIRE(metrics.insert(f.metric).second);
        REQUIRE(labels.insert(f.label).second);
    }
    REQUIRE(per_site == 2);   // runs and tokens
    REQUIRE(per_layer == 4);        // each side's prediction and measurement
    REQUIRE(per_layer_count == 2);  // prefetch copies and the useful ones
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
