// The replay simulator of `bench cache` (see cache_replay.h and
// placement/README.md "Replaying a trace").
#include "placement/cache_replay.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "placement/layer_plan.h"

namespace {

// A step's token range [begin, end): a request's prefill tokens together,
// each decode token alone.
struct Step {
    size_t begin, end;
    bool decode;
};

std::vector<Step> trace_steps(const RoutingTrace& t) {
    std::vector<Step> steps;
    for (size_t i = 0; i < t.n_tokens(); i++) {
        const bool decode = t.phase[i] == TracePhase::DECODE;
        const bool joins =
            !decode && !steps.empty() && !steps.back().decode && t.request[steps.back().begin] == t.request[i];
        if (joins) {
            steps.back().end = i + 1;
        } else {
            steps.push_back({i, i + 1, decode});
        }
    }
    return steps;
}

}  // namespace

CacheReplayResult cache_replay(const RoutingTrace& trace, std::span<const uint64_t> popularity,
                               const CacheReplayConfig& config, const LatencyModel& model, double expert_bytes) {
    const int L = int(trace.layers.size()), E = trace.model.n_experts, K = trace.top_k;
    if (popularity.size() != size_t(L) * size_t(E))
        throw std::invalid_argument("cache_replay: popularity is not the trace's MoE layers x experts");
    const int capacity = std::clamp(config.capacity, 0, L * E);
    const int slots = config.policy ? config.cache_slots : 0;
    if (slots < 0 || slots > capacity) throw std::invalid_argument("cache_replay: cache_slots outside [0, capacity]");
    const Residency pinned = static_plan_popularity(popularity, L, E, capacity - slots);

    // Accesses: per step and layer, the distinct routed experts (ascending)
    // and their token counts; group g = step * L + layer is layer step g.
    const std::vector<Step> steps = trace_steps(trace);
    std::vector<int> acc_expert, acc_tokens;
    std::vector<size_t> group_begin;
    std::vector<int> count(size_t(std::max(E, 1)), 0);
    for (const Step& s : steps)
        for (int l = 0; l < L; l++) {
            group_begin.push_back(acc_expert.size());
            std::fill(count.begin(), count.end(), 0);
            for (size_t i = s.begin; i < s.end; i++)
                for (int j = 0; j < K; j++) count[size_t(trace.experts[trace.row(i, size_t(l)) + size_t(j)])]++;
            for (int e = 0; e < E; e++)
                if (count[size_t(e)] > 0) {
                    acc_expert.push_back(e);
                    acc_tokens.push_back(count[size_t(e)]);
                }
        }
    group_begin.push_back(acc_expert.size());

    // Belady's view of each access's future: its key's next layer step and the one after.
    std::vector<uint64_t> future(acc_expert.size(), CACHE_NEVER);
    std::vector<uint64_t> next_seen(size_t(L) * E, CACHE_NEVER), after_seen(size_t(L) * E, CACHE_NEVER);
    for (size_t g = group_begin.size() - 1; g-- > 0;)
        for (size_t a = group_begin[g]; a < group_begin[g + 1]; a++) {
            const size_t k = size_t(g % size_t(L)) * E + size_t(acc_expert[a]);
            future[a] = cache_future(next_seen[k], after_seen[k]);
            after_seen[k] = next_seen[k];
            next_seen[k] = g;
        }

    std::optional<ExpertCache> cache;
    if (config.policy) {
        cache.emplace(pinned, slots, eviction_policy_make(*config.policy, L, E, popularity, config.options),
                      config.options);
        cache->warm(popularity_order(popularity, L, E));
        for (int k = 0; k < L * E; k++)
            cache->first_use(k / E, k % E, cache_future(next_seen[size_t(k)], after_seen[size_t(k)]));
    }

    CacheReplayResult r;
    LayerPlanner planner(model, expert_bytes, std::max(E, 1));
    std::vector<PlanInput> inputs(size_t(std::max(E, 1)));
    std::vector<ExpertSite> sites(inputs.size());
    std::vector<int> routed, missed;
    routed.reserve(inputs.size());
    missed.reserve(inputs.size());
    const double copy_ms = model.copy_ms(expert_bytes);
    for (size_t s = 0; s < steps.size(); s++) {
        const bool decode = steps[s].decode;
        double layers_ms = 0, stream_ms = 0;
        for (int l = 0; l < L; l++) {
            const size_t g = s * size_t(L) + size_t(l);
            const size_t b = group_begin[g], m = group_begin[g + 1] - b;
            routed.clear();
            missed.clear();
            for (size_t j = 0; j < m; j++) {
                const int e = acc_expert[b + j], n = acc_tokens[b + j];
                bool hit;
                if (cache) {
                    hit = cache->lookup(l, e, g, future[b + j]) != CacheHit::MISS;
                } else {
                    hit = pinned.resident(l, e);
                    (hit ? r.cache.pinned_hits : r.cache.misses)++;
                }
                inputs[j] = {n, hit};
                routed.push_back(e);
                if (!hit) missed.push_back(e);
                r.routed += uint64_t(n);
                r.routed_hits += hit ? uint64_t(n) : 0;
                if (decode) {
                    r.decode_lookups++;
                    r.decode_hits += hit;
                }
            }
            const PlanCost cost = planner.plan(std::span(inputs.data(), m), std::span(sites.data(), m));
            layers_ms += cost.makespan_ms();
            for (size_t j = 0; j < m; j++)
                if (sites[j] == ExpertSite::COPY) {
                    r.copies++;
                    r.bytes_copied += expert_bytes;
                    stream_ms += copy_ms;
                }
            if (!cache || missed.empty()) continue;
            cache->admit_misses(l, missed, routed, g);
            // A miss the planner ran on the CPU that now holds a slot was copied beside it.
            for (size_t j = 0; j < m; j++)
                if (!inputs[j].resident && sites[j] != ExpertSite::COPY && cache->cached(l, routed[j])) {
                    r.copies++;
                    r.bytes_copied += expert_bytes;
                    stream_ms += copy_ms;
                }
        }
        const double step_ms = std::max(layers_ms, stream_ms);
        r.expert_ms += step_ms;
        r.steps++;
        if (decode) {
            r.decode_expert_ms += step_ms;
            r.decode_steps++;
        }
    }
    if (cache) r.cache = cache->stats();
    return r;
}
