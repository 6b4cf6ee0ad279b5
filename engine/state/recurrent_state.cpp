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
    for (const auto& list : checkpoints_)
        for (const Checkpoint& c : list) memory_.free(c.block);
    for (float* b : spare_) memory_.free(b);
}

size_t RecurrentState::sequence_bytes(int n_layers, const LinearAttentionShape& s) {
    const size_t conv = size_t(s.conv_kernel - 1) * size_t(s.conv_dim());
    const size_t matrices = size_t(s.n_v_heads) * size_t(s.head_k_dim) * size_t(s.head_v_dim);
    return (1 + MAX_CHECKPOINTS) * size_t(n_layers) * (conv + matrices) * sizeof(float);
}

size_t RecurrentState::checkpoint_blocks() const {
    size_t n = spare_.size();
    for (const auto& list : checkpoints_) n += list.size();
    return n;
}

std::vector<int> RecurrentState::checkpoints(int seq) const {
    check_seq(seq);
    std::vector<int> out;
    for (const Checkpoint& c : checkpoints_[size_t(seq)]) out.push_back(c.pos);
    return out;
}

const float* RecurrentState::checkpoint_at(int seq, int pos) const {
    for (const Checkpoint& c : checkpoints_[size_t(seq)])
        if (c.pos == pos) return c.block;
    return nullptr;
}

void RecurrentState::drop_checkpoints_after(int seq, int pos) {
    auto& list = checkpoints_[size_t(seq)];
    for (size_t i = 0; i < list.size();) {
        if (list[i].pos > pos) {
            spare_.push_back(list[i].block);
            list.erase(list.begin() + long(i));
        } else {
            i++;
        }
    }
}

void RecurrentState::mark_reuse_point(int seq) {
    check_seq(seq);
    const int len = len_[size_t(seq)];
    if (len == 0 || checkpoint_at(seq, len)) return;
    auto& list = checkpoints_[size_t(seq)];
    float* block;
    if (int(list.size()) == MAX_CHECKPOINTS) {
        block = list.front().block;
        list.erase(list.begin());
    } else if (!spare_.empty()) {
        block = spare_.back();
        spare_.pop_back();
    } else {
        block = memory_.alloc(state_floats());
    }
    memory_.copy(block, blocks_[size_t(seq)], state_floats());
    list.push_back({len, block});
}

void RecurrentState::check_seq(int seq) const {
    if (seq < 0 || seq >= n_seqs())
        throw MoeError("recurrent state: sequence " + std::to_string(seq) + " of " + std::to_string(n_seqs()));
}

void RecurrentState::reset(int seq) {
    memory_.zero(blocks_[size_t(seq)], state_floats());
    len_[size_t(seq)] = 0;
    drop_checkpoints_after(seq, 0);
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
    if (n_pos >= len) return len;
    int best = 0;
    for (const Checkpoint& c : checkpoints_[size_t(seq)])
        if (c.pos <= n_pos && c.pos > best) best = c.pos;
    return best;
}

void RecurrentState::truncate(int seq, int n_pos) {
    check_seq(seq);
    if (n_pos >= len_[size_t(seq)]) return;
    if (n_pos == 0) return reset(seq);
    const float* from = checkpoint_at(seq, n_pos);
    if (!from)
        throw MoeError("recurrent state: sequence " + std::to_string(seq) + " cannot be cut back to position " +
                       std::to_string(n_pos) + " of " + std::to_string(len_[size_t(seq)]) +
                       " (no checkpoint there)");
    memory_.copy(blocks_[size_t(seq)], from, state_floats());
    len_[size_t(seq)] = n_pos;
    drop_checkpoints_after(seq, n_pos);
}

void RecurrentState::fork(int dst, int src, int n_pos) {
    check_seq(dst);
    check_seq(src);
    if (dst == src) return truncate(dst, n_pos);
    if (n_pos == 0) return reset(dst);
    const float* from = n_pos == len_[size_t(src)] ? blocks_[size_t(src)] : checkpoint_at(src, n_pos);
    if (!from)
        throw MoeError("recurrent state: a fork continues sequence " + std::to_string(src) + " from its length " +
                       std::to_string(len_[size_t(src)]) + " or a checkpoint, not from position " +
                       std::to_string(n_pos));
    memory_.copy(blocks_[size_t(dst)], from, state_floats());
    len_[size_t(dst)] = n_pos;
    drop_checkpoints_after(dst, 0);
}

void RecurrentState::reserve_seqs(int n_seqs) {
    while (int(blocks_.size()) < n_seqs) {
        blocks_.push_back(memory_.alloc(state_floats()));
        len_.push_back(0);
        checkpoints_.emplace_back();
        reset(int(blocks_.size()) - 1);
    }
}
