// RecurrentState: fixed-size per-sequence state of the Gated DeltaNet
// layers (see recurrent_state.h).
#include "engine/state/recurrent_state.h"

#include <string>

#include "base/errors.h"

RecurrentState::RecurrentState(int n_layers, int n_seqs, const LinearAttentionShape& shape, StateMemory& memory)
    : n_layers_(n_layers), shape_(shape), memory_(memory) {
    reserve_seqs(n_seqs);
}

RecurrentState::~RecurrentState() {
    for (float* b : blocks_) memory_.free(b);
}

size_t RecurrentState::sequence_bytes(int n_layers, const LinearAttentionShape& s) {
    const size_t conv = size_t(s.conv_kernel - 1) * size_t(s.conv_dim());
    const size_t matrices = size_t(s.n_v_heads) * size_t(s.head_k_dim) * size_t(s.head_v_dim);
    return size_t(n_layers) * (conv + matrices) * sizeof(float);
}

void RecurrentState::check_seq(int seq) const {
    if (seq < 0 || seq >= n_seqs())
        throw MoeError("recurrent state: sequence " + std::to_string(seq) + " of " + std::to_string(n_seqs()));
}

void RecurrentState::reset(int seq) {
    memory_.zero(blocks_[size_t(seq)], size_t(n_layers_) * layer_floats());
    len_[size_t(seq)] = 0;
}

void RecurrentState::prepare_write(int seq, int pos) {
    check_seq(seq);
    if (pos == 0) reset(seq);
    int& len = len_[size_t(seq)];
    if (pos != len)
        throw MoeError("recurrent state: sequence " + std::to_string(seq) + " holds " + std::to_string(len) +
                       " positions; it goes on from there or starts again, not from position " + std::to_string(pos));
    len = pos + 1;
}

int RecurrentState::reusable_prefix(int seq, int n_pos) const {
    check_seq(seq);
    const int len = len_[size_t(seq)];
    return n_pos >= len ? len : 0;
}

void RecurrentState::truncate(int seq, int n_pos) {
    check_seq(seq);
    if (n_pos >= len_[size_t(seq)]) return;
    if (n_pos != 0)
        throw MoeError("recurrent state: sequence " + std::to_string(seq) + " cannot be cut back to position " +
                       std::to_string(n_pos) + " of " + std::to_string(len_[size_t(seq)]));
    reset(seq);
}

void RecurrentState::fork(int dst, int src, int n_pos) {
    check_seq(dst);
    check_seq(src);
    if (dst == src) return truncate(dst, n_pos);
    if (n_pos == 0) return reset(dst);
    if (n_pos != len_[size_t(src)])
        throw MoeError("recurrent state: a fork continues sequence " + std::to_string(src) + " from its length " +
                       std::to_string(len_[size_t(src)]) + ", not from position " + std::to_string(n_pos));
    memory_.copy(blocks_[size_t(dst)], blocks_[size_t(src)], size_t(n_layers_) * layer_floats());
    len_[size_t(dst)] = n_pos;
}

void RecurrentState::reserve_seqs(int n_seqs) {
    while (int(blocks_.size()) < n_seqs) {
        blocks_.push_back(memory_.alloc(size_t(n_layers_) * layer_floats()));
        len_.push_back(0);
        reset(int(blocks_.size()) - 1);
    }
}
