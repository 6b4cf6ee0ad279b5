// Weight loading: walks the tensor table (engine/model/tensor_table.h) and checks
// every tensor's presence, dtype and shape against it, storing each pointer
// by its role (weights_assign, which the in-memory synthetic weights use too). bf16 matrices stay in the memory mapping; F16/F32 matrices are
// converted to bf16 once and norm vectors to fp32. Builds the result in a
// local object so a failure releases everything and never returns a
// half-loaded model. Does no math beyond these conversions.
#include "engine/model/weights.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/errors.h"
#include "cpu_kernels/quant.h"

namespace fs = std::filesystem;

namespace {

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
        return fp16_to_f32(h);
    }
    case DType::F32: {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
    }
    default:
        break;  // a quantized type never comes from a safetensors file (its reader admits the float types only)
    }
    throw MoeError(t.file + ": " + t.name + ": " + dtype_name(t.dtype) + " is not a float type");
}

}  // namespace

const TensorView& weights_check_shape(const TensorView& t, const TensorEntry& entry) {
    if (t.shape != entry.shape)
        throw MoeError(t.file + ": " + t.name + ": expected shape " + tensor_shape_string(entry.shape) + ", found " +
                       tensor_shape_string(t.shape));
    return t;
}

WeightView weights_matrix(ModelWeights& w, const TensorView& t) {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const size_t n = size_t(rows) * size_t(cols);
    const bool bf16_aligned = t.dtype == DType::BF16 && reinterpret_cast<uintptr_t>(t.data) % alignof(bf16) == 0;
    if (dtype_quantized(t.dtype) || bf16_aligned) return weight_view(t.dtype, t.data, rows, cols);
    auto out = std::make_unique_for_overwrite<bf16[]>(n);
    if (t.dtype == DType::BF16) {
        std::memcpy(out.get(), t.data, n * sizeof(bf16));
    } else {
        for (size_t i = 0; i < n; i++) out[i] = f32_to_bf16(element_f32(t, i));
    }
    w.owned_bf16.push_back(std::move(out));
    return weight_view(DType::BF16, w.owned_bf16.back().get(), rows, cols);
}

WeightView weights_vector(ModelWeights& w, const TensorView& t) {
    const int64_t n = t.shape[0];
    auto out = std::make_unique_for_overwrite<float[]>(size_t(n));
    for (int64_t i = 0; i < n; i++) out[size_t(i)] = element_f32(t, size_t(i));
    w.owned_f32.push_back(std::move(out));
    return weight_view(DType::F32, w.owned_f32.back().get(), 1, n);
}

void weights_assign(ModelWeights& w, const ModelConfig& config,
                    const std::function<WeightView(const TensorEntry&)>& data) {
    w.layers.assign(size_t(config.n_layers), LayerWeights{});
    // A dense Mistral MLP is the single "expert" 0: gate = w1, up = w3, down = w2.
    for (int l = 0; l < config.n_layers; l++)
        w.layers[size_t(l)].experts.resize(!config.is_moe()         ? 1
                                           : config.layer_is_moe(l) ? size_t(config.n_experts)
                                                                    : 0);
    for (const TensorEntry& t : tensor_table(config)) {
        LayerWeights* L = t.layer >= 0 ? &w.layers[size_t(t.layer)] : nullptr;
        ExpertWeights* E = t.expert >= 0 ? &L->experts[size_t(t.expert)] : nullptr;
        const WeightView m = data(t);
        const float* v = static_cast<const float*>(m.data);
        switch (t.role) {
        case TensorRole::EMBED: w.embed = m; break;
        case TensorRole::ATTN_NORM: L->attn_norm = v; break;
        case TensorRole::WQ: L->wq = m; break;
        case TensorRole::WK: L->wk = m; break;
        case TensorRole::WV: L->wv = m; break;
        case TensorRole::WO: L->wo = m; break;
        case TensorRole::Q_BIAS:
            L->q_bias = v;
            break;
        case TensorRole::K_BIAS:
            L->k_bias = v;
            break;
        case TensorRole::V_BIAS:
            L->v_bias = v;
            break;
        case TensorRole::Q_NORM:
            L->q_norm = v;
            break;
        case TensorRole::K_NORM:
            L->k_norm = v;
            break;
        case TensorRole::FFN_NORM: L->ffn_norm = v; break;
        case TensorRole::ROUTER: L->router = m; break;
        case TensorRole::EXPERT_W1: E->w1 = m; break;
        case TensorRole::EXPERT_W3: E->w3 = m; break;
        case TensorRole::EXPERT_W2: E->w2 = m; break;
        case TensorRole::MLP_W1:
            L->mlp.w1 = m;
            break;
        case TensorRole::MLP_W3:
            L->mlp.w3 = m;
            break;
        case TensorRole::MLP_W2:
            L->mlp.w2 = m;
            break;
        case TensorRole::SHARED_GATE:
            L->shared_gate = m;
            break;
        case TensorRole::FINAL_NORM: w.final_norm = v; break;
        case TensorRole::LM_HEAD: w.lm_head = m; break;
        }
    }
    if (config.tie_embeddings) w.lm_head = w.embed;
}

std::string weights_expert_dtypes(const ModelWeights& w) {
    std::vector<bool> seen(size_t(DType::Q6_K) + 1, false);
    for (const LayerWeights& L : w.layers)
        for (const ExpertWeights& e : L.experts)
            for (const WeightView* m : {&e.w1, &e.w3, &e.w2}) seen[size_t(m->type)] = true;
    std::string names;
    for (size_t t = 0; t < seen.size(); t++) {
        if (!seen[t]) continue;
        std::string name = dtype_name(DType(t));
        for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        names += (names.empty() ? "" : "+") + name;
    }
    return names;
}

ModelWeights weights_load(const ModelConfig& config, const fs::path& dir) {
    ModelWeights w;
    w.files = std::make_unique<SafetensorsSet>(dir);
    weights_assign(w, config, [&](const TensorEntry& entry) {
        const TensorView* t = w.files->find(entry.name);
        if (!t) throw MoeError(w.files->source() + ": " + entry.name + ": tensor missing");
        // BF16, F16 and F32 are all accepted (the reader refuses anything else).
        weights_check_shape(*t, entry);
        return entry.shape.size() == 1 ? weights_vector(w, *t) : weights_matrix(w, *t);
    });
    return w;
}
