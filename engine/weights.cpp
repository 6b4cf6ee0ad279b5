// Weight loading: the one table from logical tensors to Hugging Face
// checkpoint names (Mixtral MoE and dense Mistral), with every tensor's
// presence, dtype and shape checked against the ModelConfig. bf16 matrices
// stay in the memory mapping; F16/F32 matrices are converted to bf16 once and
// norm vectors to fp32. Builds the result in a local object so a failure
// releases everything and never returns a half-loaded model. Does no math
// beyond these conversions.
#include "engine/weights.h"

#include <cstring>
#include <string>

#include "engine/errors.h"

namespace fs = std::filesystem;

namespace {

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: mant * 2^-24, exact in fp32
            float f = float(mant) * 0x1p-24f;
            return sign ? -f : f;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);  // inf or NaN (payload kept)
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// Element i of a tensor as fp32; memcpy because the mapping gives no alignment promise.
float element_f32(const TensorView& t, size_t i) {
    const char* p = static_cast<const char*>(t.data);
    switch (t.dtype) {
    case DType::BF16: {
        bf16 h;
        std::memcpy(&h, p + 2 * i, 2);
        return bf16_to_f32(h);
    }
    case DType::F16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        return f16_to_f32(h);
    }
    case DType::F32: {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
    }
    }
    return 0.0f;
}

std::string shape_string(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

class Loader {
public:
    explicit Loader(ModelWeights& w) : w_(w) {}

    // A (rows, cols) matrix as bf16: the mapping itself when it already is
    // aligned bf16, otherwise a converted copy owned by the weights.
    const bf16* matrix(const std::string& name, int64_t rows, int64_t cols) {
        const TensorView& t = get(name, {rows, cols});
        size_t n = size_t(rows) * size_t(cols);
        if (t.dtype == DType::BF16 && reinterpret_cast<uintptr_t>(t.data) % alignof(bf16) == 0)
            return static_cast<const bf16*>(t.data);
        auto out = std::make_unique<bf16[]>(n);
        if (t.dtype == DType::BF16) {
            std::memcpy(out.get(), t.data, n * sizeof(bf16));
        } else {
            for (size_t i = 0; i < n; i++) out[i] = f32_to_bf16(element_f32(t, i));
        }
        w_.owned_bf16.push_back(std::move(out));
        return w_.owned_bf16.back().get();
    }

    // A (n,) vector converted to fp32.
    const float* vector(const std::string& name, int64_t n) {
        const TensorView& t = get(name, {n});
        auto out = std::make_unique<float[]>(size_t(n));
        for (size_t i = 0; i < size_t(n); i++) out[i] = element_f32(t, i);
        w_.owned_f32.push_back(std::move(out));
        return w_.owned_f32.back().get();
    }

private:
    const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) {
        const TensorView* t = w_.files->find(name);
        if (!t) throw MoeError(w_.files->source() + ": " + name + ": tensor missing");
        if (t->shape != shape)
            throw MoeError(t->file + ": " + name + ": expected shape " + shape_string(shape) + ", found " +
                           shape_string(t->shape));
        // BF16, F16 and F32 are all accepted (the reader refuses anything else).
        return *t;
    }

    ModelWeights& w_;
};

}  // namespace

ModelWeights weights_load(const ModelConfig& config, const fs::path& dir) {
    ModelWeights w;
    w.files = std::make_unique<SafetensorsSet>(dir);
    Loader load(w);

    const int64_t dim = config.dim, hidden = config.hidden_dim, vocab = config.vocab_size;
    const int64_t q_dim = int64_t(config.n_heads) * config.head_dim;
    const int64_t kv_dim = int64_t(config.n_kv_heads) * config.head_dim;

    w.embed = load.matrix("model.embed_tokens.weight", vocab, dim);
    w.layers.resize(size_t(config.n_layers));
    for (int l = 0; l < config.n_layers; l++) {
        LayerWeights& L = w.layers[size_t(l)];
        const std::string p = "model.layers." + std::to_string(l) + ".";
        L.attn_norm = load.vector(p + "input_layernorm.weight", dim);
        L.wq = load.matrix(p + "self_attn.q_proj.weight", q_dim, dim);
        L.wk = load.matrix(p + "self_attn.k_proj.weight", kv_dim, dim);
        L.wv = load.matrix(p + "self_attn.v_proj.weight", kv_dim, dim);
        L.wo = load.matrix(p + "self_attn.o_proj.weight", dim, q_dim);
        L.ffn_norm = load.vector(p + "post_attention_layernorm.weight", dim);
        if (config.is_moe()) {
            L.router = load.matrix(p + "block_sparse_moe.gate.weight", config.n_experts, dim);
            L.experts.resize(size_t(config.n_experts));
            for (int e = 0; e < config.n_experts; e++) {
                const std::string q = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
                ExpertWeights& E = L.experts[size_t(e)];
                E.w1 = load.matrix(q + "w1.weight", hidden, dim);
                E.w3 = load.matrix(q + "w3.weight", hidden, dim);
                E.w2 = load.matrix(q + "w2.weight", dim, hidden);
            }
        } else {
            // Dense Mistral MLP as the single "expert" 0: gate = w1, up = w3, down = w2.
            ExpertWeights E;
            E.w1 = load.matrix(p + "mlp.gate_proj.weight", hidden, dim);
            E.w3 = load.matrix(p + "mlp.up_proj.weight", hidden, dim);
            E.w2 = load.matrix(p + "mlp.down_proj.weight", dim, hidden);
            L.experts.push_back(E);
        }
    }
    w.final_norm = load.vector("model.norm.weight", dim);
    w.lm_head = config.tie_embeddings ? w.embed : load.matrix("lm_head.weight", vocab, dim);
    return w;
}

size_t expert_bytes(const ModelConfig& config) {
    return 3 * size_t(config.hidden_dim) * size_t(config.dim) * sizeof(bf16);
}
