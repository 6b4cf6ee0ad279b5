// RoutingStats: counts of tokens routed to each (layer, expert), the raw
// material of popularity profiles, live metrics and the experts panel, and
// the expert runs they came in (the forward pass adds each routed expert of
// a layer once per pass). Pure bookkeeping: it never runs a model.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

class RoutingStats {
public:
    RoutingStats(int n_layers, int n_experts)
        : n_layers_(n_layers), n_experts_(n_experts), counts_(size_t(n_layers) * n_experts, 0) {}

    // One run of an expert on n_tokens tokens.
    void add(int layer, int expert, uint64_t n_tokens) {
        counts_[size_t(layer) * n_experts_ + expert] += n_tokens;
        runs_ += n_tokens > 0;
    }
    uint64_t get(int layer, int expert) const { return counts_[size_t(layer) * n_experts_ + expert]; }
    uint64_t runs() const { return runs_; }  // add() calls with tokens
    void clear() {
        std::fill(counts_.begin(), counts_.end(), 0);
        runs_ = 0;
    }
    // this += other (same shape).
    void merge(const RoutingStats& other);

    int n_layers() const { return n_layers_; }
    int n_experts() const { return n_experts_; }
    const std::vector<uint64_t>& counts() const { return counts_; }  // (n_layers, n_experts)

private:
    int n_layers_, n_experts_;
    std::vector<uint64_t> counts_;
    uint64_t runs_ = 0;
};
