// RecurrentState: the SequenceCache of the Gated DeltaNet layers
// (Qwen3.5, Qwen3-Next): per layer and sequence a fixed-size state, the
// conv's window (the last conv_kernel - 1 inputs of the q/k/v channels,
// before the conv) and the delta rule's matrix per value head (head_k_dim x
// head_v_dim, fp32). Its layer l is the model's l-th delta-net layer. A
// recurrent state holds one point of its sequence: it can only go on from
// its length, start again from 0, or be copied whole (a forked beam). Reuse
// points add more: mark_reuse_point copies a sequence's state at its length
// into a checkpoint (at most MAX_CHECKPOINTS per sequence, the oldest
// dropped first), and the sequence can later be cut back to, or forked from,
// any checkpoint's position (the checkpoint copied back). Cutting back drops
// the checkpoints past the cut; starting again from 0 drops them all, so a
// checkpoint always describes the sequence's present first positions.
// Memory from a StateMemory (host or device). Must not know about tokens,
// weights or beams.
#pragma once
#include <cstddef>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/state/sequence_state.h"

class RecurrentState final : public SequenceCache {
public:
    RecurrentState(int n_layers, int n_seqs, const LinearAttentionShape& shape,
                   StateMemory& memory = host_state_memory());
    ~RecurrentState() override;
    RecurrentState(const RecurrentState&) = delete;
    RecurrentState& operator=(const RecurrentState&) = delete;

    const char* kind() const override { return "recurrent"; }
    // pos 0 starts the sequence again (a zero state); any other position
    // must be its length (the next one): MoeError otherwise.
    void prepare_write(int seq, int pos) override;
    // Its length when n_pos reaches it, else the latest checkpoint at or
    // before n_pos, else 0.
    int reusable_prefix(int seq, int n_pos) const override;
    void truncate(int seq, int n_pos) override;
    void fork(int dst, int src, int n_pos) override;
    bool cuts_anywhere() const override { return false; }
    void mark_reuse_point(int seq) override;
    void reserve_seqs(int n_seqs) override;
    void reserve_growth(int, int) override {}

    // Checkpoints a sequence keeps (llama.cpp's server keeps up to 32 per slot
    // but spaces them 8192 tokens apart; a chat needs the latest few).
    static constexpr int MAX_CHECKPOINTS = 4;

    size_t bytes_per_position() const override { return 0; }
    // The live state and room for MAX_CHECKPOINTS checkpoints.
    size_t bytes_per_sequence() const override { return (1 + MAX_CHECKPOINTS) * state_bytes(); }
    // The live states and the checkpoints allocated so far.
    size_t bytes() const override { return (size_t(n_seqs()) + checkpoint_blocks()) * state_bytes(); }
    size_t bytes_in_use() const override { return bytes(); }
    StateHome home() const override { return memory_.home(); }

    int n_seqs() const { return int(blocks_.size()); }
    int length(int seq) const { return len_[size_t(seq)]; }
    // Layer l of seq: the conv window ((conv_kernel - 1) x conv_dim, oldest
    // input first) and the matrices (n_v_heads x head_k_dim x head_v_dim),
    // in the memory's home.
    float* conv(int layer, int seq) const { return blocks_[size_t(seq)] + size_t(layer) * layer_floats(); }
    float* matrices(int layer, int seq) const { return conv(layer, seq) + conv_floats(); }

    // Positions of seq's checkpoints, oldest first.
    std::vector<int> checkpoints(int seq) const;

    // Bytes of one sequence's state, checkpoints included, for these layers and shape.
    static size_t sequence_bytes(int n_layers, const LinearAttentionShape& shape);

private:
    size_t conv_floats() const { return size_t(shape_.conv_kernel - 1) * size_t(shape_.conv_dim()); }
    size_t matrix_floats() const {
        return size_t(shape_.n_v_heads) * size_t(shape_.head_k_dim) * size_t(shape_.head_v_dim);
    }
    size_t layer_floats() const { return conv_floats() + matrix_floats(); }
    size_t state_floats() const { return size_t(n_layers_) * layer_floats(); }
    size_t state_bytes() const { return state_floats() * sizeof(float); }
    size_t checkpoint_blocks() const;
    void reset(int seq);
    void check_seq(int seq) const;
    // The checkpoint of seq at pos; null when there is none.
    const float* checkpoint_at(int seq, int pos) const;
    // Drops seq's checkpoints past pos (their blocks kept for reuse).
    void drop_checkpoints_after(int seq, int pos);

    struct Checkpoint {
        int pos;
        float* block;
    };
    int n_layers_;
    LinearAttentionShape shape_;
    StateMemory& memory_;
    std::vector<float*> blocks_;  // one allocation per sequence, every layer's state
    std::vector<int> len_;
    std::vector<std::vector<Checkpoint>> checkpoints_;  // per sequence, oldest first
    std::vector<float*> spare_;                         // checkpoint blocks not in use
};
