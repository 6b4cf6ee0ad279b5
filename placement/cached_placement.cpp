// CachedPlacement (see cached_placement.h and placement/README.md "The cache
// in the executor").
#include "placement/cached_placement.h"

#include <algorithm>
#include <stdexcept>
#include <string>

CachedPlacement::CachedPlacement(const LatencyModel& model, double expert_bytes, const Residency& pinned,
                                 std::span<const uint64_t> popularity, const CachedPlacementConfig& config)
    : config_(config),
      pinned_(pinned),
      planner_(model, expert_bytes, std::max(1, pinned.n_experts())),
      copy_ms_(model.copy_ms(expert_bytes)) {
    const int L = pinned.n_layers(), E = pinned.n_experts();
    if (!popularity.empty() && popularity.size() != size_t(L) * size_t(E))
        throw std::invalid_argument("CachedPlacement: popularity is not layers x experts");
    if (config.prefetch && !config.policy)
        throw std::invalid_argument("CachedPlacement: prefetch needs a cache policy (slots to prefetch into)");
    if (config.prefetch && config.policy == CachePolicy::BELADY)
        throw std::invalid_argument("CachedPlacement: Belady is offline (it needs the future), not a prefetch policy");
    if (config.cache_slots < 0) throw std::invalid_argument("CachedPlacement: negative cache slots");
    pinned_slot_.assign(size_t(L) * size_t(E), -1);
    for (int k = 0; k < L * E; k++)
        if (pinned.resident(k / E, k % E)) {
            pinned_slot_[size_t(k)] = int(pinned_slot_key_.size());
            pinned_slot_key_.push_back(k);
        }
    if (config.policy) {
        cache_.emplace(pinned, config.cache_slots,
                       eviction_policy_make(*config.policy, L, E, popularity, config.options), config.options);
        if (!popularity.empty()) cache_->warm(popularity_order(popularity, L, E));
    }
    prefetched_.assign(size_t(cache_slots()), 0);
    stats_.layer_prefetches.assign(size_t(L), 0);
    stats_.layer_prefetches_useful.assign(size_t(L), 0);
    const size_t n = size_t(std::max(1, E));
    routed_.reserve(n);
    cpu_missed_.reserve(n);
    protect_.reserve(n);
    order_.reserve(n);
    inputs_.resize(n);
    sites_.resize(n);
    index_of_.resize(n);
    extra_.reserve(2 * n);
}

int CachedPlacement::slot_key(int slot) const {
    if (slot < 0 || slot >= n_slots())
        throw std::invalid_argument("CachedPlacement: no device slot " + std::to_string(slot));
    return slot < n_pinned() ? pinned_slot_key_[size_t(slot)] : cache_->key_in(slot - n_pinned());
}

int CachedPlacement::device_slot(int layer, int expert) const {
    const int p = pinned_slot_[size_t(key(layer, expert))];
    if (p >= 0) return p;
    const int c = cache_ ? cache_->slot_of(layer, expert) : -1;
    return c >= 0 ? n_pinned() + c : -1;
}

bool CachedPlacement::admit_into(int layer, int expert, std::span<const int> protect, uint64_t now, int& slot) {
    const AdmitResult a = cache_->admit(layer, expert, protect, now);
    if (!a.admitted) return false;
    prefetched_[size_t(a.slot)] = 0;  // whatever a prefetch brought here is gone
    slot = n_pinned() + a.slot;
    return true;
}

PlanCost CachedPlacement::plan(int layer, std::span<const StepExpert> experts, uint64_t now, std::span<StepSite> sites,
                               std::span<const uint64_t> future) {
    const size_t m = experts.size();
    if (layer < 0 || layer >= n_layers())
        throw std::invalid_argument("CachedPlacement::plan: no layer " + std::to_string(layer));
    if (m > inputs_.size() || sites.size() != m || (!future.empty() && future.size() != m))
        throw std::invalid_argument(
            "CachedPlacement::plan: spans of different sizes, or more experts than the layer has");
    routed_.clear();
    cpu_missed_.clear();
    for (size_t j = 0; j < m; j++) {
        const int e = experts[j].expert;
        if (e < 0 || e >= n_experts())
            throw std::invalid_argument("CachedPlacement::plan: no expert " + std::to_string(e));
        bool hit;
        if (cache_) {
            hit = cache_->lookup(layer, e, now, future.empty() ? CACHE_NEVER : future[j]) != CacheHit::MISS;
            const int c = cache_->slot_of(layer, e);
            if (c >= 0 && prefetched_[size_t(c)]) {
                stats_.prefetches_useful++;
                stats_.layer_prefetches_useful[size_t(layer)]++;
            }
        } else {
            hit = pinned_.resident(layer, e);
            (hit ? stats_.cache.pinned_hits : stats_.cache.misses)++;
        }
        inputs_[j] = {experts[j].n_tokens, hit};
        routed_.push_back(e);
        index_of_[size_t(e)] = int(j);
    }
    // A prefetch is useful at the step it was made for or not at all.
    if (cache_)
        for (int e = 0; e < n_experts(); e++) {
            const int c = cache_->slot_of(layer, e);
            if (c >= 0) prefetched_[size_t(c)] = 0;
        }

    const PlanCost cost = planner_.plan(std::span(inputs_.data(), m), std::span(sites_.data(), m));
    // Copies are admitted most valuable first, so with too few slots the
    // policy's favourites stay.
    order_.clear();
    for (size_t j = 0; j < m; j++)
        if (sites_[j] == ExpertSite::COPY) order_.push_back(experts[j].expert);
    if (cache_) cache_->order_by_value(layer, order_, now);
    for (int e : order_) {
        int slot = -1;
        if (cache_) admit_into(layer, e, routed_, now, slot);
        sites[size_t(index_of_[size_t(e)])] = {ExpertSite::COPY, slot};
    }
    for (size_t j = 0; j < m; j++) {
        const int e = experts[j].expert;
        if (sites_[j] == ExpertSite::DEVICE) {
            sites[j] = {ExpertSite::DEVICE, device_slot(layer, e)};
        } else if (sites_[j] == ExpertSite::CPU) {
            sites[j] = {ExpertSite::CPU, -1};
            if (!inputs_[j].resident && experts[j].n_tokens > 0) cpu_missed_.push_back(e);
        }
    }
    stats_.copies += order_.size();
    // The copy stream at the layer's predicted end: what spilled over from
    // before plus the layer's copies, less the layer's time (negative: idle).
    end_backlog_ms_ = spill_ms_ + double(order_.size()) * copy_ms_ - cost.makespan_ms();
    spill_ms_ = std::max(0.0, end_backlog_ms_);
    last_layer_ = layer;
    if (cache_) stats_.cache = cache_->stats();
    return cost;
}

std::span<const ExtraCopy> CachedPlacement::extra_copies(int next_layer, std::span<const StepExpert> predicted,
                                                         uint64_t now) {
    extra_.clear();
    const int layer = last_layer_;
    last_layer_ = -1;
    if (!cache_ || layer < 0) return {};
    // An extra copy starts only while the copy stream is predicted idle at
    // the layer's end: it delays nothing of this layer, and at most one
    // copy's time spills into the next.
    double backlog = end_backlog_ms_;
    if (config_.prefetch && next_layer >= 0 && next_layer < n_layers() && !predicted.empty()) {
        if (predicted.size() > size_t(n_experts()))
            throw std::invalid_argument("CachedPlacement::extra_copies: more predicted experts than the layer has");
        // The prediction is protected as a whole: one guess never evicts another.
        protect_.clear();
        order_.clear();
        for (size_t i = 0; i < predicted.size(); i++) {
            const int e = predicted[i].expert;
            if (e < 0 || e >= n_experts())
                throw std::invalid_argument("CachedPlacement::extra_copies: no expert " + std::to_string(e));
            protect_.push_back(e);
            if (device_slot(next_layer, e) < 0) order_.push_back(int(i));
        }
        std::sort(order_.begin(), order_.end(), [&](int a, int b) {
            const StepExpert &pa = predicted[size_t(a)], &pb = predicted[size_t(b)];
            return pa.n_tokens != pb.n_tokens ? pa.n_tokens > pb.n_tokens : pa.expert < pb.expert;
        });
        for (int i : order_) {
            if (backlog > 0) break;
            const int e = predicted[size_t(i)].expert;
            int slot = -1;
            if (!admit_into(next_layer, e, protect_, now, slot)) continue;
            cache_->touch(next_layer, e, now);
            prefetched_[size_t(slot - n_pinned())] = 1;
            extra_.push_back({next_layer, e, slot, true});
            stats_.prefetches++;
            stats_.layer_prefetches[size_t(next_layer)]++;
            backlog += copy_ms_;
        }
    }
    if (!cpu_missed_.empty() && backlog <= 0) {
        cache_->order_by_value(layer, cpu_missed_, now);
        for (int e : cpu_missed_) {
            if (backlog > 0) break;
            int slot = -1;
            // The layer's routed experts are done computing, but a fill must
            // not evict one: the next step of this layer likely wants it.
            if (!admit_into(layer, e, routed_, now, slot)) continue;
            extra_.push_back({layer, e, slot, false});
            stats_.fills++;
            backlog += copy_ms_;
        }
    }
    spill_ms_ = std::max(0.0, backlog);
    stats_.cache = cache_->stats();
    return extra_;
}
