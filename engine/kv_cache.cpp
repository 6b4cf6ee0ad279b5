// KvCache allocation (see kv_cache.h).
#include "engine/kv_cache.h"

KvCache::KvCache(int n_layers, int n_slots, int ctx, int kv_dim)
    : n_layers_(n_layers), n_slots_(n_slots), ctx_(ctx), kv_dim_(kv_dim),
      half_(size_t(n_layers) * n_slots * ctx * kv_dim), data_(2 * half_) {}
