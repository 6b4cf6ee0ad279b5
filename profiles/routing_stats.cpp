// RoutingStats merge (see routing_stats.h).
#include "profiles/routing_stats.h"

#include <cassert>

void RoutingStats::merge(const RoutingStats& other) {
    assert(other.n_layers_ == n_layers_ && other.n_experts_ == n_experts_);
    for (size_t i = 0; i < counts_.size(); i++) counts_[i] += other.counts_[i];
    for (size_t l = 0; l < predicted_.size(); l++) {
        predicted_[l] += other.predicted_[l];
        predicted_right_[l] += other.predicted_right_[l];
    }
    runs_ += other.runs_;
}
