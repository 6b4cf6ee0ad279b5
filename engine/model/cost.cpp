// Stage costs (see cost.h): bytes from the WeightFormat, FLOPs from the shapes.
#include "engine/model/cost.h"

#include <algorithm>

#include "engine/model/weights.h"

namespace {

StageCost matmul_cost(double rows, double cols, int n_tokens, double bytes_per_weight) {
    return {rows * cols * bytes_per_weight, 2.0 * rows * cols * n_tokens};
}

StageCost operator+(StageCost a, StageCost b) { return {a.bytes + b.bytes, a.flops + b.flops}; }
StageCost operator*(double k, StageCost a) { return {k * a.bytes, k * a.flops}; }

// Experts each token visits over the whole model (the dense Mistral MLP is expert 0 of every layer).
double routed_per_token(const ModelConfig& c) {
    return c.is_moe() ? double(c.n_moe_layers()) * c.n_experts_active : double(c.n_layers);
}

double per_weight(const WeightView& w) {
    return double(w.row_bytes) / double(w.cols);
}

}  // namespace

WeightFormat weight_format(const ModelWeights& w) {
    WeightFormat f;
    f.embed = per_weight(w.embed);
    f.lm_head = per_weight(w.lm_head);
    f.quantized_dense = dtype_quantized(w.lm_head.type);
    double expert = 0, dense = 0, dense_weights = 0;
    for (const LayerWeights& L : w.layers) {
        if (!L.experts.empty()) {
            const ExpertWeights& e = L.experts[0];
            expert = std::max(expert, double(e.bytes()) / double(e.w1.rows * e.w1.cols * 3));
        }
        for (const WeightView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.router, &L.mlp.w1, &L.mlp.w3, &L.mlp.w2,
                                    &L.shared_gate, &L.linear.wqkv, &L.linear.wz, &L.linear.wb, &L.linear.wa,
                                    &L.linear.wout}) {
            if (m->empty()) continue;
            f.quantized_dense = f.quantized_dense || dtype_quantized(m->type);
            dense += double(m->bytes());
            dense_weights += double(m->rows * m->cols);
        }
    }
    f.expert = expert;
    f.dense = dense / dense_weights;
    return f;
}

StageCost cost_expert(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    return 3.0 * matmul_cost(c.hidden_dim, c.dim, n_tokens, f.expert);
}

StageCost cost_attention_proj(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    double q = double(c.n_heads) * c.head_dim, kv = double(c.n_kv_heads) * c.head_dim;
    const double q_rows = c.attn_output_gate ? 2 * q : q;  // the gate comes with the query
    return matmul_cost(q_rows + 2 * kv, c.dim, n_tokens, f.dense) + matmul_cost(c.dim, q, n_tokens, f.dense);
}

StageCost cost_linear_proj(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    const LinearAttentionShape& s = c.linear;
    const double in_rows = double(s.conv_dim()) + s.value_dim() + 2.0 * s.n_v_heads;  // qkv, z, b, a
    return matmul_cost(in_rows, c.dim, n_tokens, f.dense) + matmul_cost(c.dim, s.value_dim(), n_tokens, f.dense);
}

StageCost cost_mixers(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    return double(c.n_attention_layers()) * cost_attention_proj(c, n_tokens, f) +
           double(c.n_linear_layers()) * cost_linear_proj(c, n_tokens, f);
}

StageCost cost_router(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    return c.is_moe() ? matmul_cost(c.n_experts, c.dim, n_tokens, f.dense) : StageCost{};
}

StageCost cost_always_mlp(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    StageCost total;
    for (int l = 0; l < c.n_layers; l++) {
        const int hidden = c.layer_mlp_hidden(l);
        if (hidden == 0) continue;
        total = total + 3.0 * matmul_cost(hidden, c.dim, n_tokens, f.dense);
        if (c.layer_is_moe(l)) total = total + matmul_cost(1, c.dim, n_tokens, f.dense);  // the shared gate
    }
    return total;
}

StageCost cost_lm_head(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    return matmul_cost(c.vocab_size, c.dim, n_tokens, f.lm_head);
}

StageCost cost_decode_token(const ModelConfig& c, const WeightFormat& f) {
    StageCost layers =
        cost_mixers(c, 1, f) + double(c.n_moe_layers()) * cost_router(c, 1, f);
    return layers + routed_per_token(c) * cost_expert(c, 1, f) + cost_always_mlp(c, 1, f) + cost_lm_head(c, 1, f);
}

StageCost cost_decode_step(const ModelConfig& c, int n_tokens, double routed_experts, const WeightFormat& f) {
    StageCost layers = cost_mixers(c, n_tokens, f) +
                       double(c.n_moe_layers()) * cost_router(c, n_tokens, f);
    StageCost experts{routed_experts * cost_expert(c, 0, f).bytes,
                      routed_per_token(c) * cost_expert(c, n_tokens, f).flops};
    return layers + experts + cost_always_mlp(c, n_tokens, f) + cost_lm_head(c, n_tokens, f);
}

StageCost cost_prefill(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    const double expert_layers = c.is_moe() ? c.n_moe_layers() : c.n_layers;
    const int experts = c.is_moe() ? c.n_experts : 1;
    // Every expert's weights are read once (when any token routes to it);
    // the FLOPs follow the tokens.
    StageCost moe{expert_layers * experts * cost_expert(c, 0, f).bytes,
                  routed_per_token(c) * cost_expert(c, n_tokens, f).flops};
    StageCost layers = cost_mixers(c, n_tokens, f) +
                       double(c.n_moe_layers()) * cost_router(c, n_tokens, f);
    return layers + moe + cost_always_mlp(c, n_tokens, f) + cost_lm_head(c, 1, f);
}

double cost_dense_bytes(const ModelConfig& c, const WeightFormat& f) {
    // Norm and bias vectors, bf16 on a device.
    const double q_dim = double(c.n_heads) * c.head_dim, kv_dim = double(c.n_kv_heads) * c.head_dim;
    double vectors = double(2 * c.n_layers + 1) * c.dim;
    if (c.qk_norm == QkNorm::PER_HEAD) vectors += double(c.n_layers) * 2 * c.head_dim;
    if (c.qk_norm == QkNorm::FULL) vectors += double(c.n_layers) * (q_dim + kv_dim);
    if (c.qkv_bias) vectors += double(c.n_layers) * (q_dim + 2 * kv_dim);
    const LinearAttentionShape& s = c.linear;  // conv taps, dt bias, A, gated norm
    vectors += double(c.n_linear_layers()) * (double(s.conv_dim()) * s.conv_kernel + 2.0 * s.n_v_heads + s.head_v_dim);
    const double layers = cost_mixers(c, 0, f).bytes +
                          double(c.n_moe_layers()) * cost_router(c, 0, f).bytes + cost_always_mlp(c, 0, f).bytes;
    double embeddings = double(c.vocab_size) * c.dim * (f.embed + (c.tie_embeddings ? 0.0 : f.lm_head));
    return layers + embeddings + vectors * 2.0;
}
