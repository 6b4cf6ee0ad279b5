// Tensor table: the one list of a model's checkpoint tensors, computed from
// the ModelConfig: each tensor's Hugging Face name (Mixtral MoE layers, or
// the dense Mistral MLP as expert 0), the shape the loader checks, and its
// logical role. The loader, the synthetic-checkpoint writer and the model
// fingerprint all walk this list. Opens no file and holds no data.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_config.h"

enum class TensorRole {
    EMBED,       // (vocab_size, dim)
    ATTN_NORM,   // (dim,)
    WQ,          // (n_heads * head_dim, dim)
    WK,          // (n_kv_heads * head_dim, dim)
    WV,          // (n_kv_heads * head_dim, dim)
    WO,          // (dim, n_heads * head_dim)
    FFN_NORM,    // (dim,)
    ROUTER,      // (n_experts, dim); MoE only
    EXPERT_W1,   // (hidden_dim, dim) gate; the dense MLP's gate_proj as expert 0
    EXPERT_W3,   // (hidden_dim, dim) up; the dense MLP's up_proj as expert 0
    EXPERT_W2,   // (dim, hidden_dim) down; the dense MLP's down_proj as expert 0
    FINAL_NORM,  // (dim,)
    LM_HEAD,     // (vocab_size, dim); absent when the embeddings are tied
};

struct TensorEntry {
    std::string name;            // checkpoint name, e.g. "model.layers.0.self_attn.q_proj.weight"
    std::vector<int64_t> shape;  // (n,) for a norm vector, (rows, cols) for a matrix
    TensorRole role;
    int layer = -1;   // -1 for EMBED, FINAL_NORM, LM_HEAD
    int expert = -1;  // expert index for EXPERT_*, -1 otherwise
};

// Every tensor of the checkpoint in load order: embed; per layer the input
// norm, q, k, v, o, the post-attention norm, then the router and each
// expert's w1, w3, w2 (or the dense MLP's gate, up, down); the final norm;
// lm_head unless tied.
std::vector<TensorEntry> tensor_table(const ModelConfig& config);
