// Tensor table (see tensor_table.h): the Hugging Face names and shapes of
// every tensor, spelled here and nowhere else in the engine. Pure function
// of the ModelConfig.
#include "engine/model/tensor_table.h"

#include <cstdint>

bool tensor_role_is_bias(TensorRole role) {
    switch (role) {
    case TensorRole::Q_BIAS:
    case TensorRole::K_BIAS:
    case TensorRole::V_BIAS:
    case TensorRole::O_BIAS:
    case TensorRole::ROUTER_BIAS:
    case TensorRole::EXPERT_B1:
    case TensorRole::EXPERT_B3:
    case TensorRole::EXPERT_B2:
    case TensorRole::LIN_DT_BIAS:
        return true;
    default:
        return false;
    }
}

std::vector<TensorEntry> tensor_table(const ModelConfig& c) {
    const int64_t dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
    const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
    // Mixtral's MoE block is block_sparse_moe with w1/w3/w2; Qwen's and OLMoE's is mlp with *_proj.
    const bool mixtral = c.architecture == "MixtralForCausalLM";
    const std::string moe_block = mixtral ? "block_sparse_moe." : "mlp.";
    const char* const w1 = mixtral ? "w1.weight" : "gate_proj.weight";
    const char* const w3 = mixtral ? "w3.weight" : "up_proj.weight";
    const char* const w2 = mixtral ? "w2.weight" : "down_proj.weight";
    const std::string& m = c.tensor_prefix;
    const TensorValues norm = c.norms_zero_centered ? TensorValues::PLUS_ONE : TensorValues::AS_IS;
    const LinearAttentionShape& lin = c.linear;
    const int64_t conv_dim = lin.conv_dim(), value_dim = lin.value_dim(), n_v = lin.n_v_heads;

    std::vector<TensorEntry> t;
    t.push_back({m + "embed_tokens.weight", {vocab, dim}, TensorRole::EMBED});
    for (int l = 0; l < c.n_layers; l++) {
        const std::string p = m + "layers." + std::to_string(l) + ".";
        t.push_back({p + "input_layernorm.weight", {dim}, TensorRole::ATTN_NORM, l, -1, norm});
        if (c.layer_mixer(l) == MixerKind::GATED_DELTANET) {
            const std::string a = p + "linear_attn.";
            if (lin.fused_qkvz) {
                t.push_back({a + "in_proj_qkvz.weight", {conv_dim + value_dim, dim}, TensorRole::LIN_QKVZ, l});
            } else {
                t.push_back({a + "in_proj_qkv.weight", {conv_dim, dim}, TensorRole::LIN_QKV, l});
                t.push_back({a + "in_proj_z.weight", {value_dim, dim}, TensorRole::LIN_Z, l});
            }
            if (lin.fused_ba) {
                t.push_back({a + "in_proj_ba.weight", {2 * n_v, dim}, TensorRole::LIN_BA, l});
            } else {
                t.push_back({a + "in_proj_b.weight", {n_v, dim}, TensorRole::LIN_B, l});
                t.push_back({a + "in_proj_a.weight", {n_v, dim}, TensorRole::LIN_A, l});
            }
            t.push_back({a + "conv1d.weight", {conv_dim, 1, int64_t(lin.conv_kernel)}, TensorRole::LIN_CONV, l});
            t.push_back({a + "dt_bias", {n_v}, TensorRole::LIN_DT_BIAS, l});
            t.push_back({a + "A_log", {n_v}, TensorRole::LIN_A_LOG, l, -1, TensorValues::NEG_EXP});
            t.push_back({a + "norm.weight", {int64_t(lin.head_v_dim)}, TensorRole::LIN_NORM, l});
            t.push_back({a + "out_proj.weight", {dim, value_dim}, TensorRole::LIN_OUT, l});
        } else {
            const std::string a = p + "self_attn.";
            t.push_back({a + "q_proj.weight", {c.attn_output_gate ? 2 * q_dim : q_dim, dim}, TensorRole::WQ, l});
            if (c.qkv_bias) t.push_back({a + "q_proj.bias", {q_dim}, TensorRole::Q_BIAS, l});
            t.push_back({a + "k_proj.weight", {kv_dim, dim}, TensorRole::WK, l});
            if (c.qkv_bias) t.push_back({a + "k_proj.bias", {kv_dim}, TensorRole::K_BIAS, l});
            t.push_back({a + "v_proj.weight", {kv_dim, dim}, TensorRole::WV, l});
            if (c.qkv_bias) t.push_back({a + "v_proj.bias", {kv_dim}, TensorRole::V_BIAS, l});
            t.push_back({a + "o_proj.weight", {dim, q_dim}, TensorRole::WO, l});
            if (c.o_bias) t.push_back({a + "o_proj.bias", {dim}, TensorRole::O_BIAS, l});
            if (c.attn_sinks) t.push_back({a + "sinks", {int64_t(c.n_heads)}, TensorRole::SINKS, l});
            if (c.qk_norm != QkNorm::NONE) {
                const bool full = c.qk_norm == QkNorm::FULL;
                t.push_back(
                    {a + "q_norm.weight", {full ? q_dim : int64_t(c.head_dim)}, TensorRole::Q_NORM, l, -1, norm});
                t.push_back(
                    {a + "k_norm.weight", {full ? kv_dim : int64_t(c.head_dim)}, TensorRole::K_NORM, l, -1, norm});
            }
        }
        t.push_back({p + "post_attention_layernorm.weight", {dim}, TensorRole::FFN_NORM, l, -1, norm});
        if (!c.is_moe()) {
            t.push_back({p + "mlp.gate_proj.weight", {hidden, dim}, TensorRole::EXPERT_W1, l, 0});
            t.push_back({p + "mlp.up_proj.weight", {hidden, dim}, TensorRole::EXPERT_W3, l, 0});
            t.push_back({p + "mlp.down_proj.weight", {dim, hidden}, TensorRole::EXPERT_W2, l, 0});
            continue;
        }
        if (c.layer_is_moe(l)) {
            // gpt-oss calls its router mlp.router.
            const std::string router = p + moe_block + (c.router_bias ? "router." : "gate.");
            t.push_back({router + "weight", {int64_t(c.n_experts), dim}, TensorRole::ROUTER, l});
            if (c.router_bias) t.push_back({router + "bias", {int64_t(c.n_experts)}, TensorRole::ROUTER_BIAS, l});
            for (int e = 0; e < c.n_experts; e++) {
                const std::string q = p + moe_block + "experts." + std::to_string(e) + ".";
                t.push_back({q + w1, {hidden, dim}, TensorRole::EXPERT_W1, l, e});
                t.push_back({q + w3, {hidden, dim}, TensorRole::EXPERT_W3, l, e});
                t.push_back({q + w2, {dim, hidden}, TensorRole::EXPERT_W2, l, e});
                if (c.expert_bias) {
                    t.push_back({q + "gate_proj.bias", {hidden}, TensorRole::EXPERT_B1, l, e});
                    t.push_back({q + "up_proj.bias", {hidden}, TensorRole::EXPERT_B3, l, e});
                    t.push_back({q + "down_proj.bias", {dim}, TensorRole::EXPERT_B2, l, e});
                }
            }
        }
        const int64_t mlp = c.layer_mlp_hidden(l);
        if (mlp > 0) {
            // A dense layer's MLP (mlp.*_proj) or the shared expert (mlp.shared_expert.*_proj).
            const std::string q = c.layer_is_moe(l) ? p + "mlp.shared_expert." : p + "mlp.";
            t.push_back({q + "gate_proj.weight", {mlp, dim}, TensorRole::MLP_W1, l});
            t.push_back({q + "up_proj.weight", {mlp, dim}, TensorRole::MLP_W3, l});
            t.push_back({q + "down_proj.weight", {dim, mlp}, TensorRole::MLP_W2, l});
            if (c.layer_is_moe(l))
                t.push_back({p + "mlp.shared_expert_gate.weight", {1, dim}, TensorRole::SHARED_GATE, l});
        }
    }
    t.push_back({m + "norm.weight", {dim}, TensorRole::FINAL_NORM, -1, -1, norm});
    if (!c.tie_embeddings) t.push_back({"lm_head.weight", {vocab, dim}, TensorRole::LM_HEAD});
    return t;
}
