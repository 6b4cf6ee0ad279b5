// Bytes and FLOPs of the model's stages, computed in one place and used by
// the benchmarks, the log lines that print GB/s and the latency model. The
// bytes follow the weights' format (bf16 unless a WeightFormat says otherwise).
#pragma once
#include "engine/model/model_config.h"

struct ModelWeights;

// Bytes per weight of each kind of matrix: 2 everywhere for bf16; a
// quantized file's own figures (Q4_K: 144 bytes per 256 weights = 0.5625).
// Experts: the largest layer's (what a device slot holds).
struct WeightFormat {
    double expert = 2.0;  // w1, w3, w2
    double dense = 2.0;   // q, k, v, o projections and the routers
    double embed = 2.0;   // the embedding table
    double lm_head = 2.0;
    bool quantized_dense = false;  // some projection, router or lm_head is block-quantized
};

// The format of loaded weights, from their views.
WeightFormat weight_format(const ModelWeights& w);

struct StageCost {
    double bytes = 0;  // weight bytes streamed from memory
    double flops = 0;  // multiply-adds counted as 2
};

// One expert (w1, w3, w2) over n tokens.
StageCost cost_expert(const ModelConfig& c, int n_tokens, const WeightFormat& f = {});
// Attention projections (q, k, v, o) of one layer over n tokens.
StageCost cost_attention_proj(const ModelConfig& c, int n_tokens, const WeightFormat& f = {});
// A Gated DeltaNet layer's projections (q/k/v, z, b, a in; out).
StageCost cost_linear_proj(const ModelConfig& c, int n_tokens, const WeightFormat& f = {});
// Every layer's mixer projections: attention's or the delta net's.
StageCost cost_mixers(const ModelConfig& c, int n_tokens, const WeightFormat& f = {});
// Router GEMV of one layer over n tokens.
StageCost cost_router(const ModelConfig& c, int n_tokens, const WeightFormat& f = {});
// The MLPs every token runs (each layer's dense MLP or shared expert and its
// gate, ModelConfig::layer_mlp_hidden), summed over all layers, over n
// tokens: dense weights, in the dense format, read on every step.
StageCost cost_always_mlp(const ModelConfig& c, int n_tokens, const WeightFormat& f = {});
// lm_head over n tokens.
StageCost cost_lm_head(const ModelConfig& c, int n_tokens, const WeightFormat& f = {});

// Bytes of every non-expert weight: embeddings, lm_head (unless tied), the
// attention projections, norms, biases and routers of all layers, and the
// MLPs every token runs (shared experts, dense layers). What a GPU holds
// before any routed expert.
double cost_dense_bytes(const ModelConfig& c, const WeightFormat& f = {});

// One decode step (one token): every layer's projections and router, its
// n_experts_active experts (MoE layers), the MLPs every token runs, and lm_head. Bytes = the weights it must read.
StageCost cost_decode_token(const ModelConfig& c, const WeightFormat& f = {});
// One decode step of n sequences (one token each, as beam search runs its
// beams) that sends tokens to routed_experts distinct (layer, expert) pairs
// in all: every layer's projections and router, each routed expert's
// weights once, and lm_head.
StageCost cost_decode_step(const ModelConfig& c, int n_tokens, double routed_experts, const WeightFormat& f = {});
// Prefill of n tokens, over the expert and projection GEMMs (attention scores
// excluded): each token visits n_experts_active experts per layer; logits for
// the last token only.
StageCost cost_prefill(const ModelConfig& c, int n_tokens, const WeightFormat& f = {});
