// The dynamic expert cache: device expert memory as pinned slots (the
// profile's most popular experts, chosen as the static plan chooses them)
// plus cache slots that hold experts copied in for a layer, so a later use
// of the same expert is a hit. Which cached expert makes room for a new one
// is an EvictionPolicy: LRU, LFU with exponential decay, a score combining
// profile popularity with recency, and Belady's optimal (offline: it is told
// each access's next use from a recorded trace) as the ceiling. Slots are
// one pool (CacheScope::GLOBAL) or a fixed share per layer
// (CacheScope::PER_LAYER, the default). Pure bookkeeping over plain numbers: keys are
// (layer, expert) over the caller's layers (the MoE layers, compacted, as the
// planner sees them); it never touches device memory. Everything is sized in
// the constructor: lookup, admit and admit_misses never allocate.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "placement/residency.h"

enum class CachePolicy : uint8_t { LRU, LFU, SCORE, BELADY };
constexpr int CACHE_POLICY_COUNT = int(CachePolicy::BELADY) + 1;
const char* cache_policy_name(CachePolicy policy);  // "lru", "lfu", "score", "belady"
// The policy named `name` (the names above); false when none is.
bool cache_policy_parse(const std::string& name, CachePolicy& out);

enum class CacheScope : uint8_t {
    GLOBAL,     // one pool of slots shared by all layers
    PER_LAYER,  // slots / n_layers per layer (the first slots % n_layers layers one more; default)
};
const char* cache_scope_name(CacheScope scope);  // "global", "layer"

// Time is counted in layer steps: the caller's clock advances once per
// (forward pass, MoE layer) it runs. A half-life in tokens is converted with
// the layer count (one decode token = n_layers steps).
struct CacheOptions {
    // PER_LAYER: in the replays the online policies hit more with it (a
    // prefill's burst cannot flush other layers' experts); placement/README.md.
    CacheScope scope = CacheScope::PER_LAYER;
    double lfu_half_life_tokens = 64;    // LFU: an access's weight halves every this many tokens
    double score_half_life_tokens = 4;   // SCORE: the recency term halves every this many tokens
    double score_popularity_weight = 1;  // SCORE: weight of the popularity term (recency weighs 1)
};

constexpr uint64_t CACHE_NEVER = std::numeric_limits<uint64_t>::max();  // "no next use" for Belady

// Belady's view of a key's future as one number: its next use, ties broken
// by the use after it (steps below 2^32; CACHE_NEVER when there is no next
// use). Two experts of one future layer step tie on the next use, but only
// one of them can hit there if one slot is left; the one used again sooner
// after it is the better keep.
uint64_t cache_future(uint64_t next_use, uint64_t use_after);

// What the cache keeps. keep_value: the cached key with the smallest value
// is the victim. Per-key state is sized in the constructor.
class EvictionPolicy {
public:
    virtual ~EvictionPolicy() = default;
    virtual CachePolicy kind() const = 0;
    // An access of `key` (hit or miss) at layer step `now`; next_use: its
    // future as cache_future gives it (Belady reads it; CACHE_NEVER when
    // none).
    virtual void on_access(int key, uint64_t now, uint64_t next_use) = 0;
    virtual double keep_value(int key, uint64_t now) const = 0;
    // Whether a missed key is worth admitting when `victim` must go for it.
    // Every policy admits, except Belady, which keeps the victim when the
    // victim is used again no later than the newcomer (Belady with bypass).
    virtual bool admit_over(int key, int victim, uint64_t now) const;
    // What is known of a key before its first access: the step of that
    // access (Belady reads it, so warm-started experts are valued by their
    // first use; the others ignore it).
    virtual void first_use(int key, uint64_t step);
};

// The policy of `kind` over n_layers x n_experts keys. popularity: the
// profile's (n_layers, n_experts) counts, read by SCORE (ignored by the
// others; may be empty, then SCORE is recency alone).
std::unique_ptr<EvictionPolicy> eviction_policy_make(CachePolicy kind, int n_layers, int n_experts,
                                                     std::span<const uint64_t> popularity, const CacheOptions& options);

// What a lookup found.
enum class CacheHit : uint8_t { PINNED, CACHED, MISS };

struct CacheStats {
    uint64_t pinned_hits = 0, cache_hits = 0, misses = 0;
    uint64_t admissions = 0;  // misses that took a cache slot
    uint64_t evictions = 0;   // cached experts dropped for a newcomer
    uint64_t bypasses = 0;    // misses not admitted (the policy kept the victim, or every victim was protected)
    uint64_t lookups() const { return pinned_hits + cache_hits + misses; }
    double hit_rate() const { return lookups() ? double(pinned_hits + cache_hits) / double(lookups()) : 0.0; }
};

struct AdmitResult {
    bool admitted = false;
    int slot = -1;            // the cache slot it now holds (when admitted)
    int evicted_expert = -1;  // the expert that left that slot, or -1 (a free slot)
    int evicted_layer = -1;
};

class ExpertCache {
public:
    // pinned: the experts that never move (a static plan over the same
    // layers); cache_slots: the further experts the device holds. An
    // expert that is pinned is never cached. std::invalid_argument for
    // negative slots or no policy; more slots than unpinned experts are
    // capped. The policy must be made for the same shape.
    ExpertCache(const Residency& pinned, int cache_slots, std::unique_ptr<EvictionPolicy> policy,
                const CacheOptions& options = {});

    // Fills free cache slots with `experts` ((layer, expert) keys, layer *
    // n_experts + expert, in order) before any access: a warm start from the
    // profile (the static plan's next most popular experts). Skips pinned
    // or already cached keys, stops when the key's pool is full.
    void warm(std::span<const int> keys);

    // Belady only: the step of the expert's first access (see
    // EvictionPolicy::first_use); call for every key before the replay.
    void first_use(int layer, int expert, uint64_t step);

    // One routed expert of the layer step `now` (advance now once per layer
    // step, non-decreasing). Records the access with the policy.
    CacheHit lookup(int layer, int expert, uint64_t now, uint64_t next_use = CACHE_NEVER);

    // After a copy of a missed expert: keep it in a cache slot of its pool,
    // evicting the policy's victim when the pool is full. A victim is never
    // one of `protected_experts` of the same layer (the experts the layer's
    // plan uses: they may be computing from their slots). Not admitted when
    // every candidate is protected or the policy declines (a bypass: the
    // copy ran from a staging slot), nor when it is already resident
    // (nothing happens, no statistic moves).
    AdmitResult admit(int layer, int expert, std::span<const int> protected_experts, uint64_t now);

    // Admits every missed expert of one layer step, the most valuable to
    // the policy first (so Belady fills slots in order of next use),
    // protecting `protected_experts` (the layer's routed experts). Returns
    // how many were admitted. Scratch is preallocated (n_experts).
    int admit_misses(int layer, std::span<const int> missed, std::span<const int> protected_experts, uint64_t now);
    // Sorts experts of one layer most valuable to the policy first (ties by
    // expert), the order admit_misses admits in. Never allocates.
    void order_by_value(int layer, std::span<int> experts, uint64_t now) const;
    // Records an access of the expert with the policy only (no statistic
    // moves): a prefetched expert counts as used at the step it came in, so
    // the layer's next admission does not take it straight back out.
    void touch(int layer, int expert, uint64_t now);

    bool pinned(int layer, int expert) const { return pinned_.resident(layer, expert); }
    bool cached(int layer, int expert) const { return key_slot_[size_t(key(layer, expert))] >= 0; }
    bool resident(int layer, int expert) const { return pinned(layer, expert) || cached(layer, expert); }
    // The cache slot holding the expert (the executor's device buffer
    // index), -1 when it is not cached.
    int slot_of(int layer, int expert) const { return key_slot_[size_t(key(layer, expert))]; }
    // The key (layer * n_experts + expert) cache slot `slot` holds, -1 when free.
    int key_in(int slot) const { return slot_key_[size_t(slot)]; }

    int n_layers() const { return pinned_.n_layers(); }
    int n_experts() const { return pinned_.n_experts(); }
    int cache_slots() const { return int(slot_key_.size()); }
    int n_cached() const;
    const CacheStats& stats() const { return stats_; }
    const EvictionPolicy& policy() const { return *policy_; }
    CacheScope scope() const { return options_.scope; }

private:
    int key(int layer, int expert) const { return layer * pinned_.n_experts() + expert; }
    int pool_of(int layer) const { return options_.scope == CacheScope::GLOBAL ? 0 : layer; }
    void check(int layer, int expert) const;

    Residency pinned_;
    std::unique_ptr<EvictionPolicy> policy_;
    CacheOptions options_;
    std::vector<int> slot_key_;               // slot -> key, -1 when free
    std::vector<int> key_slot_;               // key -> slot, -1 when not cached
    std::vector<int> pool_begin_, pool_end_;  // slots [begin, end) of each pool (1 pool, or one per layer)
    std::vector<int> order_;                  // admit_misses scratch (n_experts)
    CacheStats stats_;
};
