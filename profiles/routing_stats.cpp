// RoutingStats merge (see routing_stats.h).
#include "profiles/routing_stats.h"

#include <cassert>

void RoutingStats::merge(const RoutingStats& other) {
    assert(other.n_layers_ == n_layers_ && other.n_experts_ == n_experts_);
    for (size_t i = 0; i < counts_.size(); i++) counts_[i] += other.counts_[i];
    runs_ += other.runs_;
}
