// RoutingStats: counts of tokens routed to each (layer, expert), the raw
// material of popularity profiles, live metrics and the experts panel, and
// the expert runs they came in (the forward pass adds each routed expert of
// a layer once per pass); and, when the forward pass predicts each layer's
// experts one layer ahead, how many predicted choices the layer then routed
// to. Pure bookkeeping: it never runs a model.
#pragma once
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <vector>

class RoutingStats {
public:
    RoutingStats(int n_layers, int n_experts)
        : n_layers_(n_layers),
          n_experts_(n_experts),
          counts_(size_t(n_layers) * n_experts, 0),
          predicted_(size_t(n_layers), 0),
          predicted_right_(size_t(n_layers), 0) {}

    // One run of an expert on n_tokens tokens.
    void add(int layer, int expert, uint64_t n_tokens) {
        counts_[size_t(layer) * n_experts_ + expert] += n_tokens;
        runs_ += n_tokens > 0;
    }
    // A layer's next-layer prediction: `predicted` expert choices (tokens x
    // top-k), `right` of them among the experts the layer then routed to.
    void add_prediction(int layer, uint64_t predicted, uint64_t right) {
        predicted_[size_t(layer)] += predicted;
        predicted_right_[size_t(layer)] += right;
    }
    uint64_t get(int layer, int expert) const { return counts_[size_t(layer) * n_experts_ + expert]; }
    uint64_t runs() const { return runs_; }  // add() calls with tokens
    void clear() {
        std::fill(counts_.begin(), counts_.end(), 0);
        std::fill(predicted_.begin(), predicted_.end(), 0);
        std::fill(predicted_right_.begin(), predicted_right_.end(), 0);
        runs_ = 0;
    }
    // this += other (same shape).
    void merge(const RoutingStats& other) {
        assert(other.n_layers_ == n_layers_ && other.n_experts_ == n_experts_);
        for (size_t i = 0; i < counts_.size(); i++) counts_[i] += other.counts_[i];
        for (size_t l = 0; l < predicted_.size(); l++) {
            predicted_[l] += other.predicted_[l];
            predicted_right_[l] += other.predicted_right_[l];
        }
        runs_ += other.runs_;
    }

    int n_layers() const { return n_layers_; }
    int n_experts() const { return n_experts_; }
    const std::vector<uint64_t>& counts() const { return counts_; }  // (n_layers, n_experts)
    const std::vector<uint64_t>& predicted() const { return predicted_; }              // (n_layers)
    const std::vector<uint64_t>& predicted_right() const { return predicted_right_; }  // (n_layers)

private:
    int n_layers_, n_experts_;
    std::vector<uint64_t> counts_;
    std::vector<uint64_t> predicted_, predicted_right_;
    uint64_t runs_ = 0;
};
