// GGUF models (see gguf_model.h): config.json's fields from the metadata,
// checked by the one config parser, and the tensor table's roles from the
// GGUF tensor names of the llama, qwen3moe, qwen2moe and olmoe architectures.
#include "engine/model/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "base/errors.h"
#include "base/files.h"
#include "cpu_kernels/quant.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/text/gguf_tokenizer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A GGUF architecture and the Hugging Face one it stores. llama.cpp writes
// the llama architecture's q/k rows for interleaved RoPE (the loader and
// writer permute them); the Qwen and OLMoE archs keep Hugging Face's order
// (NEOX RoPE is rotate-half).
struct GgufArch {
    const char* gguf;
    const char* hf;
};
constexpr GgufArch ARCHS[] = {{"llama", "MixtralForCausalLM"},
                              {"llama", "MistralForCausalLM"},
                              {"qwen3moe", "Qwen3MoeForCausalLM"},
                              {"qwen2moe", "Qwen2MoeForCausalLM"},
                              {"olmoe", "OlmoeForCausalLM"},
                              {"qwen35moe", "Qwen3_5MoeForCausalLM"},
                              {"qwen35moe", "Qwen3_5MoeForConditionalGeneration"},
                              {"qwen3next", "Qwen3NextForCausalLM"},
                              {"gpt-oss", "GptOssForCausalLM"}};

bool hybrid_arch(const char* arch) {
    return arch && (std::string_view(arch) == "qwen35moe" || std::string_view(arch) == "qwen3next");
}

// The architectures whose FFN norm llama.cpp names post_attention_norm.
bool post_attention_norm_arch(const char* arch) {
    return hybrid_arch(arch) || (arch && std::string_view(arch) == "gpt-oss");
}

const char* gguf_arch_of(const ModelConfig& c) {
    for (const GgufArch& a : ARCHS)
        if (c.architecture == a.hf) return a.gguf;
    return nullptr;
}

bool permuted_qk(const ModelConfig& c) {
    return std::string_view(gguf_arch_of(c)) == "llama";
}

// The GGUF tensor name of a role without "blk.N." and ".weight" / ".bias".
// The always-run MLP is the shared expert's ffn_*_shexp on a MoE layer, a
// dense layer's ffn_* otherwise.
const char* gguf_role_name(TensorRole role, bool shared, bool post_attention_norm) {
    switch (role) {
    case TensorRole::EMBED:
        return "token_embd";
    case TensorRole::ATTN_NORM:
        return "attn_norm";
    case TensorRole::WQ:
    case TensorRole::Q_BIAS:
        return "attn_q";
    case TensorRole::WK:
    case TensorRole::K_BIAS:
        return "attn_k";
    case TensorRole::WV:
    case TensorRole::V_BIAS:
        return "attn_v";
    case TensorRole::WO:
    case TensorRole::O_BIAS:
        return "attn_output";
    case TensorRole::SINKS:
        return "attn_sinks";
    case TensorRole::Q_NORM:
        return "attn_q_norm";
    case TensorRole::K_NORM:
        return "attn_k_norm";
    case TensorRole::FFN_NORM:
        return post_attention_norm ? "post_attention_norm" : "ffn_norm";
    case TensorRole::ROUTER:
    case TensorRole::ROUTER_BIAS:
        return "ffn_gate_inp";
    case TensorRole::EXPERT_W1:
    case TensorRole::EXPERT_B1:
        return "ffn_gate";
    case TensorRole::EXPERT_W3:
    case TensorRole::EXPERT_B3:
        return "ffn_up";
    case TensorRole::EXPERT_W2:
    case TensorRole::EXPERT_B2:
        return "ffn_down";
    case TensorRole::MLP_W1:
        return shared ? "ffn_gate_shexp" : "ffn_gate";
    case TensorRole::MLP_W3:
        return shared ? "ffn_up_shexp" : "ffn_up";
    case TensorRole::MLP_W2:
        return shared ? "ffn_down_shexp" : "ffn_down";
    case TensorRole::SHARED_GATE:
        return "ffn_gate_inp_shexp";
    case TensorRole::FINAL_NORM:
        return "output_norm";
    case TensorRole::LM_HEAD:
        return "output";
    // Gated DeltaNet (llama.cpp's qwen35moe / qwen3next names).
    case TensorRole::LIN_QKV:
        return "attn_qkv";
    case TensorRole::LIN_Z:
        return "attn_gate";
    case TensorRole::LIN_B:
        return "ssm_beta";
    case TensorRole::LIN_A:
        return "ssm_alpha";
    case TensorRole::LIN_CONV:
        return "ssm_conv1d";
    case TensorRole::LIN_DT_BIAS:
        return "ssm_dt";
    case TensorRole::LIN_A_LOG:
        return "ssm_a";
    case TensorRole::LIN_NORM:
        return "ssm_norm";
    case TensorRole::LIN_OUT:
        return "ssm_out";
    case TensorRole::LIN_BA:  // qwen3next: b, a per key head
        return "ssm_ba";
    case TensorRole::LIN_QKVZ:  // GGUF files hold it split
        return "";
    }
    return "";
}

// The GGUF name of a table entry's tensor; a MoE expert's is its layer's
// merged tensor ("blk.N.ffn_gate_exps.weight"), or with per_expert its own
// ("blk.N.ffn_gate.E.weight", older files).
std::string gguf_name(const TensorEntry& e, const ModelConfig& c, bool per_expert = false) {
    // Appended piece by piece (GCC 12's -Wrestrict misfires on "." + std::string).
    std::string name;
    if (e.layer >= 0) name.append("blk.").append(std::to_string(e.layer)).append(".");
    name.append(
        gguf_role_name(e.role, e.layer >= 0 && c.layer_is_moe(e.layer), post_attention_norm_arch(gguf_arch_of(c))));
    if (c.is_moe() && e.expert >= 0) {
        if (per_expert)
            name.append(".").append(std::to_string(e.expert));
        else
            name.append("_exps");
    }
    if (e.role == TensorRole::LIN_A_LOG) return name;  // llama.cpp's ssm_a has no suffix
    return name.append(tensor_role_is_bias(e.role) ? ".bias" : ".weight");
}

// The tensor that holds one entry of the table: a whole GGUF tensor, or
// (experts merged into one 3-D tensor, their biases into one 2-D one)
// expert e's slice of it.
// The shared expert's gate is a vector (dim) in GGUF, a (1, dim) matrix here.
TensorView find_tensor(const GgufFile& f, const TensorEntry& t, const ModelConfig& c) {
    if (t.role == TensorRole::SHARED_GATE) {
        TensorView gate = f.tensor(gguf_name(t, c));
        if (gate.shape.size() == 1) gate.shape.insert(gate.shape.begin(), 1);
        return gate;
    }
    if (!c.is_moe() || t.expert < 0) return f.tensor(gguf_name(t, c));
    const std::string merged = gguf_name(t, c);
    const TensorView* all = f.find(merged);
    if (!all) {
        const std::string single = gguf_name(t, c, true);
        if (f.find(single)) return f.tensor(single);
        throw MoeError(f.path().string() + ": " + merged + ": tensor missing (nor " + single + ")");
    }
    if (all->shape.size() != t.shape.size() + 1 || !std::equal(t.shape.begin(), t.shape.end(), all->shape.begin() + 1) ||
        all->shape[0] <= t.expert) {
        std::string want = "[n_experts";
        for (int64_t d : t.shape) want += ", " + std::to_string(d);
        throw MoeError(all->file + ": " + merged + ": expected shape " + want + "] with expert " +
                       std::to_string(t.expert) + ", found " + tensor_shape_string(all->shape));
    }
    TensorView slice = *all;
    slice.name = merged + " [expert " + std::to_string(t.expert) + "]";
    slice.shape = t.shape;
    slice.nbytes = all->nbytes / size_t(all->shape[0]);
    slice.data = static_cast<const char*>(all->data) + size_t(t.expert) * slice.nbytes;
    return slice;
}

// A matrix in the layout the CPU's kernels read, copied into w's arena where
// that differs from the file's: attn_q / attn_k rows put back in Hugging Face
// order (head_dim > 0: each row's bytes from the GGUF row that holds it), and
// Q8_0 / Q4_K / Q6_K with 8 rows interleaved (their _R8 types, quant.h: the same
// bytes, the layout read fastest). Anything else: the file's bytes in place.
WeightView held_matrix(ModelWeights& w, const TensorView& t, int head_dim) {
    const WeightView g = weights_matrix(w, t);
    const DType held = g.rows % 8 == 0 ? dtype_interleaved(g.type).value_or(g.type) : g.type;
    const bool interleave = held != g.type;
    if (!interleave && head_dim == 0) return g;
    const void* src = g.data;
    std::vector<std::byte> unpermuted;
    if (head_dim > 0) {
        // Interleaved afterwards: the reordered rows are only a step.
        if (interleave) unpermuted.resize(g.bytes());
        std::byte* rows = interleave ? unpermuted.data() : w.arena.alloc(g.bytes());
        for (int64_t r = 0; r < g.rows; r++)
            std::memcpy(rows + size_t(r) * g.row_bytes, g.row(gguf_llama_row(r, head_dim)), g.row_bytes);
        if (!interleave) return weight_view(g.type, rows, g.rows, g.cols);
        src = rows;
    }
    std::byte* out = w.arena.alloc(g.bytes());
    quant_repack_r8(held, src, out, g.rows, g.row_bytes);
    return weight_view(held, out, g.rows, g.cols);
}

}  // namespace

bool gguf_model_path(const fs::path& path) {
    return path.extension() == ".gguf" && file_type_at(path) == fs::file_type::regular;
}

int64_t gguf_llama_row(int64_t hf_row, int head_dim) {
    const int64_t head = hf_row / head_dim, i = hf_row % head_dim, half = head_dim / 2;
    return head * head_dim + (i < half ? 2 * i : 2 * (i - half) + 1);
}

ModelConfig gguf_model_config(const GgufFile& f) {
    const GgufMetadata& m = f.metadata();
    const std::string file = f.path().string();
    const std::string arch(m.get_string("general.architecture"));
    const bool hybrid = hybrid_arch(arch.c_str());
    const bool gpt_oss = arch == "gpt-oss";
    if (arch != "llama" && arch != "qwen3moe" && arch != "qwen2moe" && arch != "olmoe" && !hybrid && !gpt_oss)
        throw MoeError(file + ": general.architecture: '" + arch +
                       "' is not supported (supported: llama, the architecture of Mixtral and Mistral GGUFs; "
                       "qwen3moe, qwen2moe, olmoe, qwen35moe, qwen3next, gpt-oss)");
    const std::string p = arch + ".";
    auto get = [&](const std::string& key) { return m.get_int<int>(key); };
    auto find = [&](const std::string& key) { return m.find_int<int>(key); };

    const int n_experts = find(p + "expert_count").value_or(0);
    const std::optional<int> expert_ff = find(p + "expert_feed_forward_length");
    json j;
    j["hidden_size"] = get(p + "embedding_length");
    if (arch == "llama") {
        j["architectures"] = {n_experts > 0 ? "MixtralForCausalLM" : "MistralForCausalLM"};
        j["intermediate_size"] = n_experts > 0 && expert_ff ? *expert_ff : get(p + "feed_forward_length");
        if (n_experts > 0) j["num_local_experts"] = n_experts;
    } else {
        for (const GgufArch& a : ARCHS)
            if (arch == a.gguf) {
                j["architectures"] = {a.hf};
                break;
            }
        j["num_experts"] = get(p + "expert_count");
        if (gpt_oss) {
            j["num_local_experts"] = get(p + "expert_count");
            j["intermediate_size"] = expert_ff ? *expert_ff : get(p + "feed_forward_length");
        } else if (arch == "olmoe") {
            j["intermediate_size"] = expert_ff ? *expert_ff : get(p + "feed_forward_length");
        } else {
            j["moe_intermediate_size"] = expert_ff ? *expert_ff : get(p + "feed_forward_length");
            if (std::optional<int> ff = find(p + "feed_forward_length")) j["intermediate_size"] = *ff;
        }
        if (arch == "qwen2moe" || hybrid)
            j["shared_expert_intermediate_size"] = get(p + "expert_shared_feed_forward_length");
        // llama.cpp renormalises Qwen3-MoE's top-k and not the others' unless the file says.
        j["norm_topk_prob"] = m.find_bool(p + "expert_weights_norm").value_or(arch == "qwen3moe");
    }
    if (n_experts > 0) j["num_experts_per_tok"] = get(p + "expert_used_count");
    // block_count counts the multi-token-prediction blocks at the end (nextn_predict_layers).
    const int n_mtp = hybrid ? find(p + "nextn_predict_layers").value_or(0) : 0;
    j["num_hidden_layers"] = get(p + "block_count") - n_mtp;
    if (hybrid) {
        // llama.cpp's qwen35moe / qwen3next keys for the Gated DeltaNet
        // (ssm.state_size is the key head width, ssm.inner_size all value heads').
        const int n_v = get(p + "ssm.time_step_rank");
        j["linear_conv_kernel_dim"] = get(p + "ssm.conv_kernel");
        j["linear_key_head_dim"] = get(p + "ssm.state_size");
        j["linear_num_key_heads"] = get(p + "ssm.group_count");
        j["linear_num_value_heads"] = n_v;
        j["linear_value_head_dim"] = n_v > 0 ? get(p + "ssm.inner_size") / n_v : 0;
        j["mtp_num_hidden_layers"] = n_mtp;
        const int n_layers = j["num_hidden_layers"].get<int>();
        if (std::optional<GgufValue> recurrent = m.find_value(p + "attention.recurrent_layers")) {
            if (recurrent->type() != GgufType::ARRAY || recurrent->items().size() < size_t(n_layers))
                throw MoeError(file + ": " + p + "attention.recurrent_layers: expected an array of " +
                               std::to_string(n_layers) + " or more bools");
            json types = json::array();
            for (int l = 0; l < n_layers; l++)
                types.push_back(recurrent->items()[size_t(l)].as_unsigned() ? "linear_attention" : "full_attention");
            j["layer_types"] = types;
        } else if (std::optional<int> interval = find(p + "full_attention_interval")) {
            j["full_attention_interval"] = *interval;
        }
        if (std::optional<int> rot = find(p + "rope.dimension_count"))
            j["partial_rotary_factor"] = double(*rot) / double(find(p + "attention.key_length").value_or(256));
        if (arch == "qwen3next") j["norm_topk_prob"] = true;  // llama.cpp renormalises both
    }
    if (gpt_oss) {
        // llama.cpp's SWA layers: attention.sliding_window_pattern, a bool a
        // layer or a period n (layer l slides when l % n < n - 1), 2 when absent.
        j["sliding_window"] = get(p + "attention.sliding_window");
        const int n_layers = j["num_hidden_layers"].get<int>();
        std::vector<bool> swa(static_cast<size_t>(n_layers));
        const std::optional<GgufValue> pattern = m.find_value(p + "attention.sliding_window_pattern");
        if (pattern && pattern->type() == GgufType::ARRAY) {
            if (pattern->items().size() < size_t(n_layers))
                throw MoeError(file + ": " + p + "attention.sliding_window_pattern: expected an array of " +
                               std::to_string(n_layers) + " or more bools");
            for (int l = 0; l < n_layers; l++) swa[size_t(l)] = pattern->items()[size_t(l)].as_unsigned() != 0;
        } else {
            const int n = pattern ? get(p + "attention.sliding_window_pattern") : 2;
            for (int l = 0; l < n_layers; l++) swa[size_t(l)] = n == 0 || l % n < n - 1;
        }
        json types = json::array();
        for (bool s : swa) types.push_back(s ? "sliding_attention" : "full_attention");
        j["layer_types"] = types;
        j["attention_bias"] = true;
        // llama.cpp's gpt-oss clamps at 7 always; a file may say otherwise
        // in llama.cpp's key for other architectures' expert clamp, a float
        // or one a layer (all the same here).
        if (std::optional<GgufValue> clamp = m.find_value(p + "swiglu_clamp_exp")) {
            std::vector<double> limits;
            if (clamp->type() == GgufType::ARRAY) {
                for (const GgufValue& v : clamp->items())
                    if (v.type() == GgufType::FLOAT32 || v.type() == GgufType::FLOAT64) limits.push_back(v.as_float());
            } else if (clamp->type() == GgufType::FLOAT32 || clamp->type() == GgufType::FLOAT64) {
                limits.push_back(clamp->as_float());
            }
            if (limits.empty() || std::any_of(limits.begin(), limits.end(), [&](double x) { return x != limits[0]; }))
                throw MoeError(file + ": " + p + "swiglu_clamp_exp: expected one float, or the same float a layer");
            j["swiglu_limit"] = limits[0];
        }
    }
    j["num_attention_heads"] = get(p + "attention.head_count");
    j["num_key_value_heads"] = find(p + "attention.head_count_kv").value_or(j["num_attention_heads"].get<int>());
    if (std::optional<int> key_length = find(p + "attention.key_length")) j["head_dim"] = *key_length;
    if (std::optional<int> vocab = find(p + "vocab_size")) {
        j["vocab_size"] = *vocab;
    } else {
        const TensorView& embed = f.tensor("token_embd.weight");
        j["vocab_size"] = embed.shape.empty() ? 0 : embed.shape[0];
    }
    j["rope_theta"] = m.find_float(p + "rope.freq_base").value_or(10000.0);
    // RoPE scaling as llama.cpp's converter writes it (rope.scaling.*; the
    // YaRN blend's ends always rounded outward, as llama.cpp computes it).
    if (std::optional<std::string_view> type = m.find_string(p + "rope.scaling.type"); type && *type != "none") {
        json r = {{"rope_type", std::string(*type)}};
        if (std::optional<double> factor = m.find_float(p + "rope.scaling.factor")) r["factor"] = *factor;
        if (*type == "yarn") {
            if (std::optional<int> orig = find(p + "rope.scaling.original_context_length"))
                r["original_max_position_embeddings"] = *orig;
            if (std::optional<double> v = m.find_float(p + "rope.scaling.yarn_beta_fast")) r["beta_fast"] = *v;
            if (std::optional<double> v = m.find_float(p + "rope.scaling.yarn_beta_slow")) r["beta_slow"] = *v;
            if (std::optional<double> v = m.find_float(p + "rope.scaling.yarn_attn_factor")) r["attention_factor"] = *v;
            r["truncate"] = true;
        }
        j["rope_scaling"] = r;
    }
    j["rms_norm_eps"] = m.get_float(p + "attention.layer_norm_rms_epsilon");
    if (std::optional<int> ctx = find(p + "context_length")) j["max_position_embeddings"] = *ctx;
    j["tie_word_embeddings"] = f.find("output.weight") == nullptr;
    const std::vector<int> eos = gguf_end_of_generation_ids(m);
    j["eos_token_id"] = eos.empty() ? nlohmann::json(2) : nlohmann::json(eos);
    j["bos_token_id"] = m.find_int<int>("tokenizer.ggml.bos_token_id")
                            .value_or(arch == "llama" ? 1
                                      : eos.empty()   ? 2
                                                      : eos[0]);
    ModelConfig c = model_config_parse(j, file + " (its GGUF metadata as config.json)");
    if (arch == "qwen35moe") c.linear.v_head_order = LinearAttentionShape::VHeadOrder::TILED;  // the converter's order
    if (arch == "qwen3next") {  // attn_qkv and attn_gate split; ssm_ba as in_proj_ba
        c.linear.fused_qkvz = false;
        c.linear.fused_ba = true;
    }
    return c;
}

ModelConfig gguf_model_config(const fs::path& path) {
    GgufFile f(path);
    return gguf_model_config(f);
}

ModelWeights gguf_model_weights(const ModelConfig& config, const fs::path& path) {
    ModelWeights w;
    w.gguf = std::make_unique<GgufFile>(path);
    const GgufFile& f = *w.gguf;
    weights_assign(w, config, [&](const TensorEntry& entry) {
        TensorView t = find_tensor(f, entry, config);
        // ssm_conv1d is (channels, taps) in GGUF, (channels, 1, taps) in the table.
        if (entry.role == TensorRole::LIN_CONV && t.shape.size() == 2 && t.shape[0] == entry.shape[0] &&
            t.shape[1] == entry.shape[2])
            t.shape = entry.shape;
        weights_check_shape(t, entry);
        if (entry.shape.size() != 2) return weights_vector(w, t);
        // A fused projection is split row by row: its file layout.
        if (entry.role == TensorRole::LIN_BA) return weights_matrix(w, t);
        if ((entry.role == TensorRole::WQ || entry.role == TensorRole::WK) && permuted_qk(config))
            return held_matrix(w, t, config.head_dim);
        return held_matrix(w, t, 0);
    });
    return w;
}

namespace {

// llama.cpp's rule for the layers its _M mixes give more bits.
bool more_bits_layer(int layer, int n_layers) {
    return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// general.file_type as llama.cpp numbers its mixes.
uint32_t file_type(QuantMix mix) {
    switch (mix) {
    case QuantMix::F32: return 0;
    case QuantMix::BF16: return 32;
    case QuantMix::Q8_0: return 7;
    case QuantMix::Q4_0: return 2;
    case QuantMix::Q4_K_M: return 15;
    case QuantMix::Q5_K_M: return 17;
    }
    return 0;
}

// One GGUF tensor to write: its sources (one matrix, or every expert's of a
// merged 3-D tensor, or a norm vector) and what to write them as.
struct OutTensor {
    TensorView view;                  // name, dtype, shape, nbytes (no data)
    std::vector<WeightView> sources;  // matrices, rows in order
    // Or vectors (a norm, a bias; every expert's bias of a merged tensor),
    // the tensor's floats split evenly among them, in order.
    std::vector<const float*> vectors;
    bool permute = false;             // attn_q / attn_k: rows in llama.cpp's order
};

}  // namespace

std::optional<QuantMix> quant_mix_parse(std::string_view name) {
    for (QuantMix m :
         {QuantMix::F32, QuantMix::BF16, QuantMix::Q8_0, QuantMix::Q4_0, QuantMix::Q4_K_M, QuantMix::Q5_K_M})
        if (name == quant_mix_name(m)) return m;
    return std::nullopt;
}

const char* quant_mix_name(QuantMix mix) {
    switch (mix) {
    case QuantMix::F32: return "f32";
    case QuantMix::BF16: return "bf16";
    case QuantMix::Q8_0: return "q8_0";
    case QuantMix::Q4_0: return "q4_0";
    case QuantMix::Q4_K_M: return "q4_k_m";
    case QuantMix::Q5_K_M: return "q5_k_m";
    }
    return "";
}

DType quant_mix_type(QuantMix mix, bool experts_only, const TensorEntry& e, int n_layers) {
    if (e.shape.size() != 2 || e.role == TensorRole::ROUTER || e.role == TensorRole::SHARED_GATE) return DType::F32;
    const bool expert =
        e.role == TensorRole::EXPERT_W1 || e.role == TensorRole::EXPERT_W3 || e.role == TensorRole::EXPERT_W2;
    if (experts_only && !expert) return DType::BF16;
    const bool wide = e.role == TensorRole::LM_HEAD ||
                      ((e.role == TensorRole::WV || e.role == TensorRole::EXPERT_W2) && more_bits_layer(e.layer, n_layers));
    DType t = DType::BF16;
    switch (mix) {
    case QuantMix::F32: return DType::F32;
    case QuantMix::BF16: t = DType::BF16; break;
    case QuantMix::Q8_0: t = DType::Q8_0; break;
    case QuantMix::Q4_0: t = e.role == TensorRole::LM_HEAD ? DType::Q6_K : DType::Q4_0; break;
    case QuantMix::Q4_K_M: t = wide ? DType::Q6_K : DType::Q4_K; break;
    case QuantMix::Q5_K_M: t = wide ? DType::Q6_K : DType::Q5_K; break;
    }
    for (DType fallback : {t, DType::Q8_0, DType::BF16})
        if (dtype_row_bytes(fallback, e.shape[1])) return fallback;
    return DType::F32;
}

void gguf_model_write(const fs::path& out, const ModelConfig& source, const ModelWeights& w,
                      const GgufWriteOptions& o) {
    const char* const arch = gguf_arch_of(source);
    const bool hybrid = hybrid_arch(arch);
    // The file's layout of the Gated DeltaNet's projections (split, but
    // qwen3next's b and a per key head) and, for qwen35moe, llama.cpp's
    // tiled order of the value heads.
    ModelConfig c = source;
    c.linear.fused_qkvz = false;
    c.linear.fused_ba = hybrid && std::string_view(arch) == "qwen3next";
    const bool reorder_v = hybrid && std::string_view(arch) == "qwen35moe" &&
                           source.linear.v_head_order == LinearAttentionShape::VHeadOrder::GROUPED &&
                           source.linear.n_k_heads != source.linear.n_v_heads;
    if (hybrid && std::string_view(arch) == "qwen35moe")
        c.linear.v_head_order = LinearAttentionShape::VHeadOrder::TILED;
    if (!arch) throw MoeError(out.string() + ": no GGUF architecture for " + c.architecture);
    if (c.is_moe() && !c.dense_layers.empty())
        throw MoeError(out.string() + ": GGUF has no key for dense layers among MoE layers (mlp_only_layers)");
    const std::string p = std::string(arch) + ".";
    const bool llama = permuted_qk(c);
    std::vector<GgufKeyValue> meta = {
        {"general.architecture", arch},
        {"general.name", o.name},
        {"general.file_type", file_type(o.mix)},
        {"general.quantization_version", uint32_t(2)},
        {p + "context_length", uint32_t(c.max_position_embeddings)},
        {p + "embedding_length", uint32_t(c.dim)},
        {p + "block_count", uint32_t(c.n_layers)},
        {p + "feed_forward_length", uint32_t(llama ? c.hidden_dim : c.dense_hidden_dim)},
        {p + "rope.dimension_count", uint32_t(c.rope_dim())},
        {p + "attention.head_count", uint32_t(c.n_heads)},
        {p + "attention.head_count_kv", uint32_t(c.n_kv_heads)},
        {p + "attention.key_length", uint32_t(c.head_dim)},
        {p + "attention.value_length", uint32_t(c.head_dim)},
        {p + "attention.layer_norm_rms_epsilon", c.rms_norm_eps},
        {p + "rope.freq_base", c.rope_theta},
        {p + "vocab_size", uint32_t(c.vocab_size)},
    };
    if (const RopeScaling& r = c.rope_scaling; r.type != RopeScaling::Type::NONE) {
        const bool yarn = r.type == RopeScaling::Type::YARN;
        meta.push_back({p + "rope.scaling.type", std::string(yarn ? "yarn" : "linear")});
        meta.push_back({p + "rope.scaling.factor", r.factor});
        if (yarn) {
            meta.push_back({p + "rope.scaling.original_context_length", uint32_t(r.original_context)});
            meta.push_back({p + "rope.scaling.yarn_beta_fast", r.beta_fast});
            meta.push_back({p + "rope.scaling.yarn_beta_slow", r.beta_slow});
            meta.push_back({p + "rope.scaling.yarn_attn_factor", r.attention_factor});
        }
    }
    if (c.is_moe()) {
        meta.push_back({p + "expert_count", uint32_t(c.n_experts)});
        meta.push_back({p + "expert_used_count", uint32_t(c.n_experts_active)});
    }
    if (!llama) {
        meta.push_back({p + "expert_feed_forward_length", uint32_t(c.hidden_dim)});
        meta.push_back({p + "expert_weights_norm", c.norm_topk_prob});
    }
    if (c.shared_hidden_dim > 0)
        meta.push_back({p + "expert_shared_feed_forward_length", uint32_t(c.shared_hidden_dim)});
    if (std::string_view(arch) == "gpt-oss") {
        meta.push_back({p + "attention.sliding_window", uint32_t(c.sliding_window)});
        std::vector<bool> swa;
        for (int l = 0; l < c.n_layers; l++) swa.push_back(c.layer_mixer(l) == MixerKind::SLIDING_ATTENTION);
        meta.push_back({p + "attention.sliding_window_pattern", GgufValue(swa)});
        // llama.cpp's gpt-oss always clamps at 7; another limit goes in its
        // key for other architectures' expert clamp (which it does not read here).
        if (c.ffn_act.limit != 7.0f)
            meta.push_back({p + "swiglu_clamp_exp", GgufValue(std::vector<float>(size_t(c.n_layers), c.ffn_act.limit))});
    }
    if (hybrid) {
        const LinearAttentionShape& s = c.linear;
        meta.push_back({p + "ssm.conv_kernel", uint32_t(s.conv_kernel)});
        meta.push_back({p + "ssm.state_size", uint32_t(s.head_k_dim)});
        meta.push_back({p + "ssm.group_count", uint32_t(s.n_k_heads)});
        meta.push_back({p + "ssm.time_step_rank", uint32_t(s.n_v_heads)});
        meta.push_back({p + "ssm.inner_size", uint32_t(s.value_dim())});
        meta.push_back({p + "full_attention_interval", uint32_t(4)});
        std::vector<bool> recurrent;
        for (int l = 0; l < c.n_layers; l++) recurrent.push_back(c.layer_mixer(l) == MixerKind::GATED_DELTANET);
        meta.push_back({p + "attention.recurrent_layers", GgufValue(recurrent)});
        if (std::string_view(arch) == "qwen35moe") {
            // M-RoPE sections (text positions make any split plain RoPE); llama.cpp requires the key.
            const int half = c.rope_dim() / 2;
            meta.push_back({p + "rope.dimension_sections",
                            GgufValue(std::vector<int32_t>{half - 2 * (half / 3), half / 3, half / 3, 0})});
        }
    }
    for (const GgufKeyValue& kv : o.extra_metadata) meta.push_back(kv);

    // qwen35moe's value heads in llama.cpp's tiled order: file head h' holds
    // the Hugging Face head (h' % n_k) r + h' / n_k. The reordered copies
    // live until the file is written.
    const LinearAttentionShape& ls = source.linear;
    const int n_v = ls.n_v_heads, n_k = std::max(1, ls.n_k_heads), dv = ls.head_v_dim;
    auto hf_head = [&](int h) { return reorder_v ? (h % n_k) * (n_v / n_k) + h / n_k : h; };
    auto rows = [](const WeightView& m, int64_t first, int64_t n) {
        if (dtype_row_group(m.type) != 1) throw MoeError("quantize: a row-interleaved matrix cannot be reordered");
        return weight_view(m.type, m.row(first), n, m.cols);
    };
    // Value-head blocks of `block` rows from row `first` on, in file order.
    auto head_rows = [&](const WeightView& m, int64_t first, int64_t block) {
        std::vector<WeightView> out;
        if (first > 0) out.push_back(rows(m, 0, first));
        for (int h = 0; h < n_v; h++) out.push_back(rows(m, first + int64_t(hf_head(h)) * block, block));
        return out;
    };
    std::vector<std::unique_ptr<float[]>> kept_f32;
    std::vector<std::unique_ptr<bf16[]>> kept_bf16;
    // A per-value-head vector (n_v floats, `block` each; after `first` as they are).
    auto head_vector = [&](const float* v, size_t first, size_t block) {
        if (!reorder_v) return v;
        const size_t n = first + size_t(n_v) * block;
        kept_f32.push_back(std::make_unique<float[]>(n));
        float* out = kept_f32.back().get();
        std::copy_n(v, first, out);
        for (int h = 0; h < n_v; h++)
            std::copy_n(v + first + size_t(hf_head(h)) * block, block, out + first + size_t(h) * block);
        return static_cast<const float*>(out);
    };
    // out_proj's columns (value heads) in file order.
    auto head_columns = [&](const WeightView& m) {
        if (!reorder_v) return m;
        if (m.type != DType::BF16) throw MoeError("quantize: out_proj must be bf16 to reorder its value heads");
        kept_bf16.push_back(std::make_unique<bf16[]>(size_t(m.rows * m.cols)));
        bf16* out = kept_bf16.back().get();
        for (int64_t r = 0; r < m.rows; r++) {
            const bf16* src = static_cast<const bf16*>(m.row(r));
            for (int h = 0; h < n_v; h++)
                std::copy_n(src + size_t(hf_head(h)) * dv, dv, out + size_t(r * m.cols) + size_t(h) * dv);
        }
        return weight_view(DType::BF16, out, m.rows, m.cols);
    };

    // The table's entries become GGUF tensors; a layer's experts of one
    // kind become one merged tensor, made at its first expert.
    std::vector<OutTensor> outs;
    for (const TensorEntry& e : tensor_table(c)) {
        if (e.expert > 0 && c.is_moe()) continue;
        const LayerWeights* L = e.layer >= 0 ? &w.layers[size_t(e.layer)] : nullptr;
        OutTensor t;
        t.view.name = gguf_name(e, c);
        t.view.dtype = quant_mix_type(o.mix, o.experts_only, e, c.n_layers);
        t.permute = llama && (e.role == TensorRole::WQ || e.role == TensorRole::WK);
        switch (e.role) {
        case TensorRole::ATTN_NORM: t.vectors = {L->attn_norm}; break;
        case TensorRole::FFN_NORM: t.vectors = {L->ffn_norm}; break;
        case TensorRole::FINAL_NORM: t.vectors = {w.final_norm}; break;
        case TensorRole::EMBED: t.sources = {w.embed}; break;
        case TensorRole::LM_HEAD: t.sources = {w.lm_head}; break;
        case TensorRole::WQ: t.sources = {L->wq}; break;
        case TensorRole::WK: t.sources = {L->wk}; break;
        case TensorRole::WV: t.sources = {L->wv}; break;
        case TensorRole::WO: t.sources = {L->wo}; break;
        case TensorRole::O_BIAS: t.vectors = {L->o_bias}; break;
        case TensorRole::SINKS: t.vectors = {L->sinks}; break;
        case TensorRole::ROUTER: t.sources = {L->router}; break;
        case TensorRole::ROUTER_BIAS: t.vectors = {L->router_bias}; break;
        case TensorRole::EXPERT_B1:
        case TensorRole::EXPERT_B3:
        case TensorRole::EXPERT_B2:
            for (const ExpertWeights& x : L->experts)
                t.vectors.push_back(e.role == TensorRole::EXPERT_B1   ? x.spec.b1
                                    : e.role == TensorRole::EXPERT_B3 ? x.spec.b3
                                                                      : x.spec.b2);
            break;
        case TensorRole::EXPERT_W1:
        case TensorRole::EXPERT_W3:
        case TensorRole::EXPERT_W2:
            for (const ExpertWeights& x : L->experts)
                t.sources.push_back(e.role == TensorRole::EXPERT_W1 ? x.w1 : e.role == TensorRole::EXPERT_W3 ? x.w3 : x.w2);
            break;
        case TensorRole::Q_BIAS:
            t.vectors = {L->q_bias};
            break;
        case TensorRole::K_BIAS:
            t.vectors = {L->k_bias};
            break;
        case TensorRole::V_BIAS:
            t.vectors = {L->v_bias};
            break;
        case TensorRole::Q_NORM:
            t.vectors = {L->q_norm};
            break;
        case TensorRole::K_NORM:
            t.vectors = {L->k_norm};
            break;
        case TensorRole::MLP_W1:
            t.sources = {L->mlp.w1};
            break;
        case TensorRole::MLP_W3:
            t.sources = {L->mlp.w3};
            break;
        case TensorRole::MLP_W2:
            t.sources = {L->mlp.w2};
            break;
        case TensorRole::SHARED_GATE:
            t.sources = {L->shared_gate};
            break;
        case TensorRole::LIN_QKV:
            t.sources = reorder_v ? head_rows(L->linear.wqkv, 2 * int64_t(ls.key_dim()), dv)
                                  : std::vector<WeightView>{L->linear.wqkv};
            break;
        case TensorRole::LIN_Z:
            t.sources = reorder_v ? head_rows(L->linear.wz, 0, dv) : std::vector<WeightView>{L->linear.wz};
            break;
        case TensorRole::LIN_B:
            t.sources = reorder_v ? head_rows(L->linear.wb, 0, 1) : std::vector<WeightView>{L->linear.wb};
            break;
        case TensorRole::LIN_A:
            t.sources = reorder_v ? head_rows(L->linear.wa, 0, 1) : std::vector<WeightView>{L->linear.wa};
            break;
        case TensorRole::LIN_BA:  // per key head: its value heads' b rows, then their a rows
            for (int g = 0; g < n_k; g++) {
                t.sources.push_back(rows(L->linear.wb, int64_t(g) * (n_v / n_k), n_v / n_k));
                t.sources.push_back(rows(L->linear.wa, int64_t(g) * (n_v / n_k), n_v / n_k));
            }
            break;
        case TensorRole::LIN_CONV:
            t.vectors = {head_vector(L->linear.conv, size_t(2 * ls.key_dim()) * ls.conv_kernel,
                                   size_t(dv) * ls.conv_kernel)};
            break;
        case TensorRole::LIN_DT_BIAS: t.vectors = {head_vector(L->linear.dt_bias, 0, 1)}; break;
        case TensorRole::LIN_A_LOG: t.vectors = {head_vector(L->linear.a, 0, 1)}; break;  // -exp(A_log), as llama.cpp stores it
        case TensorRole::LIN_NORM: t.vectors = {L->linear.norm}; break;
        case TensorRole::LIN_OUT: t.sources = {head_columns(L->linear.wout)}; break;
        case TensorRole::LIN_QKVZ:
            throw MoeError("quantize: in_proj_qkvz is split before writing");
        }
        // MXFP4 experts (gpt-oss's) stay MXFP4 in every mix but f32 (which
        // holds their values exactly, for checks in full precision).
        if (!t.sources.empty() && t.sources[0].type == DType::MXFP4 && e.expert >= 0 && o.mix != QuantMix::F32)
            t.view.dtype = DType::MXFP4;
        t.view.shape = e.shape;
        if (e.role == TensorRole::SHARED_GATE) t.view.shape = {int64_t(c.dim)};  // a vector in GGUF
        if (e.role == TensorRole::LIN_CONV) t.view.shape = {e.shape[0], e.shape[2]};  // (channels, taps)
        if (e.expert >= 0 && c.is_moe()) t.view.shape.insert(t.view.shape.begin(), int64_t(c.n_experts));
        t.view.nbytes = tensor_nbytes(t.view.dtype, t.view.shape, t.view.name);
        outs.push_back(std::move(t));
    }

    uint64_t total = 0, done = 0;
    for (const OutTensor& t : outs)
        for (const WeightView& s : t.sources) total += s.bytes();
    std::vector<TensorView> views;
    for (const OutTensor& t : outs) views.push_back(t.view);
    ThreadPool pool(std::max(1, o.threads));
    std::vector<char> packed;  // one source matrix converted
    gguf_write(out, meta, views, [&](size_t i, std::ostream& os) {
        const OutTensor& t = outs[i];
        if (!t.vectors.empty()) {
            int64_t n = 1;
            for (int64_t d : t.view.shape) n *= d;
            const size_t each = size_t(n) / t.vectors.size();
            for (const float* v : t.vectors)
                os.write(reinterpret_cast<const char*>(v), std::streamsize(each * sizeof(float)));
            return;
        }
        const int64_t cols = t.view.shape.back();
        const size_t out_row = *dtype_row_bytes(t.view.dtype, cols);
        for (const WeightView& s : t.sources) {
            std::vector<int64_t> order(size_t(s.rows));  // GGUF row -> source row
            for (int64_t r = 0; r < s.rows; r++)
                order[size_t(t.permute ? gguf_llama_row(r, c.head_dim) : r)] = r;
            packed.resize(size_t(s.rows) * out_row);
            pool.parallel_for(long(s.rows), 1, [&](long begin, long end) {
                std::vector<float> row(static_cast<size_t>(cols));
                std::vector<char> scratch(s.row_bytes);
                const DType plain = dtype_plain(s.type);
                for (long r = begin; r < end; r++) {
                    const void* src = quant_row_plain(s.type, s.data, s.row_bytes, order[size_t(r)], scratch.data());
                    char* dst = packed.data() + size_t(r) * out_row;
                    if (plain == t.view.dtype) {
                        std::memcpy(dst, src, out_row);
                        continue;
                    }
                    dequantize_row(plain, src, row.data(), cols);
                    quantize_row(t.view.dtype, row.data(), dst, cols, o.search);
                }
            });
            os.write(packed.data(), std::streamsize(packed.size()));
            done += s.bytes();
        }
        if (o.progress) o.progress(done, total);
    });
}
