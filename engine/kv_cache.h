// KvCache: keys and values of every layer for several sequences ("slots"),
// fp32, contiguous per (layer, slot) so attention streams one sequence's
// positions in order. Allocated once; never grows.
#pragma once
#include <cstddef>
#include <vector>

class KvCache {
public:
    KvCache(int n_layers, int n_slots, int ctx, int kv_dim);

    // (ctx, kv_dim) blocks; pos indexes rows.
    float* k(int layer, int slot, int pos) { return data_.data() + offset(layer, slot, pos); }
    float* v(int layer, int slot, int pos) { return data_.data() + offset(layer, slot, pos) + half_; }
    const float* k(int layer, int slot, int pos) const { return data_.data() + offset(layer, slot, pos); }
    const float* v(int layer, int slot, int pos) const { return data_.data() + offset(layer, slot, pos) + half_; }

    int ctx() const { return ctx_; }
    int n_slots() const { return n_slots_; }
    int kv_dim() const { return kv_dim_; }
    size_t bytes() const { return data_.size() * sizeof(float); }

private:
    size_t offset(int layer, int slot, int pos) const {
        return (size_t(layer) * n_slots_ + slot) * size_t(ctx_) * kv_dim_ + size_t(pos) * kv_dim_;
    }
    int n_layers_, n_slots_, ctx_, kv_dim_;
    size_t half_;  // all K blocks first, then all V blocks
    std::vector<float> data_;
};
