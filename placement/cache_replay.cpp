// The replay simulator of `bench cache` (see cache_replay.h and
// placement/README.md "Replaying a trace").
#include "placement/cache_replay.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "placement/cached_placement.h"
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

    CachedPlacementConfig pc;
    pc.policy = config.policy;
    pc.cache_slots = slots;
    pc.options = config.options;
    CachedPlacement placement(model, expert_bytes, pinned, popularity, pc);
    if (ExpertCache* cache = placement.cache())
        for (int k = 0; k < L * E; k++)
            cache->first_use(k / E, k % E, cache_future(next_seen[size_t(k)], after_seen[size_t(k)]));

    CacheReplayResult r;
    std::vector<StepExpert> experts(size_t(std::max(E, 1)));
    std::vector<StepSite> sites(experts.size());
    const double copy_ms = model.copy_ms(expert_bytes);
    for (size_t s = 0; s < steps.size(); s++) {
        const bool decode = steps[s].decode;
        double layers_ms = 0, stream_ms = 0;
        for (int l = 0; l < L; l++) {
            const size_t g = s * size_t(L) + size_t(l);
            const size_t b = group_begin[g], m = group_begin[g + 1] - b;
            for (size_t j = 0; j < m; j++) experts[j] = {acc_expert[b + j], acc_tokens[b + j]};
            const uint64_t hits_before = placement.stats().cache.pinned_hits + placement.stats().cache.cache_hits;
            const PlanCost cost = placement.plan(l, std::span(experts.data(), m), g, std::span(sites.data(), m),
                                                 std::span(future.data() + b, m));
            layers_ms += cost.makespan_ms();
            if (decode) {
                r.decode_lookups += m;
                r.decode_hits += placement.stats().cache.pinned_hits + placement.stats().cache.cache_hits - hits_before;
            }
            for (size_t j = 0; j < m; j++) {
                r.routed += uint64_t(experts[j].n_tokens);
                // Resident before the plan: it runs on the device without a copy.
                if (sites[j].site == ExpertSite::DEVICE) r.routed_hits += uint64_t(experts[j].n_tokens);
                if (sites[j].site == ExpertSite::COPY) {
                    r.copies++;
                    r.bytes_copied += expert_bytes;
                    stream_ms += copy_ms;
                }
            }
            // Fills of the layer's CPU-run misses in its idle copy time (no
            // prediction in a trace: no prefetch).
            const size_t fills = placement.extra_copies(-1, {}, g).size();
            r.copies += fills;
            r.bytes_copied += double(fills) * expert_bytes;
            stream_ms += double(fills) * copy_ms;
        }
        const double step_ms = std::max(layers_ms, stream_ms);
        r.expert_ms += step_ms;
        r.steps++;
        if (decode) {
            r.decode_expert_ms += step_ms;
            r.decode_steps++;
        }
    }
    r.cache = placement.stats().cache;
    return r;
}
