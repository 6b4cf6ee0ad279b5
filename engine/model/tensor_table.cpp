// Tensor table (see tensor_table.h): the Hugging Face names and shapes of
// every tensor, spelled here and nowhere else in the engine. Pure function
// of the ModelConfig.
#include <cstdint>

#include "engine/model/tensor_table.h"

std::vector<TensorEntry> tensor_table(const ModelConfig& c) {
    const int64_t dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
    const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
    std::vector<TensorEntry> t;
    t.push_back({"model.embed_tokens.weight", {vocab, dim}, TensorRole::EMBED});
    for (int l = 0; l < c.n_layers; l++) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        t.push_back({p + "input_layernorm.weight", {dim}, TensorRole::ATTN_NORM, l});
        t.push_back({p + "self_attn.q_proj.weight", {q_dim, dim}, TensorRole::WQ, l});
        t.push_back({p + "self_attn.k_proj.weight", {kv_dim, dim}, TensorRole::WK, l});
        t.push_back({p + "self_attn.v_proj.weight", {kv_dim, dim}, TensorRole::WV, l});
        t.push_back({p + "self_attn.o_proj.weight", {dim, q_dim}, TensorRole::WO, l});
        t.push_back({p + "post_attention_layernorm.weight", {dim}, TensorRole::FFN_NORM, l});
        if (c.is_moe()) {
            t.push_back({p + "block_sparse_moe.gate.weight", {int64_t(c.n_experts), dim}, TensorRole::ROUTER, l});
            for (int e = 0; e < c.n_experts; e++) {
                const std::string q = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
                t.push_back({q + "w1.weight", {hidden, dim}, TensorRole::EXPERT_W1, l, e});
                t.push_back({q + "w3.weight", {hidden, dim}, TensorRole::EXPERT_W3, l, e});
                t.push_back({q + "w2.weight", {dim, hidden}, TensorRole::EXPERT_W2, l, e});
            }
        } else {
            t.push_back({p + "mlp.gate_proj.weight", {hidden, dim}, TensorRole::EXPERT_W1, l, 0});
            t.push_back({p + "mlp.up_proj.weight", {hidden, dim}, TensorRole::EXPERT_W3, l, 0});
            t.push_back({p + "mlp.down_proj.weight", {dim, hidden}, TensorRole::EXPERT_W2, l, 0});
        }
    }
    t.push_back({"model.norm.weight", {dim}, TensorRole::FINAL_NORM});
    if (!c.tie_embeddings) t.push_back({"lm_head.weight", {vocab, dim}, TensorRole::LM_HEAD});
    return t;
}
