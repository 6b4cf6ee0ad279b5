// Forward pass over a batch (see forward.h). Shapes in comments use
// n = entries in the batch.
#include "engine/runtime/forward.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <utility>

#include "cpu_kernels/kernels.h"

ForwardPass::ForwardPass(const ModelConfig& config, Backend& backend, SequenceState& state, ExpertExecutor& executor,
                         int max_batch, int max_logits, LayerMixers mixers)
    : config_(config), backend_(backend), weights_(backend.weights()), state_(state), executor_(executor),
      mixers_(mixers.empty() ? make_layer_mixers(config, backend, max_batch) : std::move(mixers)),
      max_batch_(max_batch), max_logits_(max_logits) {
    const ModelConfig& c = config;
    assert(int(mixers_.size()) == c.n_layers);
    n_route_ = c.is_moe() ? c.n_experts_active : 1;
    int n_experts = c.is_moe() ? c.n_experts : 1;
    size_t mb = size_t(max_batch);
    x_ = backend.alloc(mb * c.dim);
    xb_ = backend.alloc(mb * c.dim);
    out_ = backend.alloc(mb * c.dim);
    router_ = backend.alloc(mb * n_experts);
    int widest_mlp = 0;
    bool shared = false;
    for (int l = 0; l < c.n_layers; l++) {
        widest_mlp = std::max(widest_mlp, c.layer_mlp_hidden(l));
        shared = shared || (c.layer_is_moe(l) && c.layer_mlp_hidden(l) > 0);
    }
    mlp_scratch_ = widest_mlp > 0 ? backend.alloc(2 * mb * widest_mlp) : nullptr;
    mlp_out_ = shared ? backend.alloc(mb * c.dim) : nullptr;
    gate_ = shared ? backend.alloc(mb) : nullptr;
    logit_rows_ = backend.alloc(size_t(max_logits) * c.dim);
    logits_ = backend.alloc(size_t(max_logits) * c.vocab_size);
    route_expert_.resize(mb * n_route_);
    route_weight_.resize(mb * n_route_);
    route_slot_.resize(mb * n_route_);
    slot_src_.resize(mb * n_route_);
    predicted_expert_.resize(mb * n_route_);
    predicted_weight_.resize(mb * n_route_);
    logit_src_.resize(max_logits);
    expert_count_.resize(n_experts);
    expert_start_.resize(n_experts);
    tasks_.reserve(n_experts);
    predicted_tasks_.reserve(n_experts);
}

const float* ForwardPass::run(const Batch& batch, RoutingStats* stats) {
    const ModelConfig& c = config_;
    const int n = batch.size();
    assert(n > 0 && n <= max_batch_);
    const int dim = c.dim;
    Backend& b = backend_;

    // Every entry's state is made writable before layer 0: a KV copy-on-write
    // copies the whole block (all layers) once.
    for (int i = 0; i < n; i++) {
        assert(batch.positions[i] >= 0 && batch.positions[i] < state_.ctx());
        assert(batch.tokens[i] >= 0 && batch.tokens[i] < c.vocab_size);
        state_.prepare_write(batch.seq_ids[i], batch.positions[i]);
    }
    b.begin(batch, state_);
    if (observer_) observer_->on_pass(std::span<const int>(batch.positions.data(), size_t(n)));
    predicted_layer_ = -1;

    b.embed(x_);  // x (n, dim) = embed[token]
    for (int l = 0; l < c.n_layers; l++) {
        const LayerWeights& lw = weights_.layers[l];
        b.rmsnorm(xb_, x_, lw.attn_norm, n, dim, c.rms_norm_eps);
        mixers_[size_t(l)]->run(l, batch, out_, xb_);  // out (n, dim)
        b.add(x_, out_, size_t(n) * dim);

        b.rmsnorm(xb_, x_, lw.ffn_norm, n, dim, c.rms_norm_eps);
        if (c.layer_is_moe(l) || !c.is_moe()) moe(l, n, stats);  // out = the routed experts' sum
        always_mlp(l, n);                                        // out (+)= the MLP every token runs
        b.add(x_, out_, size_t(n) * dim);
    }

    // Final norm and lm_head only for the entries that want logits.
    int n_logits = 0;
    for (int i = 0; i < n; i++) {
        if (!batch.want_logits[i]) continue;
        assert(n_logits < max_logits_);
        logit_src_[n_logits++] = i;
    }
    if (n_logits == 0) return nullptr;
    b.gather(logit_rows_, x_, logit_src_.data(), n_logits, dim);
    b.rmsnorm(logit_rows_, logit_rows_, weights_.final_norm, n_logits, dim, c.rms_norm_eps);
    b.matmul(logits_, logit_rows_, weights_.lm_head, n_logits);
    return b.to_host(logits_, size_t(n_logits) * c.vocab_size);
}

// The router of a layer on n normed rows h: its logits (and bias) into
// router_, then each row's top-k experts and weights.
void ForwardPass::route(const LayerWeights& lw, const float* h, int n, int* experts, float* weights) {
    const ModelConfig& c = config_;
    backend_.matmul(router_, h, lw.router, n);
    if (lw.router_bias) backend_.add_bias(router_, lw.router_bias, n, c.n_experts);
    backend_.route(experts, weights, router_, n, c.n_experts, n_route_, c.norm_topk_prob);
}

// Layer `layer`'s router applied to the residual stream as the previous
// MoE layer receives it (after that layer's attention, before its experts;
// normed with this layer's FFN norm): the experts each token would pick if
// neither the previous layer's experts nor this layer's attention changed
// the stream. Known before the previous layer's experts run, so a device
// can copy them while those run. The predicted experts with their token
// counts go to predicted_tasks_. out and the router logits are scratch here
// (the previous layer's routing is done; its experts' sum is written later).
void ForwardPass::predict(int layer, int n) {
    const ModelConfig& c = config_;
    const LayerWeights& lw = weights_.layers[layer];
    Backend& b = backend_;
    b.rmsnorm(out_, x_, lw.ffn_norm, n, c.dim, c.rms_norm_eps);
    route(lw, out_, n, predicted_expert_.data(), predicted_weight_.data());
    predicted_layer_ = layer;
    std::fill(expert_count_.begin(), expert_count_.end(), 0);
    for (int j = 0; j < n * n_route_; j++) expert_count_[predicted_expert_[j]]++;
    predicted_tasks_.clear();
    for (int e = 0; e < int(expert_count_.size()); e++)
        if (expert_count_[e] > 0) predicted_tasks_.push_back({e, expert_count_[e], 0});
}

// The MLP every token of the layer runs, on the backend with the dense
// weights: a dense layer's MLP writes out; a shared expert's output, scaled
// by sigmoid(xb . gate), is added to the routed experts' sum in out.
void ForwardPass::always_mlp(int layer, int n) {
    const LayerWeights& lw = weights_.layers[layer];
    if (lw.mlp.empty()) return;
    Backend& b = backend_;
    if (lw.shared_gate.empty()) {
        b.mlp(out_, xb_, lw.mlp, n, mlp_scratch_);
        return;
    }
    b.mlp(mlp_out_, xb_, lw.mlp, n, mlp_scratch_);
    b.matmul(gate_, xb_, lw.shared_gate, n);  // (n, 1)
    b.sigmoid_scale(mlp_out_, gate_, n, config_.dim);
    b.add(out_, mlp_out_, size_t(n) * config_.dim);
}

void ForwardPass::moe(int layer, int n, RoutingStats* stats) {
    const ModelConfig& c = config_;
    const LayerWeights& lw = weights_.layers[layer];
    const int dim = c.dim;
    const int n_experts = int(expert_count_.size());
    Backend& b = backend_;

    next_ = {};
    // Routing: softmax over all experts, keep top-k, renormalise the k
    // weights; the choices come to the host for the placement planner.
    if (c.is_moe()) {
        route(lw, xb_, n, route_expert_.data(), route_weight_.data());
        if (observer_) observer_->on_route(layer, n, n_route_, route_expert_.data(), route_weight_.data());
        if (stats && predicted_layer_ == layer) {
            uint64_t right = 0;
            for (int i = 0; i < n; i++) {
                const int* chosen = route_expert_.data() + size_t(i) * n_route_;
                const int* guess = predicted_expert_.data() + size_t(i) * n_route_;
                for (int j = 0; j < n_route_; j++)
                    right += std::find(chosen, chosen + n_route_, guess[j]) != chosen + n_route_;
            }
            stats->add_prediction(layer, uint64_t(n) * n_route_, right);
        }
        predicted_layer_ = -1;
        // The next layer's experts, predicted while this layer's run.
        if (((predict_next_layer_ && stats) || executor_.wants_next_layer()) && layer + 1 < c.n_layers &&
            c.layer_is_moe(layer + 1)) {
            predict(layer + 1, n);
            next_ = {layer + 1, predicted_tasks_};
        }
    } else {
        for (int i = 0; i < n; i++) {
            route_expert_[i] = 0;
            route_weight_[i] = 1.0f;
        }
    }

    // Group token rows by expert: counting sort, so each expert's rows are
    // contiguous and in batch order.
    std::fill(expert_count_.begin(), expert_count_.end(), 0);
    for (int j = 0; j < n * n_route_; j++) expert_count_[route_expert_[j]]++;
    int offset = 0;
    for (int e = 0; e < n_experts; e++) {
        expert_start_[e] = offset;
        offset += expert_count_[e];
    }
    std::fill(expert_count_.begin(), expert_count_.end(), 0);
    for (int j = 0; j < n * n_route_; j++) {
        int e = route_expert_[j];
        int slot = expert_start_[e] + expert_count_[e]++;
        route_slot_[j] = slot;
        slot_src_[slot] = j / n_route_;
    }
    ExpertRows rows = b.expert_rows();
    b.gather(rows.x, xb_, slot_src_.data(), n * n_route_, dim);
    tasks_.clear();
    for (int e = 0; e < n_experts; e++) {
        if (expert_count_[e] == 0) continue;
        tasks_.push_back({e, expert_count_[e], expert_start_[e]});
        if (stats) stats->add(layer, e, uint64_t(expert_count_[e]));
    }
    executor_.run_layer(layer, rows, tasks_, next_);

    // Weighted sum in a fixed order (the token's routing order), so results
    // never depend on where or when an expert ran.
    b.combine(out_, rows.y, route_slot_.data(), route_weight_.data(), n, n_route_, dim);
}
