// SequenceState: what the token mixers of a model keep per sequence between
// forward passes, as a set of per-layer caches behind one interface
// (SequenceCache). Each cache serves the layers of one kind of mixer
// (engine/runtime/token_mixer.h): the paged KvCache (kv_cache.h) those of
// attention today; a fixed-size recurrent state or a latent cache those of
// the mixers later families bring. The engine's prefix reuse and beam search
// speak only to SequenceState, so a new cache kind needs nothing of them.
//
// A sequence is a slot (0 .. n_seqs - 1) whose positions 0, 1, ... are
// written in order; a forward pass writes a batch's entries after
// prepare_write. The caches know nothing of tokens, weights or beams; only
// make_sequence_state (at the end) reads a config, to pick the caches its
// mixers need.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model/model_config.h"

// Where a cache's memory is: host memory or a device's.
enum class StateHome : uint8_t { HOST, DEVICE };
const char* state_home_name(StateHome home);  // "host", "device"

// The memory caches take their storage from: host memory
// (host_state_memory()) or a device's (the CUDA backend's). A cache keeps
// only pointers into it and asks it to copy (copy-on-write, forks).
class StateMemory {
public:
    virtual ~StateMemory() = default;
    virtual StateHome home() const = 0;
    // floats of uninitialised memory; freed with free().
    virtual float* alloc(size_t floats) = 0;
    virtual void free(float* p) = 0;
    // dst <- src, floats each; ordered before the next forward pass reads them.
    virtual void copy(float* dst, const float* src, size_t floats) = 0;
    // dst <- 0, floats of them; ordered the same way.
    virtual void zero(float* dst, size_t floats) = 0;
};
// new[] / memcpy.
StateMemory& host_state_memory();

// One kind of per-sequence cache, for the layers whose mixer keeps it.
// Between forward passes only, except prepare_write (which ForwardPass::run
// calls for each entry before layer 0).
class SequenceCache {
public:
    virtual ~SequenceCache() = default;
    virtual const char* kind() const = 0;  // "kv", ...

    // Makes position pos of seq writable (pos at most the sequence's length:
    // appending; writing pos drops what came after it). Throws MoeError when
    // the cache has no room left.
    virtual void prepare_write(int seq, int pos) = 0;
    // The longest prefix, at most n_pos positions, that seq can be cut back
    // to with truncate(): any n_pos for paged keys and values; a recurrent
    // state only the positions it holds a state after (its length, or 0).
    virtual int reusable_prefix(int seq, int n_pos) const = 0;
    // Keeps seq's first n_pos positions (n_pos as reusable_prefix allows), drops the rest.
    virtual void truncate(int seq, int n_pos) = 0;
    // Whether reusable_prefix allows every n_pos up to the length (paged
    // keys and values); a cache that does not needs reuse points.
    virtual bool cuts_anywhere() const = 0;
    // Keeps what it takes to cut seq back to its present length later (a
    // reuse point: where a chat's next prompt may part from this one). Does
    // nothing in a cache that cuts anywhere.
    virtual void mark_reuse_point(int seq) = 0;
    // dst continues from src's first n_pos positions (n_pos as
    // reusable_prefix(src) allows); dst's old contents are dropped. Shares
    // memory where the kind can (copy-on-write).
    virtual void fork(int dst, int src, int n_pos) = 0;
    // At least n_seqs sequences (new ones empty); existing ones stay where they are.
    virtual void reserve_seqs(int n_seqs) = 0;
    // Room for n_writers sequences forked from one another each writing up to
    // positions new positions (a beam search), on top of what is in use.
    virtual void reserve_growth(int n_writers, int positions) = 0;

    // Memory: per position of a sequence (0 for a fixed-size state), per
    // sequence whatever its length (0 for paged keys and values), and what is
    // allocated now and what of it is in use.
    virtual size_t bytes_per_position() const = 0;
    virtual size_t bytes_per_sequence() const = 0;
    virtual size_t bytes() const = 0;
    virtual size_t bytes_in_use() const = 0;
    virtual StateHome home() const = 0;
};

class KvCache;
class RecurrentState;

// The caches of one model's mixers, for n_seqs sequences of up to ctx
// positions. Each operation applies to every cache.
class SequenceState {
public:
    SequenceState(int n_seqs, int ctx);
    ~SequenceState();
    SequenceState(const SequenceState&) = delete;
    SequenceState& operator=(const SequenceState&) = delete;

    // Adds a cache (its sequences grow to n_seqs()); returns it.
    SequenceCache& add(std::unique_ptr<SequenceCache> cache);
    // The paged keys and values of the attention layers; null when no layer attends.
    KvCache* kv() const { return kv_; }
    // The Gated DeltaNet layers' state; null when no layer has one.
    RecurrentState* recurrent() const { return recurrent_; }
    const std::vector<std::unique_ptr<SequenceCache>>& caches() const { return caches_; }

    void prepare_write(int seq, int pos);
    // The longest prefix of seq, at most n_pos, every cache can be cut back to.
    int reusable_prefix(int seq, int n_pos) const;
    void truncate(int seq, int n_pos);
    void clear(int seq) { truncate(seq, 0); }
    // Whether every cache cuts anywhere (no reuse points needed).
    bool cuts_anywhere() const;
    void mark_reuse_point(int seq);
    void fork(int dst, int src, int n_pos);
    void reserve_seqs(int n_seqs);
    void reserve_growth(int n_writers, int positions);

    int n_seqs() const { return n_seqs_; }
    int ctx() const { return ctx_; }
    size_t bytes() const;
    size_t bytes_in_use() const;

private:
    int n_seqs_, ctx_;
    std::vector<std::unique_ptr<SequenceCache>> caches_;
    KvCache* kv_ = nullptr;
    RecurrentState* recurrent_ = nullptr;
};

// The sequence state of the config's mixers: a paged KvCache over the
// attention layers (kv_blocks blocks; -1: every sequence a whole context),
// its memory from `memory` (a backend's state_memory()).
std::unique_ptr<SequenceState> make_sequence_state(const ModelConfig& config, int n_seqs, int ctx,
                                                   StateMemory& memory, int kv_blocks = -1);

// Bytes of the sequence state of one sequence of ctx positions (a device's
// budget holds it): per position times ctx plus the fixed part.
double sequence_state_bytes(const ModelConfig& config, int ctx);
