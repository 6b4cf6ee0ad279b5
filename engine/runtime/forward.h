// The forward pass: one batch of (token, position, sequence) entries through
// every layer, Hugging Face semantics of Mixtral, Qwen3-MoE, Qwen2-MoE and
// OLMoE. A layer is a token mixer (token_mixer.h: attention, with its q/k
// norm and bias variants) and an FFN (RMSNorm; softmax router + top-k,
// renormalised or not; SwiGLU experts through an ExpertExecutor; the MLP
// every token runs -- a dense layer's or a shared expert with its sigmoid
// gate -- on the backend), each added to the residual stream. Prefill,
// decode and beam search all use it. It says what happens; a Backend
// (backend.h: CPU or CUDA) does each dense op in its own memory. All
// buffers are allocated in the constructor: run() never allocates.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/devices/backend.h"
#include "engine/devices/expert_executor.h"
#include "engine/state/batch.h"
#include "engine/state/sequence_state.h"
#include "engine/runtime/token_mixer.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "profiles/routing_stats.h"
#include "profiles/routing_trace.h"

class ForwardPass {
public:
    // max_batch: the most entries one run() takes; max_logits: the most
    // entries with want_logits set.
    // The backend's expert_rows() must hold max_batch * experts-per-token
    // rows; executor computes from them (with a backend other than the CPU,
    // a HybridExpertExecutor over the same backend). state: the sequences'
    // state (make_sequence_state for the config, in the backend's
    // state_memory()). mixers: each layer's token mixer; empty: those the
    // config names (make_layer_mixers).
    ForwardPass(const ModelConfig& config, Backend& backend, SequenceState& state, ExpertExecutor& executor,
                int max_batch, int max_logits, LayerMixers mixers = {});

    // Runs the batch, writes its sequences' state (keys/values), and returns
    // the logits (n_logits, vocab_size) of the entries with want_logits, in
    // order. Entries of one sequence must come in position order; an entry
    // sees positions [0, position] of its sequence (writing a position makes
    // the sequence's own copy of a block it shares, see KvCache). Throws
    // MoeError when the state has no room left. Routed-token counts are
    // added to stats when it is not null.
    const float* run(const Batch& batch, RoutingStats* stats = nullptr);

    int max_batch() const { return max_batch_; }
    // Reports every pass's positions and each MoE layer's routing to
    // observer (null: none, the default), e.g. `profile --trace`'s recorder.
    void set_routing_observer(RoutingObserver* observer) { observer_ = observer; }

    // With stats given to run(): predict each MoE layer's experts one layer
    // ahead, when the previous MoE layer routes (this layer's router on the
    // residual stream as the previous layer's experts receive it: before
    // they and this layer's attention add to it), and count in stats how
    // many predicted choices it then routed to -- what a next-layer
    // prefetch gets right. An executor that wants_next_layer() gets the
    // prediction whether or not this is on (the counting needs it on and
    // stats). Off by default; it changes no result (one more norm and
    // router product per layer).
    void set_predict_next_layer(bool on) { predict_next_layer_ = on; }

private:
    void moe(int layer, int n, RoutingStats* stats);
    void always_mlp(int layer, int n);
    void predict(int layer, int n);
    void route(const LayerWeights& lw, const float* h, int n, int* experts, float* weights);

    const ModelConfig& config_;
    Backend& backend_;
    const ModelWeights& weights_;  // the backend's view of the dense weights
    SequenceState& state_;
    ExpertExecutor& executor_;
    LayerMixers mixers_;  // (n_layers)
    int max_batch_, max_logits_;
    int n_route_;  // experts per token (1 for dense)

    // In the backend's memory:
    float* x_;          // (max_batch, dim) residual stream
    float* xb_;         // (max_batch, dim) normed input
    float* out_;        // (max_batch, dim) a mixer's or an FFN's output
    float* router_;     // (max_batch, n_experts)
    float* mlp_out_;    // (max_batch, dim) the shared expert's output; null without one
    float* mlp_scratch_;  // (2 * max_batch * widest layer_mlp_hidden); null without an always-run MLP
    float* gate_;         // (max_batch,) the shared expert's gate logits; null without one
    float* logit_rows_; // (max_logits, dim) rows that want logits, then their final norm
    float* logits_;     // (max_logits, vocab)
    // On the host:
    std::vector<int> route_expert_;    // (max_batch, n_route) chosen experts
    std::vector<float> route_weight_;  // (max_batch, n_route) their weights
    std::vector<int> route_slot_;      // (max_batch, n_route) row in the expert rows
    std::vector<int> slot_src_;        // (max_batch * n_route) batch entry of each expert row
    std::vector<int> predicted_expert_;    // (max_batch, n_route) next-layer prediction
    std::vector<float> predicted_weight_;  // (max_batch, n_route) its weights (unused)
    bool predict_next_layer_ = false;
    int predicted_layer_ = -1;         // the layer predicted_expert_ is for; -1 none
    std::vector<ExpertTask> predicted_tasks_;  // its distinct experts and token counts
    NextLayerGuess next_;                      // what run_layer gets for the next layer
    std::vector<int> logit_src_;       // (max_logits) batch entry of each logits row
    std::vector<int> expert_count_;    // (n_experts)
    std::vector<int> expert_start_;    // (n_experts)
    std::vector<ExpertTask> tasks_;
    RoutingObserver* observer_ = nullptr;
};
