// Model fingerprint (see fingerprint.h). The tensor list mirrors the name
// table of engine/weights.cpp (Mixtral MoE layers, or the dense Mistral MLP
// as one expert); a test checks that every listed tensor exists with this
// shape in a synthetic checkpoint. No file is opened here.
#include "engine/fingerprint.h"

#include <cstdint>
#include <cstdio>

namespace {

uint64_t fnv1a64(const std::string& text) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : text) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

// Text that reads back as the same float.
std::string float_text(float x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", double(x));
    return buf;
}

}  // namespace

std::vector<TensorShape> model_tensor_shapes(const ModelConfig& c) {
    const int64_t dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
    const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
    std::vector<TensorShape> t;
    t.push_back({"model.embed_tokens.weight", {vocab, dim}});
    for (int l = 0; l < c.n_layers; l++) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        t.push_back({p + "input_layernorm.weight", {dim}});
        t.push_back({p + "self_attn.q_proj.weight", {q_dim, dim}});
        t.push_back({p + "self_attn.k_proj.weight", {kv_dim, dim}});
        t.push_back({p + "self_attn.v_proj.weight", {kv_dim, dim}});
        t.push_back({p + "self_attn.o_proj.weight", {dim, q_dim}});
        t.push_back({p + "post_attention_layernorm.weight", {dim}});
        if (c.is_moe()) {
            t.push_back({p + "block_sparse_moe.gate.weight", {int64_t(c.n_experts), dim}});
            for (int e = 0; e < c.n_experts; e++) {
                const std::string q = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
                t.push_back({q + "w1.weight", {hidden, dim}});
                t.push_back({q + "w3.weight", {hidden, dim}});
                t.push_back({q + "w2.weight", {dim, hidden}});
            }
        } else {
            t.push_back({p + "mlp.gate_proj.weight", {hidden, dim}});
            t.push_back({p + "mlp.up_proj.weight", {hidden, dim}});
            t.push_back({p + "mlp.down_proj.weight", {dim, hidden}});
        }
    }
    t.push_back({"model.norm.weight", {dim}});
    if (!c.tie_embeddings) t.push_back({"lm_head.weight", {vocab, dim}});
    return t;
}

std::string model_fingerprint_text(const ModelConfig& c) {
    std::string s;
    auto field = [&](const char* key, const std::string& value) { s += std::string(key) + "=" + value + "\n"; };
    field("architecture", c.architecture);
    field("dim", std::to_string(c.dim));
    field("hidden_dim", std::to_string(c.hidden_dim));
    field("n_layers", std::to_string(c.n_layers));
    field("n_heads", std::to_string(c.n_heads));
    field("n_kv_heads", std::to_string(c.n_kv_heads));
    field("head_dim", std::to_string(c.head_dim));
    field("vocab_size", std::to_string(c.vocab_size));
    field("n_experts", std::to_string(c.n_experts));
    field("n_experts_active", std::to_string(c.n_experts_active));
    field("norm_topk_prob", c.norm_topk_prob ? "true" : "false");
    field("rope_theta", float_text(c.rope_theta));
    field("rms_norm_eps", float_text(c.rms_norm_eps));
    field("tie_embeddings", c.tie_embeddings ? "true" : "false");
    for (const TensorShape& t : model_tensor_shapes(c)) {
        s += t.name + " [";
        for (size_t i = 0; i < t.shape.size(); i++) s += (i ? ", " : "") + std::to_string(t.shape[i]);
        s += "]\n";
    }
    return s;
}

ModelFingerprint model_fingerprint(const ModelConfig& c) {
    ModelFingerprint f;
    f.architecture = c.architecture;
    f.n_layers = c.n_layers;
    f.n_experts = c.n_experts;
    f.n_experts_active = c.n_experts_active;
    f.hash = fnv1a64(model_fingerprint_text(c));
    return f;
}
