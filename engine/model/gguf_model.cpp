// GGUF models (see gguf_model.h): config.json's fields from the metadata,
// checked by the one config parser, and the tensor table's roles from the
// llama architecture's tensor names.
#include "engine/model/gguf_model.h"

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "profiles/errors.h"
#include "profiles/files.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* ARCH = "llama";

std::string layer_name(int layer, const char* what) {
    return "blk." + std::to_string(layer) + "." + what;
}

// The tensor that holds one entry of the table: a whole GGUF tensor, or
// (experts merged into one 3-D tensor) expert e's (rows, cols) slice of it.
TensorView find_tensor(const GgufFile& f, const TensorEntry& t, bool moe) {
    auto one = [&](const std::string& name) { return f.tensor(name); };
    switch (t.role) {
    case TensorRole::EMBED:
        return one("token_embd.weight");
    case TensorRole::ATTN_NORM:
        return one(layer_name(t.layer, "attn_norm.weight"));
    case TensorRole::WQ:
        return one(layer_name(t.layer, "attn_q.weight"));
    case TensorRole::WK:
        return one(layer_name(t.layer, "attn_k.weight"));
    case TensorRole::WV:
        return one(layer_name(t.layer, "attn_v.weight"));
    case TensorRole::WO:
        return one(layer_name(t.layer, "attn_output.weight"));
    case TensorRole::FFN_NORM:
        return one(layer_name(t.layer, "ffn_norm.weight"));
    case TensorRole::ROUTER:
        return one(layer_name(t.layer, "ffn_gate_inp.weight"));
    case TensorRole::FINAL_NORM:
        return one("output_norm.weight");
    case TensorRole::LM_HEAD:
        return one("output.weight");
    case TensorRole::EXPERT_W1:
    case TensorRole::EXPERT_W3:
    case TensorRole::EXPERT_W2:
        break;
    }
    const char* kind = t.role == TensorRole::EXPERT_W1 ? "gate" : t.role == TensorRole::EXPERT_W3 ? "up" : "down";
    if (!moe) return one(layer_name(t.layer, (std::string("ffn_") + kind + ".weight").c_str()));
    const std::string merged = layer_name(t.layer, (std::string("ffn_") + kind + "_exps.weight").c_str());
    const TensorView* all = f.find(merged);
    if (!all) {
        const std::string single =
            layer_name(t.layer, (std::string("ffn_") + kind + "." + std::to_string(t.expert) + ".weight").c_str());
        if (f.find(single)) return one(single);
        throw MoeError(f.path().string() + ": " + merged + ": tensor missing (nor " + single + ")");
    }
    if (all->shape.size() != 3 || all->shape[1] != t.shape[0] || all->shape[2] != t.shape[1] ||
        all->shape[0] <= t.expert)
        throw MoeError(all->file + ": " + merged + ": expected shape [n_experts, " + std::to_string(t.shape[0]) + ", " +
                       std::to_string(t.shape[1]) + "] with expert " + std::to_string(t.expert) + ", found " +
                       tensor_shape_string(all->shape));
    TensorView slice = *all;
    slice.name = merged + " [expert " + std::to_string(t.expert) + "]";
    slice.shape = {t.shape[0], t.shape[1]};
    slice.nbytes = all->nbytes / size_t(all->shape[0]);
    slice.data = static_cast<const char*>(all->data) + size_t(t.expert) * slice.nbytes;
    return slice;
}

// attn_q / attn_k in Hugging Face row order: each row's bytes copied from
// the GGUF row that holds it.
WeightView unpermute_rows(ModelWeights& w, const TensorView& t, int head_dim) {
    const WeightView g = weights_matrix(w, t);
    auto out = std::make_unique_for_overwrite<std::byte[]>(g.bytes());
    for (int64_t r = 0; r < g.rows; r++)
        std::memcpy(out.get() + size_t(r) * g.row_bytes, g.row(gguf_llama_row(r, head_dim)), g.row_bytes);
    w.owned_bytes.push_back(std::move(out));
    return weight_view(g.type, w.owned_bytes.back().get(), g.rows, g.cols);
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
    const std::string_view arch = m.get_string("general.architecture");
    if (arch != ARCH)
        throw MoeError(file + ": general.architecture: '" + std::string(arch) +
                       "' is not supported (supported: llama, the architecture of Mixtral and Mistral GGUFs)");
    const std::string p = std::string(ARCH) + ".";
    auto get = [&](const std::string& key) { return m.get_int<int>(key); };
    auto find = [&](const std::string& key) { return m.find_int<int>(key); };

    const int n_experts = find(p + "expert_count").value_or(0);
    json j;
    j["architectures"] = {n_experts > 0 ? "MixtralForCausalLM" : "MistralForCausalLM"};
    j["hidden_size"] = get(p + "embedding_length");
    std::optional<int> expert_ff = find(p + "expert_feed_forward_length");
    j["intermediate_size"] = n_experts > 0 && expert_ff ? *expert_ff : get(p + "feed_forward_length");
    j["num_hidden_layers"] = get(p + "block_count");
    j["num_attention_heads"] = get(p + "attention.head_count");
    j["num_key_value_heads"] = find(p + "attention.head_count_kv").value_or(j["num_attention_heads"].get<int>());
    if (std::optional<int> key_length = find(p + "attention.key_length")) j["head_dim"] = *key_length;
    if (std::optional<int> vocab = find(p + "vocab_size")) {
        j["vocab_size"] = *vocab;
    } else {
        const TensorView& embed = f.tensor("token_embd.weight");
        j["vocab_size"] = embed.shape.empty() ? 0 : embed.shape[0];
    }
    if (n_experts > 0) {
        j["num_local_experts"] = n_experts;
        j["num_experts_per_tok"] = get(p + "expert_used_count");
    }
    j["rope_theta"] = m.find_float(p + "rope.freq_base").value_or(10000.0);
    j["rms_norm_eps"] = m.get_float(p + "attention.layer_norm_rms_epsilon");
    if (std::optional<int> ctx = find(p + "context_length")) j["max_position_embeddings"] = *ctx;
    j["tie_word_embeddings"] = f.find("output.weight") == nullptr;
    j["bos_token_id"] = m.find_int<int>("tokenizer.ggml.bos_token_id").value_or(1);
    j["eos_token_id"] = m.find_int<int>("tokenizer.ggml.eos_token_id").value_or(2);
    return model_config_parse(j, file + " (its GGUF metadata as config.json)");
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
        const TensorView t = find_tensor(f, entry, config.is_moe());
        weights_check_shape(t, entry);
        if (entry.shape.size() == 1) return weights_vector(w, t);
        if (entry.role == TensorRole::WQ || entry.role == TensorRole::WK) return unpermute_rows(w, t, config.head_dim);
        return weights_matrix(w, t);
    });
    return w;
}
