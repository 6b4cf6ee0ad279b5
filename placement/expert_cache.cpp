// The dynamic expert cache's slots and its eviction policies (see
// expert_cache.h and placement/README.md "The dynamic expert cache").
#include "placement/expert_cache.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace {

class LruPolicy final : public EvictionPolicy {
public:
    explicit LruPolicy(size_t keys) : last_(keys, -1.0) {}
    CachePolicy kind() const override { return CachePolicy::LRU; }
    void on_access(int key, uint64_t now, uint64_t) override { last_[size_t(key)] = double(now); }
    double keep_value(int key, uint64_t) const override { return last_[size_t(key)]; }

private:
    std::vector<double> last_;  // step of the last access, -1 before any
};

// score(now) = sum over accesses of 2^(-(now - t) / h). Kept as log2 of the
// score at the last access plus last / h, which orders keys as score(now)
// does for every now and never underflows.
class LfuPolicy final : public EvictionPolicy {
public:
    LfuPolicy(size_t keys, double half_life_steps) : h_(half_life_steps), log_score_(keys, -INFINITY), last_(keys, 0) {}
    CachePolicy kind() const override { return CachePolicy::LFU; }
    void on_access(int key, uint64_t now, uint64_t) override {
        const size_t k = size_t(key);
        const double decayed = std::exp2(log_score_[k] - double(now - last_[k]) / h_);
        log_score_[k] = std::log2(decayed + 1.0);
        last_[k] = now;
    }
    double keep_value(int key, uint64_t) const override {
        return log_score_[size_t(key)] + double(last_[size_t(key)]) / h_;
    }

private:
    double h_;
    std::vector<double> log_score_;
    std::vector<uint64_t> last_;
};

// popularity_weight * count / max count + 2^(-(now - last) / h): the
// profile's long-run popularity plus how recently the expert ran.
class ScorePolicy final : public EvictionPolicy {
public:
    ScorePolicy(size_t keys, std::span<const uint64_t> popularity, double half_life_steps, double weight)
        : h_(half_life_steps), popularity_(keys, 0.0), last_(keys, -1.0) {
        uint64_t max = 0;
        for (uint64_t c : popularity) max = std::max(max, c);
        if (max > 0)
            for (size_t k = 0; k < popularity.size(); k++)
                popularity_[k] = weight * double(popularity[k]) / double(max);
    }
    CachePolicy kind() const override { return CachePolicy::SCORE; }
    void on_access(int key, uint64_t now, uint64_t) override { last_[size_t(key)] = double(now); }
    double keep_value(int key, uint64_t now) const override {
        const double last = last_[size_t(key)];
        const double recency = last < 0 ? 0.0 : std::exp2(-(double(now) - last) / h_);
        return popularity_[size_t(key)] + recency;
    }

private:
    double h_;
    std::vector<double> popularity_;
    std::vector<double> last_;
};

// Belady's MIN with bypass: the victim is the cached key used again
// farthest in the future; a newcomer used no sooner than that is not
// admitted.
class BeladyPolicy final : public EvictionPolicy {
public:
    explicit BeladyPolicy(size_t keys) : next_(keys, CACHE_NEVER) {}
    CachePolicy kind() const override { return CachePolicy::BELADY; }
    void on_access(int key, uint64_t, uint64_t next_use) override { next_[size_t(key)] = next_use; }
    void first_use(int key, uint64_t step) override { next_[size_t(key)] = step; }
    // Exact while next uses stay below 2^21 layer steps (the tie-break by
    // the use after then rounds; the next use itself orders exactly up to
    // 2^53). admit_over compares the integers exactly.
    double keep_value(int key, uint64_t) const override { return -double(next_[size_t(key)]); }
    bool admit_over(int key, int victim, uint64_t) const override { return next_[size_t(key)] < next_[size_t(victim)]; }

private:
    std::vector<uint64_t> next_;
};

}  // namespace

uint64_t cache_future(uint64_t next_use, uint64_t use_after) {
    constexpr uint64_t LOW = 0xffffffffu;
    if (next_use >= LOW) return CACHE_NEVER;
    return (next_use << 32) | std::min(use_after, LOW);
}

bool EvictionPolicy::admit_over(int, int, uint64_t) const {
    return true;
}

void EvictionPolicy::first_use(int, uint64_t) {}

const char* cache_policy_name(CachePolicy policy) {
    switch (policy) {
    case CachePolicy::LRU:
        return "lru";
    case CachePolicy::LFU:
        return "lfu";
    case CachePolicy::SCORE:
        return "score";
    case CachePolicy::BELADY:
        return "belady";
    }
    return "?";
}

bool cache_policy_parse(const std::string& name, CachePolicy& out) {
    for (int i = 0; i < CACHE_POLICY_COUNT; i++)
        if (name == cache_policy_name(CachePolicy(i))) {
            out = CachePolicy(i);
            return true;
        }
    return false;
}

const char* cache_scope_name(CacheScope scope) {
    return scope == CacheScope::GLOBAL ? "global" : "layer";
}

std::unique_ptr<EvictionPolicy> eviction_policy_make(CachePolicy kind, int n_layers, int n_experts,
                                                     std::span<const uint64_t> popularity,
                                                     const CacheOptions& options) {
    if (n_layers < 0 || n_experts < 0) throw std::invalid_argument("eviction_policy_make: negative shape");
    const size_t keys = size_t(n_layers) * size_t(n_experts);
    if (!popularity.empty() && popularity.size() != keys)
        throw std::invalid_argument("eviction_policy_make: popularity is not n_layers x n_experts");
    if (!(options.lfu_half_life_tokens > 0) || !(options.score_half_life_tokens > 0) ||
        !(options.score_popularity_weight >= 0))
        throw std::invalid_argument("eviction_policy_make: half-lives must be positive, the weight non-negative");
    const double steps_per_token = std::max(1, n_layers);
    switch (kind) {
    case CachePolicy::LRU:
        return std::make_unique<LruPolicy>(keys);
    case CachePolicy::LFU:
        return std::make_unique<LfuPolicy>(keys, options.lfu_half_life_tokens * steps_per_token);
    case CachePolicy::SCORE:
        return std::make_unique<ScorePolicy>(keys, popularity, options.score_half_life_tokens * steps_per_token,
                                             options.score_popularity_weight);
    case CachePolicy::BELADY:
        return std::make_unique<BeladyPolicy>(keys);
    }
    throw std::invalid_argument("eviction_policy_make: unknown policy");
}

ExpertCache::ExpertCache(const Residency& pinned, int cache_slots, std::unique_ptr<EvictionPolicy> policy,
                         const CacheOptions& options)
    : pinned_(pinned), policy_(std::move(policy)), options_(options) {
    if (cache_slots < 0) throw std::invalid_argument("ExpertCache: cache_slots is negative");
    if (!policy_) throw std::invalid_argument("ExpertCache: no policy");
    const int n_layers = pinned_.n_layers(), n_experts = pinned_.n_experts();
    const int free_experts = n_layers * n_experts - pinned_.n_resident();
    cache_slots = std::min(cache_slots, free_experts);  // more slots than experts to hold buy nothing
    slot_key_.assign(size_t(cache_slots), -1);
    key_slot_.assign(size_t(n_layers) * size_t(n_experts), -1);
    if (options_.scope == CacheScope::GLOBAL || n_layers == 0) {
        pool_begin_ = {0};
        pool_end_ = {cache_slots};
    } else {
        const int base = cache_slots / n_layers, extra = cache_slots % n_layers;
        int at = 0;
        for (int l = 0; l < n_layers; l++) {
            pool_begin_.push_back(at);
            at += base + (l < extra ? 1 : 0);
            pool_end_.push_back(at);
        }
    }
    order_.resize(size_t(n_experts));
}

void ExpertCache::check(int layer, int expert) const {
    if (layer < 0 || layer >= n_layers() || expert < 0 || expert >= n_experts())
        throw std::invalid_argument("ExpertCache: (layer, expert) out of range");
}

int ExpertCache::n_cached() const {
    int n = 0;
    for (int k : slot_key_) n += k >= 0;
    return n;
}

void ExpertCache::warm(std::span<const int> keys) {
    for (int k : keys) {
        if (k < 0 || size_t(k) >= key_slot_.size()) throw std::invalid_argument("ExpertCache::warm: key out of range");
        const int layer = k / n_experts(), expert = k % n_experts();
        if (pinned(layer, expert) || key_slot_[size_t(k)] >= 0) continue;
        const int pool = pool_of(layer);
        for (int s = pool_begin_[size_t(pool)]; s < pool_end_[size_t(pool)]; s++)
            if (slot_key_[size_t(s)] < 0) {
                slot_key_[size_t(s)] = k;
                key_slot_[size_t(k)] = s;
                break;
            }
    }
}

void ExpertCache::first_use(int layer, int expert, uint64_t step) {
    check(layer, expert);
    policy_->first_use(key(layer, expert), step);
}

CacheHit ExpertCache::lookup(int layer, int expert, uint64_t now, uint64_t next_use) {
    check(layer, expert);
    policy_->on_access(key(layer, expert), now, next_use);
    if (pinned(layer, expert)) {
        stats_.pinned_hits++;
        return CacheHit::PINNED;
    }
    if (cached(layer, expert)) {
        stats_.cache_hits++;
        return CacheHit::CACHED;
    }
    stats_.misses++;
    return CacheHit::MISS;
}

AdmitResult ExpertCache::admit(int layer, int expert, std::span<const int> protected_experts, uint64_t now) {
    check(layer, expert);
    AdmitResult r;
    if (resident(layer, expert)) return r;
    const int k = key(layer, expert), pool = pool_of(layer);
    const int begin = pool_begin_[size_t(pool)], end = pool_end_[size_t(pool)];
    int slot = -1, victim_slot = -1;
    double victim_value = INFINITY;
    for (int s = begin; s < end && slot < 0; s++) {
        const int held = slot_key_[size_t(s)];
        if (held < 0) {
            slot = s;
            break;
        }
        if (held / n_experts() == layer && std::find(protected_experts.begin(), protected_experts.end(),
                                                     held % n_experts()) != protected_experts.end())
            continue;
        const double v = policy_->keep_value(held, now);
        if (v < victim_value) {
            victim_value = v;
            victim_slot = s;
        }
    }
    if (slot < 0) {
        if (victim_slot < 0 || !policy_->admit_over(k, slot_key_[size_t(victim_slot)], now)) {
            stats_.bypasses++;
            return r;
        }
        const int victim = slot_key_[size_t(victim_slot)];
        key_slot_[size_t(victim)] = -1;
        r.evicted_layer = victim / n_experts();
        r.evicted_expert = victim % n_experts();
        stats_.evictions++;
        slot = victim_slot;
    }
    slot_key_[size_t(slot)] = k;
    key_slot_[size_t(k)] = slot;
    stats_.admissions++;
    r.admitted = true;
    r.slot = slot;
    return r;
}

void ExpertCache::order_by_value(int layer, std::span<int> experts, uint64_t now) const {
    check(layer, 0);
    const int base = layer * n_experts();
    // Most valuable first; ties by expert so the order never depends on the caller's.
    std::sort(experts.begin(), experts.end(), [&](int a, int b) {
        const double va = policy_->keep_value(base + a, now), vb = policy_->keep_value(base + b, now);
        return va != vb ? va > vb : a < b;
    });
}

void ExpertCache::touch(int layer, int expert, uint64_t now) {
    check(layer, expert);
    policy_->on_access(key(layer, expert), now, CACHE_NEVER);
}

int ExpertCache::admit_misses(int layer, std::span<const int> missed, std::span<const int> protected_experts,
                              uint64_t now) {
    check(layer, 0);
    if (missed.size() > order_.size()) throw std::invalid_argument("ExpertCache::admit_misses: more than n_experts");
    const size_t m = missed.size();
    std::copy(missed.begin(), missed.end(), order_.begin());
    order_by_value(layer, std::span(order_.data(), m), now);
    int admitted = 0;
    for (size_t i = 0; i < m; i++) admitted += admit(layer, order_[i], protected_experts, now).admitted;
    return admitted;
}
