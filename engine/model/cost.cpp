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
        const ExpertWeights& e = L.experts.at(0);
        expert = std::max(expert, double(e.bytes()) / double(e.w1.rows * e.w1.cols * 3));
        for (const WeightView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.router}) {
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
    return matmul_cost(q + 2 * kv, c.dim, n_tokens, f.dense) + matmul_cost(c.dim, q, n_tokens, f.dense);
}

StageCost cost_router(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    return c.is_moe() ? matmul_cost(c.n_experts, c.dim, n_tokens, f.dense) : StageCost{};
}

StageCost cost_lm_head(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    return matmul_cost(c.vocab_size, c.dim, n_tokens, f.lm_head);
}

StageCost cost_decode_token(const ModelConfig& c, const WeightFormat& f) {
    int active = c.is_moe() ? c.n_experts_active : 1;
    StageCost layer = cost_attention_proj(c, 1, f) + cost_router(c, 1, f) + double(active) * cost_expert(c, 1, f);
    return double(c.n_layers) * layer + cost_lm_head(c, 1, f);
}

StageCost cost_decode_step(const ModelConfig& c, int n_tokens, double routed_experts, const WeightFormat& f) {
    int active = c.is_moe() ? c.n_experts_active : 1;
    StageCost layer = cost_attention_proj(c, n_tokens, f) + cost_router(c, n_tokens, f);
    StageCost experts{routed_experts * cost_expert(c, 0, f).bytes,
                      double(c.n_layers) * active * cost_expert(c, n_tokens, f).flops};
    return double(c.n_layers) * layer + experts + cost_lm_head(c, n_tokens, f);
}

StageCost cost_prefill(const ModelConfig& c, int n_tokens, const WeightFormat& f) {
    int active = c.is_moe() ? c.n_experts_active : 1;
    int experts = c.is_moe() ? c.n_experts : 1;
    // Every expert's weights are read once (when any token routes to it);
    // the FLOPs follow the tokens.
    StageCost moe{double(experts) * cost_expert(c, 0, f).bytes, double(active) * cost_expert(c, n_tokens, f).flops};
    StageCost layer = cost_attention_proj(c, n_tokens, f) + cost_router(c, n_tokens, f) + moe;
    return double(c.n_layers) * layer + cost_lm_head(c, 1, f);
}

double cost_dense_bytes(const ModelConfig& c, const WeightFormat& f) {
    const double norms = double(2 * c.n_layers + 1) * c.dim * 2.0;  // bf16 on a device
    double layer = cost_attention_proj(c, 0, f).bytes + cost_router(c, 0, f).bytes;
    double embeddings = double(c.vocab_size) * c.dim * (f.embed + (c.tie_embeddings ? 0.0 : f.lm_head));
    return double(c.n_layers) * layer + embeddings + norms;
}
