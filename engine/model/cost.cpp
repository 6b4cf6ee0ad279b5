// Stage costs (see cost.h). bf16 weights: 2 bytes per parameter.
#include "engine/model/cost.h"

namespace {
constexpr double BF16_BYTES = 2.0;

StageCost matmul_cost(double rows, double cols, int n_tokens) {
    return {rows * cols * BF16_BYTES, 2.0 * rows * cols * n_tokens};
}

StageCost operator+(StageCost a, StageCost b) { return {a.bytes + b.bytes, a.flops + b.flops}; }
StageCost operator*(double k, StageCost a) { return {k * a.bytes, k * a.flops}; }
}  // namespace

StageCost cost_expert(const ModelConfig& c, int n_tokens) {
    return 3.0 * matmul_cost(c.hidden_dim, c.dim, n_tokens);
}

StageCost cost_attention_proj(const ModelConfig& c, int n_tokens) {
    double q = double(c.n_heads) * c.head_dim, kv = double(c.n_kv_heads) * c.head_dim;
    return matmul_cost(q + 2 * kv, c.dim, n_tokens) + matmul_cost(c.dim, q, n_tokens);
}

StageCost cost_router(const ModelConfig& c, int n_tokens) {
    return c.is_moe() ? matmul_cost(c.n_experts, c.dim, n_tokens) : StageCost{};
}

StageCost cost_lm_head(const ModelConfig& c, int n_tokens) { return matmul_cost(c.vocab_size, c.dim, n_tokens); }

StageCost cost_decode_token(const ModelConfig& c) {
    int active = c.is_moe() ? c.n_experts_active : 1;
    StageCost layer = cost_attention_proj(c, 1) + cost_router(c, 1) + double(active) * cost_expert(c, 1);
    return double(c.n_layers) * layer + cost_lm_head(c, 1);
}

StageCost cost_decode_step(const ModelConfig& c, int n_tokens, double routed_experts) {
    int active = c.is_moe() ? c.n_experts_active : 1;
    StageCost layer = cost_attention_proj(c, n_tokens) + cost_router(c, n_tokens);
    StageCost experts{routed_experts * cost_expert(c, 0).bytes,
                      double(c.n_layers) * active * cost_expert(c, n_tokens).flops};
    return double(c.n_layers) * layer + experts + cost_lm_head(c, n_tokens);
}

StageCost cost_prefill(const ModelConfig& c, int n_tokens) {
    int active = c.is_moe() ? c.n_experts_active : 1;
    int experts = c.is_moe() ? c.n_experts : 1;
    // Every expert's weights are read once (when any token routes to it);
    // the FLOPs follow the tokens.
    StageCost moe{double(experts) * cost_expert(c, 0).bytes, double(active) * cost_expert(c, n_tokens).flops};
    StageCost layer = cost_attention_proj(c, n_tokens) + cost_router(c, n_tokens) + moe;
    return double(c.n_layers) * layer + cost_lm_head(c, 1);
}

double cost_dense_bytes(const ModelConfig& c) {
    const double norms = double(2 * c.n_layers + 1) * c.dim * 2.0;  // bf16 on a device
    double layer = cost_attention_proj(c, 0).bytes + cost_router(c, 0).bytes;
    double embeddings = cost_lm_head(c, 0).bytes * (c.tie_embeddings ? 1.0 : 2.0);
    return double(c.n_layers) * layer + embeddings + norms;
}
