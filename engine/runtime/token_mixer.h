// TokenMixer: the half of a layer that mixes information across a
// sequence's positions (the other half is the FFN: dense, or routed experts
// with or without a shared expert, ForwardPass). Attention (causal GQA over
// the paged KvCache, RoPE, with its q/k-norm and q/k/v-bias variants) is
// the mixer of every layer today; a mixer with a recurrent state or a
// latent cache plugs in here, with the SequenceCache it keeps
// (sequence_state.h), and nothing else of the forward pass changes.
//
// A mixer computes on a Backend, in its memory, between the Backend's
// begin() of a batch and the next; its scratch buffers are allocated once,
// at construction. One mixer object may serve several layers.
#pragma once
#include <memory>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/state/batch.h"
#include "engine/state/sequence_state.h"

class Backend;

class TokenMixer {
public:
    virtual ~TokenMixer() = default;
    virtual const char* name() const = 0;  // "attention", ...
    // out (n, dim) = layer `layer`'s mixing of xb (n, dim), the normed
    // residual stream of the batch's n entries, reading the state of their
    // sequences' earlier positions and writing theirs (prepare_write has run
    // for every entry). out and xb are the backend's memory.
    virtual void run(int layer, const Batch& batch, float* out, const float* xb) = 0;
};

// The mixer of each layer (n_layers entries; layers of one kind share one
// object).
using LayerMixers = std::vector<std::shared_ptr<TokenMixer>>;

// The mixers the config's layers name (ModelConfig::layer_mixer), on the
// backend, for batches of up to max_batch entries; they keep their state in
// `state` (made by make_sequence_state for the same config).
LayerMixers make_layer_mixers(const ModelConfig& config, Backend& backend, int max_batch);
