// Weight loading: walks the tensor table (engine/model/tensor_table.h) and checks
// every tensor's presence, dtype and shape against it, storing each pointer
// by its role (weights_assign, which the in-memory synthetic weights use too). bf16 matrices stay in the memory mapping; F16/F32 matrices are
// converted to bf16 once and norm vectors to fp32. Builds the result in a
// local object so a failure releases everything and never returns a
// half-loaded model. Does no math beyond these conversions.
#include "engine/model/weights.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <iterator>
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
    for (int l = 0; l < config.n_layers; l++) {
        w.layers[size_t(l)].experts.resize(!config.is_moe()         ? 1
                                           : config.layer_is_moe(l) ? size_t(config.n_experts)
                                                                    : 0);
        for (ExpertWeights& e : w.layers[size_t(l)].experts) e.spec.act = config.ffn_act;
    }
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
        case TensorRole::O_BIAS: L->o_bias = v; break;
        case TensorRole::SINKS: L->sinks = v; break;
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
        case TensorRole::ROUTER_BIAS: L->router_bias = v; break;
        case TensorRole::EXPERT_W1: E->w1 = m; break;
        case TensorRole::EXPERT_W3: E->w3 = m; break;
        case TensorRole::EXPERT_W2: E->w2 = m; break;
        case TensorRole::EXPERT_B1: E->spec.b1 = v; break;
        case TensorRole::EXPERT_B3: E->spec.b3 = v; break;
        case TensorRole::EXPERT_B2: E->spec.b2 = v; break;
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

namespace {

size_t slot_align(size_t n) {
    return (n + EXPERT_SLOT_ALIGN - 1) / EXPERT_SLOT_ALIGN * EXPERT_SLOT_ALIGN;
}

}  // namespace

ExpertParts expert_parts(const ExpertWeights& e) {
    ExpertParts p;
    auto add = [&](const void* data, size_t bytes) {
        p.part[p.n++] = {data, bytes, p.slot_bytes};
        p.slot_bytes += slot_align(bytes);
    };
    for (const WeightView* m : {&e.w1, &e.w3, &e.w2}) add(m->data, m->bytes());
    const size_t floats[3] = {size_t(e.w1.rows), size_t(e.w3.rows), size_t(e.w2.rows)};
    const float* const biases[3] = {e.spec.b1, e.spec.b3, e.spec.b2};
    for (int i = 0; i < 3; i++)
        if (biases[i]) add(biases[i], floats[i] * sizeof(float));
    return p;
}

ExpertWeights expert_in_slot(const ExpertWeights& like, void* base) {
    ExpertWeights e = like;
    const ExpertParts p = expert_parts(like);
    auto at = [&](int i) { return static_cast<std::byte*>(base) + p.part[i].offset; };
    e.w1.data = at(0);
    e.w3.data = at(1);
    e.w2.data = at(2);
    int i = 3;
    for (const float** b : {&e.spec.b1, &e.spec.b3, &e.spec.b2})
        if (*b) *b = reinterpret_cast<const float*>(at(i++));
    return e;
}

size_t expert_slot_bytes(const ModelWeights& w) {
    size_t most = 0;
    for (const LayerWeights& L : w.layers)
        if (!L.experts.empty()) most = std::max(most, expert_parts(L.experts[0]).slot_bytes);
    return most;
}

std::string weights_expert_dtypes(const ModelWeights& w) {
    std::vector<bool> seen(std::size(DTYPE_INFO), false);
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

// Hugging Face files that keep a layer's experts fused, expert e's tensor
// out of them (nullopt when the layer has no such tensors):
// * transformers 5 (Qwen3.5): mlp.experts.gate_up_proj (n_experts,
//   2 hidden, dim), expert e's gate rows then its up rows, and
//   mlp.experts.down_proj (n_experts, dim, hidden): views into them.
// * gpt-oss: gate and up interleaved (row 2i is gate row i, 2i + 1 up row
//   i), as MXFP4 (gate_up_proj_blocks (n_experts, 2 hidden, dim / 32, 16)
//   with gate_up_proj_scales (n_experts, 2 hidden, dim / 32); down_proj_
//   blocks / _scales (n_experts, dim, hidden / 32[, 16])) or as transposed
//   floats (gate_up_proj (n_experts, dim, 2 hidden), down_proj (n_experts,
//   hidden, dim)); biases gate_up_proj_bias (n_experts, 2 hidden),
//   interleaved, and down_proj_bias (n_experts, dim). Copied into w's
//   memory: MXFP4 in ggml's block layout (the same values), floats as bf16
//   rows, biases as fp32.
class FusedExperts {
public:
    FusedExperts(ModelWeights& w, const SafetensorsSet& files, const ModelConfig& c)
        : w_(w), files_(files), c_(c), gpt_oss_(c.architecture == "GptOssForCausalLM") {}

    std::optional<WeightView> find(const TensorEntry& e) {
        const size_t at = e.name.rfind("experts.");
        if (at == std::string::npos) return std::nullopt;
        const bool down = e.role == TensorRole::EXPERT_W2 || e.role == TensorRole::EXPERT_B2;
        const std::string stem = e.name.substr(0, at) + (down ? "experts.down_proj" : "experts.gate_up_proj");
        return gpt_oss_ ? gpt_oss(e, stem, down) : transformers5(e, stem, down);
    }

private:
    // The tensor `name`, checked to have `shape` and raw bytes (U8) or floats.
    const TensorView* fused(const std::string& name, const std::vector<int64_t>& shape, bool bytes) const {
        const TensorView* t = files_.find(name);
        if (!t) return nullptr;
        if (t->shape != shape)
            throw MoeError(t->file + ": " + name + ": expected shape " + tensor_shape_string(shape) + ", found " +
                           tensor_shape_string(t->shape));
        const bool is_bytes = t->dtype == DType::U8;
        if (is_bytes != bytes)
            throw MoeError(t->file + ": " + name + ": expected " + (bytes ? "U8" : "a float type") + ", found " +
                           dtype_name(t->dtype));
        return t;
    }

    std::optional<WeightView> transformers5(const TensorEntry& e, const std::string& stem, bool down) {
        if (e.role != TensorRole::EXPERT_W1 && e.role != TensorRole::EXPERT_W3 && e.role != TensorRole::EXPERT_W2)
            return std::nullopt;
        const int64_t hidden = c_.hidden_dim, dim = c_.dim, n = c_.n_experts;
        const TensorView* all = fused(stem, down ? std::vector<int64_t>{n, dim, hidden} : std::vector<int64_t>{n, 2 * hidden, dim}, false);
        if (!all) return std::nullopt;
        const int64_t rows = down ? dim : hidden, cols = down ? hidden : dim;
        const int64_t first = down ? int64_t(e.expert) * dim
                                   : int64_t(e.expert) * 2 * hidden + (e.role == TensorRole::EXPERT_W3 ? hidden : 0);
        TensorView t = *all;
        t.name = stem + "[" + std::to_string(e.expert) + "]";
        t.shape = {rows, cols};
        t.nbytes = size_t(rows * cols) * size_t(dtype_info(all->dtype).block_bytes);
        t.data = static_cast<const char*>(all->data) + size_t(first * cols) * size_t(dtype_info(all->dtype).block_bytes);
        return weights_matrix(w_, t);
    }

    std::optional<WeightView> gpt_oss(const TensorEntry& e, const std::string& stem, bool down) {
        const int64_t n = c_.n_experts, x = e.expert;
        const int64_t fused_rows = down ? c_.dim : 2 * int64_t(c_.hidden_dim), cols = down ? c_.hidden_dim : c_.dim;
        const int64_t rows = down ? fused_rows : fused_rows / 2;
        const int up = e.role == TensorRole::EXPERT_W3 || e.role == TensorRole::EXPERT_B3;
        // Row r of this expert's matrix (or element r of its bias) in the fused tensor's rows.
        auto source_row = [&](int64_t r) { return x * fused_rows + (down ? r : 2 * r + up); };
        if (e.role == TensorRole::EXPERT_B1 || e.role == TensorRole::EXPERT_B3 || e.role == TensorRole::EXPERT_B2) {
            const TensorView* b = fused(stem + "_bias", {n, fused_rows}, false);
            if (!b) return std::nullopt;
            auto out = std::make_unique_for_overwrite<float[]>(size_t(rows));
            for (int64_t r = 0; r < rows; r++) out[size_t(r)] = element_f32(*b, size_t(source_row(r)));
            w_.owned_f32.push_back(std::move(out));
            return weight_view(DType::F32, w_.owned_f32.back().get(), 1, rows);
        }
        if (files_.find(stem + "_blocks")) {
            if (cols % 32 != 0)
                throw MoeError(files_.source() + ": " + stem + "_blocks: rows of " + std::to_string(cols) +
                               " are not whole MXFP4 blocks of 32");
            const int64_t nb = cols / 32;
            const TensorView* blocks = fused(stem + "_blocks", {n, fused_rows, nb, 16}, true);
            const TensorView* scales = fused(stem + "_scales", {n, fused_rows, nb}, true);
            if (!scales) throw MoeError(files_.source() + ": " + stem + "_scales: tensor missing (beside " + stem + "_blocks)");
            auto* dst = reinterpret_cast<BlockMXFP4*>(w_.arena.alloc(size_t(rows * nb) * sizeof(BlockMXFP4)));
            const auto* qs = static_cast<const uint8_t*>(blocks->data);
            const auto* es = static_cast<const uint8_t*>(scales->data);
            for (int64_t r = 0; r < rows; r++) {
                const size_t first = size_t(source_row(r) * nb);
                mxfp4_from_hf(dst + r * nb, qs + first * 16, es + first, size_t(nb));
            }
            return weight_view(DType::MXFP4, dst, rows, cols);
        }
        // Floats, transposed: element (r, col) of the matrix is [x][col][source row of r].
        const TensorView* t = fused(stem, {n, cols, fused_rows}, false);
        if (!t) return std::nullopt;
        auto out = std::make_unique_for_overwrite<bf16[]>(size_t(rows * cols));
        for (int64_t col = 0; col < cols; col++) {
            const size_t base = size_t((x * cols + col) * fused_rows);
            for (int64_t r = 0; r < rows; r++)
                out[size_t(r * cols + col)] = f32_to_bf16(element_f32(*t, base + size_t(down ? r : 2 * r + up)));
        }
        w_.owned_bf16.push_back(std::move(out));
        return weight_view(DType::BF16, w_.owned_bf16.back().get(), rows, cols);
    }

    ModelWeights& w_;
    const SafetensorsSet& files_;
    const ModelConfig& c_;
    const bool gpt_oss_;
};

}  // namespace

ModelWeights weights_load(const ModelConfig& config, const fs::path& dir) {
    ModelWeights w;
    w.files = std::make_unique<SafetensorsSet>(dir);
    FusedExperts fused(w, *w.files, config);
    weights_assign(w, config, [&](const TensorEntry& entry) {
        const TensorView* t = w.files->find(entry.name);
        if (!t && entry.expert >= 0)
            if (std::optional<WeightView> m = fused.find(entry)) return *m;
        if (!t)
            throw MoeError(w.files->source() + ": " + entry.name + ": tensor missing" +
                           (entry.expert >= 0 ? " (nor the layer's fused experts tensors)" : ""));
        // BF16, F16 and F32 are all accepted (the reader refuses anything else).
        weights_check_shape(*t, entry);
        return entry.shape.size() == 2 ? weights_matrix(w, *t) : weights_vector(w, *t, entry.values);
    });
    return w;
}
