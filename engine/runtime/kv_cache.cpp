// KvCache: the block pool, block tables, reference counts and copy-on-write
// (see kv_cache.h).
#include "engine/runtime/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <string>

#include "base/errors.h"

namespace {

int blocks_for(int n_pos) {
    return (n_pos + KV_BLOCK - 1) / KV_BLOCK;
}

// Blocks per slab at most: 4096 positions (a slab is one allocation; the
// engine's first one holds one whole context).
constexpr int SLAB_BLOCKS_MAX = 256;

}  // namespace

KvCache::KvCache(int n_layers, int n_seqs, int ctx, int kv_dim, int n_blocks, StateMemory& memory)
    : memory_(memory), n_layers_(n_layers), ctx_(ctx), kv_dim_(kv_dim),
      slab_blocks_(std::min(blocks_for(ctx), SLAB_BLOCKS_MAX)) {
    assert(n_layers > 0 && n_seqs > 0 && ctx > 0 && kv_dim > 0);
    reserve_seqs(n_seqs);
    reserve_blocks(n_blocks < 0 ? n_seqs * blocks_for(ctx) : n_blocks);
}

KvCache::~KvCache() {
    for (float* slab : slabs_) memory_.free(slab);
}

void KvCache::reserve_blocks(int n) {
    const size_t slab_floats = size_t(2) * n_layers_ * part_floats();
    while (n_blocks() < n) {
        int first = n_blocks();
        slabs_.reserve(slabs_.size() + 1);  // push_back below cannot throw and leak the slab
        slabs_.push_back(memory_.alloc(slab_floats));
        refs_.resize(first + slab_blocks_, 0);
        for (int b = first; b < first + slab_blocks_; b++) {
            free_.push_back(b);
            std::push_heap(free_.begin(), free_.end(), std::greater<int>());
        }
    }
}

void KvCache::reserve_seqs(int n_seqs) {
    // Each table holds a whole context from the start, so a forward pass
    // never reallocates one.
    while (int(tables_.size()) < n_seqs) {
        tables_.emplace_back().reserve(blocks_for(ctx_));
        bases_.emplace_back().reserve(blocks_for(ctx_));
    }
}

void KvCache::reserve_growth(int n_writers, int positions) {
    reserve_blocks(blocks_in_use() + n_writers * (blocks_for(positions) + 1));
}

void KvCache::check_seq(int seq) const {
    assert(seq >= 0 && seq < n_seqs());
    (void)seq;
}

int KvCache::alloc_block() {
    if (free_.empty())
        throw MoeError("KV cache: all " + std::to_string(n_blocks()) + " blocks of " + std::to_string(KV_BLOCK) +
                       " positions are in use");
    std::pop_heap(free_.begin(), free_.end(), std::greater<int>());
    int b = free_.back();
    free_.pop_back();
    refs_[b] = 1;
    return b;
}

void KvCache::release(int block) {
    assert(refs_[block] > 0);
    if (--refs_[block] > 0) return;
    free_.push_back(block);
    std::push_heap(free_.begin(), free_.end(), std::greater<int>());
}

void KvCache::prepare_write(int seq, int pos) {
    check_seq(seq);
    assert(pos >= 0 && pos < ctx_);
    std::vector<int>& table = tables_[seq];
    std::vector<float*>& bases = bases_[seq];
    const int b = pos / KV_BLOCK;
    while (int(table.size()) <= b) {
        int id = alloc_block();
        table.push_back(id);
        bases.push_back(base(id));
    }
    int old = table[b];
    if (refs_[old] == 1) return;
    // Shared: this sequence gets its own copy of the rows before pos, in
    // every layer's K and V.
    int id = alloc_block();
    const size_t rows = size_t(pos % KV_BLOCK) * kv_dim_;
    const float* src = base(old);
    float* dst = base(id);
    for (int part = 0; part < 2 * n_layers_; part++) {
        long off = part * part_floats();
        memory_.copy(dst + off, src + off, rows);
    }
    release(old);
    table[b] = id;
    bases[b] = dst;
    cow_copies_++;
}

void KvCache::fork(int dst, int src, int n_pos) {
    check_seq(dst);
    check_seq(src);
    if (dst == src) return truncate(dst, n_pos);
    const int nb = blocks_for(n_pos);
    assert(nb <= int(tables_[src].size()));
    for (int i = 0; i < nb; i++) refs_[tables_[src][i]]++;  // before release: src may share dst's blocks
    clear(dst);
    tables_[dst].assign(tables_[src].begin(), tables_[src].begin() + nb);
    bases_[dst].assign(bases_[src].begin(), bases_[src].begin() + nb);
}

void KvCache::truncate(int seq, int n_pos) {
    check_seq(seq);
    std::vector<int>& table = tables_[seq];
    const int keep = std::min<int>(blocks_for(n_pos), int(table.size()));
    for (int i = keep; i < int(table.size()); i++) release(table[i]);
    table.resize(keep);
    bases_[seq].resize(keep);
}
