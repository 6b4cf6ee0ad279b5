// Model fingerprint (see fingerprint.h). The tensor lines come from the
// tensor table the loader walks (engine/model/tensor_table.h), in its load order;
// changing that order, a name or a shape changes every model's hash and so
// makes existing profiles refuse to load. No file is opened here.
#include "engine/model/fingerprint.h"

#include <cstdint>
#include <cstdio>

#include "engine/model/tensor_table.h"

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
    for (const TensorEntry& t : tensor_table(c)) {
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
    // Not in the hashed text (their tensors are, so the hash tells them apart
    // already): a model without dense layers keeps the hash its profiles carry.
    if (c.is_moe())
        for (int l = 0; l < c.n_layers; l++)
            if (!c.layer_is_moe(l)) f.dense_layers.push_back(l);
    return f;
}
