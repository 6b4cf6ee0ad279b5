// Weight loading: walks the tensor table (engine/model/tensor_table.h) and checks
// every tensor's presence, dtype and shape against it, storing each pointer
// by its role (weights_assign, which the in-memory synthetic weights use too). bf16 matrices stay in the memory mapping; F16/F32 matrices are
// converted to bf16 once and norm vectors to fp32. Builds the result in a
// local object so a failure releases everything and never returns a
// half-loaded model. Does no math beyond these conversions.
#include "engine/model/weights.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
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

WeightView weights_vector(ModelWeights& w, const TensorView& t, TensorValues values) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    auto out = std::make_unique_for_overwrite<float[]>(size_t(n));
    for (int64_t i = 0; i < n; i++) out[size_t(i)] = tensor_value(element_f32(t, size_t(i)), values);
    w.owned_f32.push_back(std::move(out));
    // A vector is one row; a conv's (channels, 1, taps) is channels rows of taps.
    const int64_t rows = t.shape.size() == 1 ? 1 : t.shape[0];
    return weight_view(DType::F32, w.owned_f32.back().get(), rows, n / rows);
}

namespace {

// Rows [row, row + n) of a matrix (rows not interleaved) copied to dst.
void copy_rows(std::byte* dst, const WeightView& m, int64_t row, int64_t n) {
    std::memcpy(dst, m.row(row), size_t(n) * m.row_bytes);
}

// Qwen3-Next's fused in_proj_qkvz (per key head g: q_g, k_g, v_g, z_g rows)
// split into in_proj_qkv's layout (every q, every k, every v) and in_proj_z;
// in_proj_ba (per key head: b, a of its value heads) into b and a.
void split_fused(ModelWeights& w, LinearAttentionWeights& L, const WeightView& m, const LinearAttentionShape& s,
                 bool qkvz, const std::string& name) {
    if (dtype_row_group(m.type) != 1)
        throw MoeError(name + ": a fused projection must keep its rows apart, found " + dtype_name(m.type));
    const int64_t nk = s.n_k_heads, dk = s.head_k_dim, r = s.n_v_heads / s.n_k_heads, dv = s.head_v_dim;
    const size_t rb = m.row_bytes;
    auto alloc = [&](int64_t rows) { return w.arena.alloc(size_t(rows) * rb); };
    if (qkvz) {
        std::byte* qkv = alloc(s.conv_dim());
        std::byte* z = alloc(s.value_dim());
        const int64_t group = 2 * dk + 2 * r * dv;
        for (int64_t g = 0; g < nk; g++) {
            copy_rows(qkv + size_t(g * dk) * rb, m, g * group, dk);                                 // q_g
            copy_rows(qkv + size_t(nk * dk + g * dk) * rb, m, g * group + dk, dk);                  // k_g
            copy_rows(qkv + size_t(2 * nk * dk + g * r * dv) * rb, m, g * group + 2 * dk, r * dv);  // v of its heads
            copy_rows(z + size_t(g * r * dv) * rb, m, g * group + 2 * dk + r * dv, r * dv);         // z of its heads
        }
        L.wqkv = weight_view(m.type, qkv, s.conv_dim(), m.cols);
        L.wz = weight_view(m.type, z, s.value_dim(), m.cols);
    } else {
        std::byte* b = alloc(s.n_v_heads);
        std::byte* a = alloc(s.n_v_heads);
        for (int64_t g = 0; g < nk; g++) {
            copy_rows(b + size_t(g * r) * rb, m, g * 2 * r, r);
            copy_rows(a + size_t(g * r) * rb, m, g * 2 * r + r, r);
        }
        L.wb = weight_view(m.type, b, s.n_v_heads, m.cols);
        L.wa = weight_view(m.type, a, s.n_v_heads, m.cols);
    }
}

}  // namespace

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
        case TensorRole::LIN_QKV: L->linear.wqkv = m; break;
        case TensorRole::LIN_Z: L->linear.wz = m; break;
        case TensorRole::LIN_B: L->linear.wb = m; break;
        case TensorRole::LIN_A: L->linear.wa = m; break;
        case TensorRole::LIN_QKVZ:
        case TensorRole::LIN_BA:
            split_fused(w, L->linear, m, config.linear, t.role == TensorRole::LIN_QKVZ, t.name);
            break;
        case TensorRole::LIN_CONV: L->linear.conv = v; break;
        case TensorRole::LIN_DT_BIAS: L->linear.dt_bias = v; break;
        case TensorRole::LIN_A_LOG: L->linear.a = v; break;
        case TensorRole::LIN_NORM: L->linear.norm = v; break;
        case TensorRole::LIN_OUT: L->linear.wout = m; break;
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

namespace {

// transformers 5 stores a layer's experts fused (Qwen3.5's checkpoints):
// mlp.experts.gate_up_proj (n_experts, 2 hidden, dim), expert e's gate rows
// then its up rows, and mlp.experts.down_proj (n_experts, dim, hidden).
// Expert e's w1, w3 or w2 as a view into them; nullopt when the layer has
// no such tensor.
std::optional<TensorView> fused_expert(const SafetensorsSet& files, const TensorEntry& e, const ModelConfig& c) {
    const size_t at = e.name.rfind("experts.");
    if (at == std::string::npos) return std::nullopt;
    const bool down = e.role == TensorRole::EXPERT_W2;
    const std::string name = e.name.substr(0, at) + (down ? "experts.down_proj" : "experts.gate_up_proj");
    const TensorView* all = files.find(name);
    if (!all) return std::nullopt;
    const int64_t hidden = c.hidden_dim, dim = c.dim, n = c.n_experts;
    const std::vector<int64_t> want = down ? std::vector<int64_t>{n, dim, hidden} : std::vector<int64_t>{n, 2 * hidden, dim};
    if (all->shape != want)
        throw MoeError(all->file + ": " + name + ": expected shape " + tensor_shape_string(want) + ", found " +
                       tensor_shape_string(all->shape));
    const int64_t rows = down ? dim : hidden, cols = down ? hidden : dim;
    const int64_t first = down ? int64_t(e.expert) * dim : int64_t(e.expert) * 2 * hidden + (e.role == TensorRole::EXPERT_W3 ? hidden : 0);
    TensorView t = *all;
    t.name = name + "[" + std::to_string(e.expert) + "]";
    t.shape = {rows, cols};
    t.nbytes = size_t(rows * cols) * size_t(dtype_info(all->dtype).block_bytes);
    t.data = static_cast<const char*>(all->data) + size_t(first * cols) * size_t(dtype_info(all->dtype).block_bytes);
    return t;
}

}  // namespace

ModelWeights weights_load(const ModelConfig& config, const fs::path& dir) {
    ModelWeights w;
    w.files = std::make_unique<SafetensorsSet>(dir);
    weights_assign(w, config, [&](const TensorEntry& entry) {
        const TensorView* t = w.files->find(entry.name);
        std::optional<TensorView> slice;
        if (!t && entry.expert >= 0 && (slice = fused_expert(*w.files, entry, config))) t = &*slice;
        if (!t) throw MoeError(w.files->source() + ": " + entry.name + ": tensor missing");
        // BF16, F16 and F32 are all accepted (the reader refuses anything else).
        weights_check_shape(*t, entry);
        return entry.shape.size() == 2 ? weights_matrix(w, *t) : weights_vector(w, *t, entry.values);
    });
    return w;
}
