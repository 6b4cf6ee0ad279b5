// Bytes and FLOPs of the model's stages, computed in one place and used by
// the benchmarks, the log lines that print GB/s and (next) the latency model.
#pragma once
#include "engine/model/model_config.h"

struct StageCost {
    double bytes = 0;  // weight bytes streamed from memory
    double flops = 0;  // multiply-adds counted as 2
};

// One expert (w1, w3, w2) over n tokens.
StageCost cost_expert(const ModelConfig& c, int n_tokens);
// Attention projections (q, k, v, o) of one layer over n tokens.
StageCost cost_attention_proj(const ModelConfig& c, int n_tokens);
// Router GEMV of one layer over n tokens.
StageCost cost_router(const ModelConfig& c, int n_tokens);
// lm_head over n tokens.
StageCost cost_lm_head(const ModelConfig& c, int n_tokens);

// Bytes of every non-expert weight: embeddings, lm_head (unless tied), the
// attention projections, norms and routers of all layers. What a GPU holds
// before any expert.
double cost_dense_bytes(const ModelConfig& c);

// One decode step (one token): every layer's projections and router, its
// n_experts_active experts, and lm_head. Bytes = the weights it must read.
StageCost cost_decode_token(const ModelConfig& c);
// One decode step of n sequences (one token each, as beam search runs its
// beams) that sends tokens to routed_experts distinct (layer, expert) pairs
// in all: every layer's projections and router, each routed expert's
// weights once, and lm_head.
StageCost cost_decode_step(const ModelConfig& c, int n_tokens, double routed_experts);
// Prefill of n tokens, over the expert and projection GEMMs (attention scores
// excluded): each token visits n_experts_active experts per layer; logits for
// the last token only.
StageCost cost_prefill(const ModelConfig& c, int n_tokens);
