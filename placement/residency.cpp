// Residency and the static plans (see residency.h). Bad shapes and negative
// capacities throw std::invalid_argument naming the argument; nothing here
// reads files or knows a model.
#include "placement/residency.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace {

void check_shape(int n_layers, int n_experts) {
    if (n_layers < 0 || n_experts < 0)
        throw std::invalid_argument("residency: negative shape (" + std::to_string(n_layers) + " layers, " +
                                    std::to_string(n_experts) + " experts)");
}

// capacity clamped to the table; a negative one is a caller error.
int checked_capacity(int n_layers, int n_experts, int capacity) {
    if (capacity < 0) throw std::invalid_argument("static plan: negative capacity " + std::to_string(capacity));
    return std::min(capacity, n_layers * n_experts);
}

void check_counts(std::span<const uint64_t> counts, int n_layers, int n_experts, const char* what) {
    if (counts.size() != size_t(n_layers) * n_experts)
        throw std::invalid_argument(std::string(what) + ": " + std::to_string(counts.size()) +
                                    " counts for a table of " + std::to_string(n_layers) + " layers x " +
                                    std::to_string(n_experts) + " experts");
}

// Unbiased integer in [0, n) from a 64-bit generator, the same on every
// standard library (std::uniform_int_distribution's algorithm is not fixed).
uint64_t draw_below(std::mt19937_64& rng, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // largest multiple of n, exclusive
    uint64_t r;
    do r = rng();
    while (r >= limit);
    return r % n;
}

}  // namespace

Residency::Residency(int n_layers, int n_experts) : n_layers_(n_layers), n_experts_(n_experts) {
    check_shape(n_layers, n_experts);
    flags_.assign(size_t(n_layers) * n_experts, 0);
}

void Residency::set(int layer, int expert, bool on) {
    flags_[size_t(layer) * n_experts_ + expert] = on ? 1 : 0;
}

int Residency::n_resident() const {
    return int(std::count(flags_.begin(), flags_.end(), uint8_t(1)));
}

int Residency::n_resident(int layer) const {
    auto row = flags_.begin() + ptrdiff_t(layer) * n_experts_;
    return int(std::count(row, row + n_experts_, uint8_t(1)));
}

int expert_capacity(const DeviceBudget& b, int n_layers, int n_experts) {
    if (!(b.expert_bytes > 0)) throw std::invalid_argument("expert_capacity: expert_bytes must be positive");
    double free_bytes = b.budget_bytes - b.dense_bytes - b.kv_bytes - b.margin_bytes;
    if (!(free_bytes > 0)) return 0;
    double slots = std::floor(free_bytes / b.expert_bytes) - std::max(0, b.staging);
    double total = double(std::max(0, n_layers)) * std::max(0, n_experts);
    return int(std::clamp(slots, 0.0, total));
}

std::vector<int> popularity_order(std::span<const uint64_t> counts, int n_layers, int n_experts) {
    check_counts(counts, n_layers, n_experts, "popularity_order");
    std::vector<int> order(counts.size());
    std::iota(order.begin(), order.end(), 0);
    // Row-major index order is (layer, expert) order: the tie-break.
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return counts[a] != counts[b] ? counts[a] > counts[b] : a < b; });
    return order;
}

Residency static_plan_popularity(std::span<const uint64_t> counts, int n_layers, int n_experts, int capacity) {
    Residency r(n_layers, n_experts);
    check_counts(counts, n_layers, n_experts, "static_plan_popularity");
    capacity = checked_capacity(n_layers, n_experts, capacity);
    const std::vector<int> order = popularity_order(counts, n_layers, n_experts);
    for (int i = 0; i < capacity; i++) r.set(order[i] / n_experts, order[i] % n_experts, true);
    return r;
}

Residency static_plan_even(int n_layers, int n_experts, int capacity) {
    Residency r(n_layers, n_experts);
    capacity = checked_capacity(n_layers, n_experts, capacity);
    if (n_layers == 0) return r;
    int base = capacity / n_layers, extra = capacity % n_layers;
    for (int l = 0; l < n_layers; l++)
        for (int e = 0; e < base + (l < extra ? 1 : 0); e++) r.set(l, e, true);
    return r;
}

Residency static_plan_random(int n_layers, int n_experts, int capacity, uint64_t seed) {
    Residency r(n_layers, n_experts);
    capacity = checked_capacity(n_layers, n_experts, capacity);
    std::vector<int> pool(size_t(n_layers) * n_experts);
    std::iota(pool.begin(), pool.end(), 0);
    std::mt19937_64 rng(seed);
    // Partial Fisher-Yates: the first `capacity` slots end up a uniform sample.
    for (int i = 0; i < capacity; i++) {
        size_t j = i + size_t(draw_below(rng, pool.size() - i));
        std::swap(pool[i], pool[j]);
        r.set(pool[i] / n_experts, pool[i] % n_experts, true);
    }
    return r;
}

double hit_rate(const Residency& residency, std::span<const uint64_t> counts) {
    check_counts(counts, residency.n_layers(), residency.n_experts(), "hit_rate");
    double hit = 0, total = 0;
    for (int l = 0; l < residency.n_layers(); l++)
        for (int e = 0; e < residency.n_experts(); e++) {
            double c = double(counts[size_t(l) * residency.n_experts() + e]);
            total += c;
            if (residency.resident(l, e)) hit += c;
        }
    return total > 0 ? hit / total : 0.0;
}
