// SequenceState: the per-layer caches of a model's mixers, each operation
// applied to every one (see sequence_state.h), and its one cache kind today,
// the paged KvCache: the block pool, block tables, reference counts and
// copy-on-write (see kv_cache.h).
#include "engine/state/sequence_state.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <string>

#include "base/errors.h"
#include "engine/state/kv_cache.h"
#include "engine/state/recurrent_state.h"

const char* state_home_name(StateHome home) {
    return home == StateHome::HOST ? "host" : "device";
}

namespace {

class HostStateMemory final : public StateMemory {
public:
    StateHome home() const override { return StateHome::HOST; }
    float* alloc(size_t floats) override { return new float[floats]; }
    void free(float* p) override { delete[] p; }
    void copy(float* dst, const float* src, size_t floats) override { std::copy_n(src, floats, dst); }
    void zero(float* dst, size_t floats) override { std::fill_n(dst, floats, 0.0f); }
};

}  // namespace

StateMemory& host_state_memory() {
    static HostStateMemory memory;
    return memory;
}

SequenceState::SequenceState(int n_seqs, int ctx) : n_seqs_(n_seqs), ctx_(ctx) {
    assert(n_seqs > 0 && ctx > 0);
}

SequenceState::~SequenceState() = default;

SequenceCache& SequenceState::add(std::unique_ptr<SequenceCache> cache) {
    cache->reserve_seqs(n_seqs_);
    if (auto* kv = dynamic_cast<KvCache*>(cache.get())) {
        assert(!kv_ && kv->ctx() == ctx_);
        kv_ = kv;
    }
    if (auto* r = dynamic_cast<RecurrentState*>(cache.get())) {
        assert(!recurrent_);
        recurrent_ = r;
    }
    caches_.push_back(std::move(cache));
    return *caches_.back();
}

void SequenceState::prepare_write(int seq, int pos) {
    for (auto& c : caches_) c->prepare_write(seq, pos);
}

int SequenceState::reusable_prefix(int seq, int n_pos) const {
    // Down to a prefix every cache allows (a cache with reuse points may
    // allow fewer positions than it was asked about, not always more).
    for (bool changed = true; changed;) {
        changed = false;
        for (const auto& c : caches_) {
            const int p = c->reusable_prefix(seq, n_pos);
            if (p < n_pos) n_pos = p, changed = true;
        }
    }
    return n_pos;
}

bool SequenceState::cuts_anywhere() const {
    for (const auto& c : caches_)
        if (!c->cuts_anywhere()) return false;
    return true;
}

void SequenceState::mark_reuse_point(int seq) {
    for (auto& c : caches_) c->mark_reuse_point(seq);
}

void SequenceState::truncate(int seq, int n_pos) {
    for (auto& c : caches_) c->truncate(seq, n_pos);
}

void SequenceState::fork(int dst, int src, int n_pos) {
    for (auto& c : caches_) c->fork(dst, src, n_pos);
}

void SequenceState::reserve_seqs(int n_seqs) {
    n_seqs_ = std::max(n_seqs_, n_seqs);
    for (auto& c : caches_) c->reserve_seqs(n_seqs_);
}

void SequenceState::reserve_growth(int n_writers, int positions) {
    for (auto& c : caches_) c->reserve_growth(n_writers, positions);
}

size_t SequenceState::bytes() const {
    size_t n = 0;
    for (const auto& c : caches_) n += c->bytes();
    return n;
}

size_t SequenceState::bytes_in_use() const {
    size_t n = 0;
    for (const auto& c : caches_) n += c->bytes_in_use();
    return n;
}

// ---- KvCache ----

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

// ---- The state of a config's mixers ----

std::unique_ptr<SequenceState> make_sequence_state(const ModelConfig& config, int n_seqs, int ctx,
                                                   StateMemory& memory, int kv_blocks) {
    auto state = std::make_unique<SequenceState>(n_seqs, ctx);
    const int n_attention = config.n_attention_layers();
    if (n_attention > 0)
        state->add(std::make_unique<KvCache>(n_attention, n_seqs, ctx, config.n_kv_heads * config.head_dim,
                                             kv_blocks, memory));
    if (config.n_linear_layers() > 0)
        state->add(std::make_unique<RecurrentState>(config.n_linear_layers(), n_seqs, config.linear, memory));
    return state;
}

double sequence_state_bytes(const ModelConfig& config, int ctx) {
    return double(KvCache::position_bytes(config.n_attention_layers(), config.n_kv_heads * config.head_dim)) * ctx +
           double(RecurrentState::sequence_bytes(config.n_linear_layers(), config.linear));
}
