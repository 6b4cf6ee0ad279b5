// SequenceState: the per-layer caches of a model's mixers, each operation
// applied to every one (see sequence_state.h).
#include "engine/runtime/sequence_state.h"

#include <algorithm>
#include <cassert>

#include "engine/runtime/kv_cache.h"

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
    caches_.push_back(std::move(cache));
    return *caches_.back();
}

void SequenceState::prepare_write(int seq, int pos) {
    for (auto& c : caches_) c->prepare_write(seq, pos);
}

int SequenceState::reusable_prefix(int seq, int n_pos) const {
    for (const auto& c : caches_) n_pos = std::min(n_pos, c->reusable_prefix(seq, n_pos));
    return n_pos;
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
