// KvCache: fp32 keys and values of the attention layers (the SequenceCache
// of attention, sequence_state.h; its layer l is the model's l-th attention
// layer) for several sequences, in paged blocks of KV_BLOCK positions taken from one pool. Each sequence has a
// block table (its blocks in position order); a block may belong to several
// sequences (reference counts), so forking a sequence (a beam) copies its
// table, not its keys and values, and a write into a shared block first
// copies that one block (copy-on-write). Blocks are never moved once
// allocated; the pool grows only through reserve_blocks(), never while a
// forward pass runs. Must not know about tokens, models or beams.
//
// Memory: blocks live in slabs of slab_blocks() blocks, laid out
// [layer][K or V][block of the slab][position in block][kv_dim], and a free
// block is always the lowest free id. So a sequence written in one go (a
// prompt) gets consecutive blocks whose K rows of a layer follow each other
// in memory, exactly as a contiguous cache: attention reads them as one run.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "engine/state/sequence_state.h"

// Positions per block: a fork shares all full blocks and copies at most the
// one partial block it writes into.
constexpr int KV_BLOCK = 16;

class KvCache final : public SequenceCache {
public:
    // n_seqs sequences of up to ctx positions each; a pool of n_blocks blocks
    // (-1: n_seqs * ceil(ctx / KV_BLOCK), every sequence full with nothing
    // shared), rounded up to whole slabs.
    // Blocks come from memory (host memory by default).
    KvCache(int n_layers, int n_seqs, int ctx, int kv_dim, int n_blocks = -1,
            StateMemory& memory = host_state_memory());
    ~KvCache() override;
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;

    // Makes position pos of seq writable: appends blocks up to it and, when
    // its block is shared, replaces it with a private copy of rows
    // [0, pos % KV_BLOCK) (writing pos invalidates the positions after it).
    // Throws MoeError when the pool has no free block.
    void prepare_write(int seq, int pos) override;
    // Row pos (kv_dim floats) of a layer; for k/v writes after prepare_write.
    float* k(int layer, int seq, int pos) { return row(layer, seq, pos, 0); }
    float* v(int layer, int seq, int pos) { return row(layer, seq, pos, 1); }
    // Where position pos of seq starts in its block: layer l's K row is at
    // row_base(seq, pos) + k_offset(l), its V row at + v_offset(l).
    float* row_base(int seq, int pos) const {
        return bases_[seq][pos / KV_BLOCK] + long(pos % KV_BLOCK) * kv_dim_;
    }

    // Read side: the base pointer of each block of seq, in position order.
    // Layer l's K rows of block b start at blocks(seq)[b] + k_offset(l), its
    // V rows at + v_offset(l), kv_dim floats apart; consecutive blocks of a
    // slab have bases KV_BLOCK * kv_dim apart (their rows follow each other).
    const float* const* blocks(int seq) const { return bases_[seq].data(); }
    long k_offset(int layer) const { return long(2 * layer) * part_floats(); }
    long v_offset(int layer) const { return long(2 * layer + 1) * part_floats(); }

    // dst shares the first n_pos positions of src (its old blocks released).
    // Costs O(blocks) integers; no key or value is copied.
    void fork(int dst, int src, int n_pos) override;
    // Keeps the blocks of seq's first n_pos positions, releases the rest.
    void truncate(int seq, int n_pos) override;
    bool cuts_anywhere() const override { return true; }
    void mark_reuse_point(int) override {}
    void clear(int seq) { truncate(seq, 0); }
    // Any prefix can be kept.
    int reusable_prefix(int, int n_pos) const override { return n_pos; }
    // Grows the pool to at least n blocks (whole slabs) and the sequences to
    // at least n_seqs; existing blocks and tables stay where they are.
    // Between forward passes only.
    void reserve_blocks(int n);
    void reserve_seqs(int n_seqs) override;
    // Per writer its new positions' blocks and one partial block copied on write.
    void reserve_growth(int n_writers, int positions) override;

    int blocks_in_use() const { return int(refs_.size() - free_.size()); }
    int n_blocks() const { return int(refs_.size()); }
    int slab_blocks() const { return slab_blocks_; }
    long cow_copies() const { return cow_copies_; }  // blocks copied on write, since construction
    int ctx() const { return ctx_; }
    int n_seqs() const { return int(tables_.size()); }
    int kv_dim() const { return kv_dim_; }
    const char* kind() const override { return "kv"; }
    // fp32 keys and values of n_layers layers of kv_dim each, for one position.
    static size_t position_bytes(int n_layers, int kv_dim) { return size_t(2) * n_layers * kv_dim * sizeof(float); }
    size_t bytes_per_position() const override { return position_bytes(n_layers_, kv_dim_); }
    size_t bytes_per_sequence() const override { return 0; }
    size_t bytes() const override { return size_t(n_blocks()) * KV_BLOCK * bytes_per_position(); }
    size_t bytes_in_use() const override { return size_t(blocks_in_use()) * KV_BLOCK * bytes_per_position(); }
    StateHome home() const override { return memory_.home(); }

private:
    // Floats of one (layer, K or V) part of a slab: slab_blocks blocks of rows.
    long part_floats() const { return long(slab_blocks_) * KV_BLOCK * kv_dim_; }
    float* base(int block) const {
        return slabs_[block / slab_blocks_] + long(block % slab_blocks_) * KV_BLOCK * kv_dim_;
    }
    float* row(int layer, int seq, int pos, int kv) {
        return bases_[seq][pos / KV_BLOCK] + long(2 * layer + kv) * part_floats() + long(pos % KV_BLOCK) * kv_dim_;
    }
    int alloc_block();
    void release(int block);
    void check_seq(int seq) const;

    StateMemory& memory_;
    int n_layers_, ctx_, kv_dim_, slab_blocks_;
    std::vector<float*> slabs_;                    // from memory_, never moved once allocated
    std::vector<int> refs_;                        // per block: sequences holding it
    std::vector<int> free_;                        // blocks with refs 0: a min-heap, lowest id first
    std::vector<std::vector<int>> tables_;         // per sequence: block ids in position order
    std::vector<std::vector<float*>> bases_;       // per sequence: their base pointers
    long cow_copies_ = 0;
};
