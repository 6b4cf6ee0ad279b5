// Tensor table: the one list of a model's checkpoint tensors, computed from
// the ModelConfig: each tensor's Hugging Face name (Mixtral's
// block_sparse_moe, Qwen's and OLMoE's mlp.experts, the dense Mistral MLP as
// expert 0), the shape the loader checks, and its logical role. The loader,
// the synthetic-checkpoint writer and the model fingerprint all walk this
// list. Opens no file and holds no data.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_config.h"

enum class TensorRole {
    EMBED,        // (vocab_size, dim)
    ATTN_NORM,    // (dim,)
    WQ,           // (n_heads * head_dim, dim); with attn_output_gate (2 * n_heads * head_dim, dim): [q_h | gate_h] a head
    Q_BIAS,       // (n_heads * head_dim,); qkv_bias only
    WK,           // (n_kv_heads * head_dim, dim)
    K_BIAS,       // (n_kv_heads * head_dim,); qkv_bias only
    WV,           // (n_kv_heads * head_dim, dim)
    V_BIAS,       // (n_kv_heads * head_dim,); qkv_bias only
    WO,           // (dim, n_heads * head_dim)
    O_BIAS,       // (dim,); o_bias only
    SINKS,        // (n_heads,) the sink logit of each query head; attn_sinks only
    Q_NORM,       // (head_dim,) per head, or (n_heads * head_dim,) full width; qk_norm only
    K_NORM,       // (head_dim,) per head, or (n_kv_heads * head_dim,) full width; qk_norm only
    FFN_NORM,     // (dim,)
    ROUTER,       // (n_experts, dim); MoE layers only
    ROUTER_BIAS,  // (n_experts,); router_bias only
    EXPERT_W1,    // (hidden_dim, dim) gate; the dense Mistral MLP's gate_proj as expert 0
    EXPERT_W3,    // (hidden_dim, dim) up; the dense Mistral MLP's up_proj as expert 0
    EXPERT_W2,    // (dim, hidden_dim) down; the dense Mistral MLP's down_proj as expert 0
    EXPERT_B1,    // (hidden_dim,) gate bias; expert_bias only
    EXPERT_B3,    // (hidden_dim,) up bias
    EXPERT_B2,    // (dim,) down bias
    MLP_W1,       // (layer_mlp_hidden, dim) gate of the MLP every token runs: a dense layer's, or the shared expert
    MLP_W3,       // (layer_mlp_hidden, dim) up
    MLP_W2,       // (dim, layer_mlp_hidden) down
    SHARED_GATE,  // (1, dim) the shared expert's sigmoid gate; shared expert only
    FINAL_NORM,   // (dim,)
    LM_HEAD,      // (vocab_size, dim); absent when the embeddings are tied
    // A Gated DeltaNet layer (ModelConfig::linear: conv_dim, key_dim, value_dim, n_v_heads):
    LIN_QKV,      // (conv_dim, dim) in_proj_qkv: q (key_dim) | k (key_dim) | v (value_dim) rows
    LIN_Z,        // (value_dim, dim) in_proj_z: the output gate
    LIN_B,        // (n_v_heads, dim) in_proj_b: beta = sigmoid(x . b)
    LIN_A,        // (n_v_heads, dim) in_proj_a: the decay's input
    LIN_QKVZ,     // Qwen3-Next's fused in_proj_qkvz (2 key_dim + 2 value_dim, dim): per key head [q|k|v|z]; split at load
    LIN_BA,       // Qwen3-Next's fused in_proj_ba (2 n_v_heads, dim): per key head [b|a]; split at load
    LIN_CONV,     // (conv_dim, 1, conv_kernel) conv1d: the causal depthwise conv over q, k, v
    LIN_DT_BIAS,  // (n_v_heads,) dt_bias
    LIN_A_LOG,    // (n_v_heads,) A_log; held as -exp(A_log) (TensorValues::NEG_EXP)
    LIN_NORM,     // (head_v_dim,) the gated RMSNorm's weight (a plain weight, never zero-centred)
    LIN_OUT,      // (dim, value_dim) out_proj
};

// A bias vector's role: q/k/v/o's, the router's, an expert's, the delta
// net's dt_bias (GGUF names them ".bias").
bool tensor_role_is_bias(TensorRole role);

// How the engine holds a tensor's values from a Hugging Face checkpoint.
enum class TensorValues : uint8_t {
    AS_IS,
    PLUS_ONE,  // a zero-centred RMSNorm weight (ModelConfig::norms_zero_centered): 1 + w
    NEG_EXP,   // A_log: -exp(A_log), the per-head decay rate
};

// A checkpoint's value x as the engine holds it.
inline float tensor_value(float x, TensorValues values) {
    switch (values) {
    case TensorValues::AS_IS: break;
    case TensorValues::PLUS_ONE: return 1.0f + x;
    case TensorValues::NEG_EXP: return -std::exp(x);
    }
    return x;
}

struct TensorEntry {
    std::string name;            // checkpoint name, e.g. "model.layers.0.self_attn.q_proj.weight"
    std::vector<int64_t> shape;  // (n,) for a norm or bias vector, (rows, cols) for a matrix
    TensorRole role;
    int layer = -1;   // -1 for EMBED, FINAL_NORM, LM_HEAD
    int expert = -1;  // expert index for EXPERT_*, -1 otherwise
    TensorValues values = TensorValues::AS_IS;  // what the loader makes of the checkpoint's values
};

// Every tensor of the checkpoint in load order: embed; per layer the input
// norm, q (and its bias), k, v, o, the q/k norms, the post-attention norm,
// then on a MoE layer the router and each expert's w1, w3, w2, then the MLP
// every token runs (a dense layer's gate, up, down, or the shared expert's
// and its gate); the final norm; lm_head unless tied. Biases follow their
// matrices (gpt-oss: o_proj's, the sinks after the attention's, the
// router's, each expert's three after its matrices). gpt-oss's Hugging Face
// files hold a layer's experts in fused tensors (MXFP4 blocks and scales,
// or transposed bf16, gate and up interleaved): the table names each
// expert's tensors on their own (mlp.experts.E.gate_proj.weight, ...) and
// the loader finds them in the fused ones. Mixtral and Mistral
// tables are those of before the Qwen and OLMoE roles existed (their
// fingerprints are unchanged).
std::vector<TensorEntry> tensor_table(const ModelConfig& config);
