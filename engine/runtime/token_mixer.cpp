// The token mixers: attention (with its gated variant) and the Gated
// DeltaNet (see token_mixer.h).
#include "engine/runtime/token_mixer.h"

#include <cassert>

#include "engine/devices/backend.h"
#include "engine/state/kv_cache.h"

namespace {

// Causal GQA self-attention: q/k/v projections (with biases), q/k RMSNorm
// per head or over the row, rotate-half RoPE (on the first rope_dim of each
// head), keys and values into the KvCache, attention over the sequence's
// positions [0, position], output projection; with attn_output_gate the q
// projection also gives a gate per head, and the attention output is
// multiplied by sigmoid(gate) before the output projection (Qwen3.5,
// Qwen3-Next). A SLIDING_ATTENTION layer reads only its window of
// positions; a layer with sinks (gpt-oss) adds each head's sink logit to its
// softmax's denominator; o_proj may have a bias. The KvCache's layer of model layer l is kv_layer_[l].
class AttentionMixer final : public TokenMixer {
public:
    AttentionMixer(const ModelConfig& config, Backend& backend, int max_batch)
        : c_(config), b_(backend), w_(backend.weights()) {
        q_dim_ = c_.n_heads * c_.head_dim;
        kv_dim_ = c_.n_kv_heads * c_.head_dim;
        const size_t mb = size_t(max_batch);
        q_ = backend.alloc(mb * q_dim_);
        k_ = backend.alloc(mb * kv_dim_);
        v_ = backend.alloc(mb * kv_dim_);
        att_ = backend.alloc(mb * q_dim_);
        if (c_.attn_output_gate) {
            qg_ = backend.alloc(mb * 2 * q_dim_);
            gate_ = backend.alloc(mb * q_dim_);
        }
        int kv = 0;
        kv_layer_.assign(size_t(c_.n_layers), -1);
        for (int l = 0; l < c_.n_layers; l++)
            if (ModelConfig::is_attention(c_.layer_mixer(l))) kv_layer_[size_t(l)] = kv++;
    }

    const char* name() const override { return "attention"; }

    void run(int layer, const Batch& batch, float* out, const float* xb) override {
        const LayerWeights& lw = w_.layers[size_t(layer)];
        const int n = batch.size();
        const int kv = kv_layer_[size_t(layer)];
        assert(kv >= 0);
        Backend& b = b_;
        // q (n, q_dim), k, v (n, kv_dim) = xb @ W^T
        if (c_.attn_output_gate) {
            b.matmul(qg_, xb, lw.wq, n);  // [q_h | gate_h] a head
            b.split_heads(q_, gate_, qg_, n, c_.n_heads, c_.head_dim);
        } else {
            b.matmul(q_, xb, lw.wq, n);
        }
        b.matmul(k_, xb, lw.wk, n);
        b.matmul(v_, xb, lw.wv, n);
        if (c_.qkv_bias) {
            b.add_bias(q_, lw.q_bias, n, q_dim_);
            b.add_bias(k_, lw.k_bias, n, kv_dim_);
            b.add_bias(v_, lw.v_bias, n, kv_dim_);
        }
        // q/k RMSNorm before RoPE: each head's vector (Qwen3) or the whole row (OLMoE).
        if (c_.qk_norm == QkNorm::PER_HEAD) {
            b.rmsnorm(q_, q_, lw.q_norm, n * c_.n_heads, c_.head_dim, c_.rms_norm_eps);
            b.rmsnorm(k_, k_, lw.k_norm, n * c_.n_kv_heads, c_.head_dim, c_.rms_norm_eps);
        } else if (c_.qk_norm == QkNorm::FULL) {
            b.rmsnorm(q_, q_, lw.q_norm, n, q_dim_, c_.rms_norm_eps);
            b.rmsnorm(k_, k_, lw.k_norm, n, kv_dim_, c_.rms_norm_eps);
        }
        b.rope(q_, c_.n_heads);
        b.rope(k_, c_.n_kv_heads);
        b.kv_store(kv, k_, v_);
        b.attention(kv, att_, q_, AttnMask{c_.layer_window(layer), lw.sinks});
        if (c_.attn_output_gate) b.sigmoid_mul(att_, gate_, size_t(n) * q_dim_);
        // out (n, dim) = att (n, q_dim) @ Wo^T (+ o_bias)
        b.matmul(out, att_, lw.wo, n);
        if (lw.o_bias) b.add_bias(out, lw.o_bias, n, c_.dim);
    }

private:
    const ModelConfig& c_;
    Backend& b_;
    const ModelWeights& w_;
    int q_dim_, kv_dim_;
    std::vector<int> kv_layer_;  // (n_layers) the KvCache layer of each attention layer; -1 others
    // In the backend's memory:
    float* q_;    // (max_batch, q_dim)
    float* k_;    // (max_batch, kv_dim)
    float* v_;    // (max_batch, kv_dim)
    float* att_;  // (max_batch, q_dim)
    float* qg_ = nullptr;    // (max_batch, 2 q_dim): attn_output_gate's joint projection
    float* gate_ = nullptr;  // (max_batch, q_dim)
};

// Gated DeltaNet linear attention (Qwen3.5, Qwen3-Next): the projections
// of q/k/v (before the conv), the output gate z, beta's and the decay's
// inputs; the backend's delta_net (conv, l2-normed q and k, the gated delta
// rule on the sequence's RecurrentState, the gated RMSNorm); the output
// projection. The RecurrentState's layer of model layer l is lin_layer_[l].
class GatedDeltaNetMixer final : public TokenMixer {
public:
    GatedDeltaNetMixer(const ModelConfig& config, Backend& backend, int max_batch)
        : c_(config), b_(backend), w_(backend.weights()) {
        const LinearAttentionShape& s = c_.linear;
        const size_t mb = size_t(max_batch);
        qkv_ = backend.alloc(mb * s.conv_dim());
        z_ = backend.alloc(mb * s.value_dim());
        beta_ = backend.alloc(mb * s.n_v_heads);
        alpha_ = backend.alloc(mb * s.n_v_heads);
        o_ = backend.alloc(mb * s.value_dim());
        int lin = 0;
        lin_layer_.assign(size_t(c_.n_layers), -1);
        for (int l = 0; l < c_.n_layers; l++)
            if (c_.layer_mixer(l) == MixerKind::GATED_DELTANET) lin_layer_[size_t(l)] = lin++;
    }

    const char* name() const override { return "gated_deltanet"; }

    void run(int layer, const Batch& batch, float* out, const float* xb) override {
        const LinearAttentionWeights& w = w_.layers[size_t(layer)].linear;
        const int n = batch.size();
        const int lin = lin_layer_[size_t(layer)];
        assert(lin >= 0);
        Backend& b = b_;
        b.matmul(qkv_, xb, w.wqkv, n);   // (n, conv_dim)
        b.matmul(z_, xb, w.wz, n);       // (n, value_dim)
        b.matmul(beta_, xb, w.wb, n);    // (n, n_v_heads)
        b.matmul(alpha_, xb, w.wa, n);   // (n, n_v_heads)
        b.delta_net(lin, o_, qkv_, z_, beta_, alpha_, w);
        b.matmul(out, o_, w.wout, n);    // (n, dim) = o (n, value_dim) @ Wout^T
    }

private:
    const ModelConfig& c_;
    Backend& b_;
    const ModelWeights& w_;
    std::vector<int> lin_layer_;  // (n_layers) the RecurrentState layer of each delta-net layer; -1 others
    // In the backend's memory:
    float* qkv_;    // (max_batch, conv_dim)
    float* z_;      // (max_batch, value_dim)
    float* beta_;   // (max_batch, n_v_heads)
    float* alpha_;  // (max_batch, n_v_heads)
    float* o_;      // (max_batch, value_dim)
};

}  // namespace

LayerMixers make_layer_mixers(const ModelConfig& config, Backend& backend, int max_batch) {
    LayerMixers mixers(size_t(config.n_layers));
    std::shared_ptr<TokenMixer> attention, delta_net;
    for (int l = 0; l < config.n_layers; l++) {
        switch (config.layer_mixer(l)) {
        case MixerKind::ATTENTION:
        case MixerKind::SLIDING_ATTENTION:  // the same mixer; the layer's window limits what it reads
            if (!attention) attention = std::make_shared<AttentionMixer>(config, backend, max_batch);
            mixers[size_t(l)] = attention;
            break;
        case MixerKind::GATED_DELTANET:
            if (!delta_net) delta_net = std::make_shared<GatedDeltaNetMixer>(config, backend, max_batch);
            mixers[size_t(l)] = delta_net;
            break;
        }
    }
    return mixers;
}
