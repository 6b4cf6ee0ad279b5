// ModelConfig parsing: reads a Hugging Face config.json (and the optional
// generation_config.json) into the plain ModelConfig struct and validates
// every value. Owns the per-architecture defaults (Hugging Face's config
// classes: Mixtral, Mistral, Qwen3-MoE, Qwen2-MoE, OLMoE) and which fields
// each architecture reads. Must not touch tensors or open weight files.
#include "engine/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/errors.h"
#include "base/files.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* const SUPPORTED_ARCHITECTURES =
    "MixtralForCausalLM, MistralForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, OlmoeForCausalLM, "
    "Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM, GptOssForCausalLM";

enum class Arch { MIXTRAL, MISTRAL, QWEN3_MOE, QWEN2_MOE, OLMOE, QWEN35_MOE, QWEN3_NEXT, GPT_OSS };

[[noreturn]] void config_fail(std::string_view source, const std::string& what) {
    throw MoeError(std::string(source) + ": " + what);
}

const char* json_type_name(const json& v) {
    if (v.is_number_integer()) return "integer";
    if (v.is_number_float()) return "number";
    return v.type_name();
}

// A present, non-null field; absent and null both mean "use the default".
const json* field(const json& j, const char* name) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return nullptr;
    return &*it;
}

int int_value(const json& v, std::string_view source, const char* name) {
    if (!v.is_number_integer())
        config_fail(source, std::string("field '") + name + "' must be an integer, found " + json_type_name(v));
    int64_t x = v.get<int64_t>();
    if (x < INT32_MIN || x > INT32_MAX)
        config_fail(source, std::string("field '") + name + "' = " + std::to_string(x) + " is out of range");
    return int(x);
}

int required_int(const json& j, std::string_view source, const char* name) {
    const json* v = field(j, name);
    if (!v) config_fail(source, std::string("field '") + name + "' missing");
    return int_value(*v, source, name);
}

int optional_int(const json& j, std::string_view source, const char* name, int fallback) {
    const json* v = field(j, name);
    return v ? int_value(*v, source, name) : fallback;
}

float optional_float(const json& j, std::string_view source, const char* name, float fallback) {
    const json* v = field(j, name);
    if (!v) return fallback;
    if (!v->is_number())
        config_fail(source, std::string("field '") + name + "' must be a number, found " + json_type_name(*v));
    return v->get<float>();
}

bool optional_bool(const json& j, std::string_view source, const char* name, bool fallback) {
    const json* v = field(j, name);
    if (!v) return fallback;
    if (!v->is_boolean())
        config_fail(source, std::string("field '") + name + "' must be true or false, found " + json_type_name(*v));
    return v->get<bool>();
}

// eos_token_id: an integer or a non-empty list of integers.
std::vector<int> eos_ids(const json& v, std::string_view source) {
    std::vector<int> ids;
    if (v.is_array()) {
        if (v.empty()) config_fail(source, "field 'eos_token_id' is an empty list");
        for (const json& x : v) ids.push_back(int_value(x, source, "eos_token_id"));
    } else if (v.is_number_integer()) {
        ids.push_back(int_value(v, source, "eos_token_id"));
    } else {
        config_fail(source, std::string("field 'eos_token_id' must be an integer or a list of integers, found ") +
                                json_type_name(v));
    }
    return ids;
}

void require_positive(std::string_view source, const char* name, int value) {
    if (value <= 0)
        config_fail(source, std::string("field '") + name + "' must be positive, found " + std::to_string(value));
}

void check_token_id(std::string_view source, const char* name, int id, int vocab_size) {
    if (id < 0 || id >= vocab_size)
        config_fail(source, std::string("field '") + name + "' = " + std::to_string(id) +
                                " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
}

void validate(const ModelConfig& c, std::string_view source) {
    require_positive(source, "hidden_size", c.dim);
    require_positive(source, "intermediate_size", c.hidden_dim);
    require_positive(source, "num_hidden_layers", c.n_layers);
    require_positive(source, "num_attention_heads", c.n_heads);
    require_positive(source, "num_key_value_heads", c.n_kv_heads);
    require_positive(source, "head_dim", c.head_dim);
    require_positive(source, "vocab_size", c.vocab_size);
    require_positive(source, "max_position_embeddings", c.max_position_embeddings);
    if (c.n_heads % c.n_kv_heads != 0)
        config_fail(source, "field 'num_key_value_heads' = " + std::to_string(c.n_kv_heads) +
                                " does not divide num_attention_heads = " + std::to_string(c.n_heads));
    if (c.head_dim % 2 != 0)
        config_fail(source, "field 'head_dim' = " + std::to_string(c.head_dim) + " must be even (rotary embedding)");
    if (c.is_moe()) {
        require_positive(source, "num_experts_per_tok", c.n_experts_active);
        if (c.n_experts_active > c.n_experts)
            config_fail(source, "field 'num_experts_per_tok' = " + std::to_string(c.n_experts_active) +
                                    " exceeds num_local_experts = " + std::to_string(c.n_experts));
    }
    if (c.shared_hidden_dim < 0)
        config_fail(source, "field 'shared_expert_intermediate_size' must not be negative, found " +
                                std::to_string(c.shared_hidden_dim));
    if (!c.dense_layers.empty()) require_positive(source, "intermediate_size", c.dense_hidden_dim);
    if (!(c.rope_theta > 0.0f))
        config_fail(source, "field 'rope_theta' must be positive, found " + std::to_string(c.rope_theta));
    if (!(c.rms_norm_eps > 0.0f))
        config_fail(source, "field 'rms_norm_eps' must be positive, found " + std::to_string(c.rms_norm_eps));
    if (c.n_linear_layers() > 0) {
        require_positive(source, "linear_conv_kernel_dim", c.linear.conv_kernel);
        require_positive(source, "linear_num_key_heads", c.linear.n_k_heads);
        require_positive(source, "linear_num_value_heads", c.linear.n_v_heads);
        require_positive(source, "linear_key_head_dim", c.linear.head_k_dim);
        require_positive(source, "linear_value_head_dim", c.linear.head_v_dim);
        if (c.linear.head_v_dim > 512)  // the CUDA delta rule runs a value head as one block of a thread a column
            config_fail(source, "field 'linear_value_head_dim' = " + std::to_string(c.linear.head_v_dim) +
                                    " is above the 512 supported");
        if (c.linear.n_v_heads % c.linear.n_k_heads != 0)
            config_fail(source, "field 'linear_num_key_heads' = " + std::to_string(c.linear.n_k_heads) +
                                    " does not divide linear_num_value_heads = " + std::to_string(c.linear.n_v_heads));
    }
    if (c.n_mtp_layers < 0)
        config_fail(source, "field 'mtp_num_hidden_layers' must not be negative, found " +
                                std::to_string(c.n_mtp_layers));
    // EOS first: a config without BOS takes its EOS id as BOS.
    for (int id : c.eos_token_ids) check_token_id(source, "eos_token_id", id, c.vocab_size);
    check_token_id(source, "bos_token_id", c.bos_token_id, c.vocab_size);
}

json read_json_file(const fs::path& path) {
    json j = file_read_json(path);
    if (!j.is_object()) throw MoeError(path.string() + ": expected a JSON object, found " + json_type_name(j));
    return j;
}

// mlp_only_layers: a list of layer indices in [0, n_layers); decoder_sparse_step
// s >= 1 makes layer l sparse when (l + 1) % s == 0 (Qwen's rule). The dense
// layers of both, sorted and distinct.
std::vector<int> qwen_dense_layers(const json& j, std::string_view source, int n_layers) {
    std::vector<int> dense;
    if (const json* v = field(j, "mlp_only_layers")) {
        if (!v->is_array()) config_fail(source, "field 'mlp_only_layers' must be a list of layer indices");
        for (const json& x : *v) {
            const int l = int_value(x, source, "mlp_only_layers");
            if (l < 0 || l >= n_layers)
                config_fail(source, "field 'mlp_only_layers' holds " + std::to_string(l) + ", outside the layers [0, " +
                                        std::to_string(n_layers) + ")");
            dense.push_back(l);
        }
    }
    const int step = optional_int(j, source, "decoder_sparse_step", 1);
    require_positive(source, "decoder_sparse_step", step);
    for (int l = 0; l < n_layers; l++)
        if ((l + 1) % step != 0) dense.push_back(l);
    std::sort(dense.begin(), dense.end());
    dense.erase(std::unique(dense.begin(), dense.end()), dense.end());
    return dense;
}

// config.json's layer_types (one string a layer), each one of the two
// names `a` and `b` an architecture knows, as their mixers; nullopt when the
// field is absent.
std::optional<std::vector<MixerKind>> layer_types(const json& j, std::string_view source, int n_layers,
                                                  std::pair<const char*, MixerKind> a,
                                                  std::pair<const char*, MixerKind> b) {
    const json* types = field(j, "layer_types");
    if (!types) return std::nullopt;
    if (!types->is_array() || int(types->size()) != n_layers)
        config_fail(source, "field 'layer_types' must be a list of num_hidden_layers = " + std::to_string(n_layers) +
                                " strings");
    std::vector<MixerKind> mixers(static_cast<size_t>(n_layers));
    for (int l = 0; l < n_layers; l++) {
        const json& t = (*types)[size_t(l)];
        if (t == a.first)
            mixers[size_t(l)] = a.second;
        else if (t == b.first)
            mixers[size_t(l)] = b.second;
        else
            config_fail(source, "field 'layer_types' holds " + t.dump() + " at " + std::to_string(l) +
                                    " (expected \"" + a.first + "\" or \"" + b.first + "\")");
    }
    return mixers;
}

// The hybrid layers of Qwen3.5 / Qwen3-Next: layer_types ("linear_attention"
// or "full_attention"), else every full_attention_interval-th layer
// attention and the others the delta net.
std::vector<MixerKind> hybrid_layer_mixers(const json& j, std::string_view source, int n_layers) {
    if (auto mixers = layer_types(j, source, n_layers, {"linear_attention", MixerKind::GATED_DELTANET},
                                  {"full_attention", MixerKind::ATTENTION}))
        return *mixers;
    std::vector<MixerKind> mixers(size_t(n_layers), MixerKind::GATED_DELTANET);
    const int interval = optional_int(j, source, "full_attention_interval", 4);
    require_positive(source, "full_attention_interval", interval);
    for (int l = 0; l < n_layers; l++)
        if ((l + 1) % interval == 0) mixers[size_t(l)] = MixerKind::ATTENTION;
    return mixers;
}

// gpt-oss's layers: layer_types ("sliding_attention" or "full_attention"),
// else GptOssConfig's default: sliding from layer 0, every other layer.
std::vector<MixerKind> gpt_oss_layer_mixers(const json& j, std::string_view source, int n_layers) {
    if (auto mixers = layer_types(j, source, n_layers, {"sliding_attention", MixerKind::SLIDING_ATTENTION},
                                  {"full_attention", MixerKind::ATTENTION}))
        return *mixers;
    std::vector<MixerKind> mixers(size_t(n_layers), MixerKind::ATTENTION);
    for (int l = 0; l < n_layers; l += 2) mixers[size_t(l)] = MixerKind::SLIDING_ATTENTION;
    return mixers;
}

// RoPE: rope_scaling / rope_parameters (either; Hugging Face moved from the
// first to the second) may be plain (rope_type "default"; Qwen3.5's
// text-only M-RoPE sections reduce to plain RoPE, as every position id of
// text is the token's index), "linear" or "yarn". Sets c.rope_scaling;
// returns rope_theta from rope_parameters when it is there.
std::optional<float> parse_rope(const json& j, std::string_view source, bool mrope_ok, ModelConfig& c) {
    std::optional<float> theta;
    for (const char* name : {"rope_scaling", "rope_parameters"}) {
        const json* r = field(j, name);
        if (!r) continue;
        if (!r->is_object())
            config_fail(source, std::string("field '") + name + "' must be an object, found " + json_type_name(*r));
        const json* type = field(*r, "rope_type");
        if (!type) type = field(*r, "type");
        const std::string t = type && type->is_string() ? type->get<std::string>() : type ? type->dump() : "default";
        const std::string where = std::string(name) + ".";
        auto number = [&](const char* key, float fallback) { return optional_float(*r, source, key, fallback); };
        RopeScaling& s = c.rope_scaling;
        if (t == "linear" || t == "yarn") {
            s.type = t == "yarn" ? RopeScaling::Type::YARN : RopeScaling::Type::LINEAR;
            if (!field(*r, "factor")) config_fail(source, "field '" + where + "factor' is missing (rope_type " + t + ")");
            s.factor = number("factor", 1.0f);
            if (!(s.factor >= 1.0f && s.factor <= 1024.0f))
                config_fail(source, "field '" + where + "factor' = " + std::to_string(s.factor) +
                                        " is outside [1, 1024]");
            if (s.type == RopeScaling::Type::YARN) {
                s.original_context = optional_int(*r, source, "original_max_position_embeddings",
                                                   optional_int(j, source, "max_position_embeddings", 0));
                if (s.original_context <= 0)
                    config_fail(source, "field '" + where +
                                            "original_max_position_embeddings' is missing (YaRN needs the original "
                                            "context)");
                s.beta_fast = number("beta_fast", 32.0f);
                s.beta_slow = number("beta_slow", 1.0f);
                if (!(s.beta_fast > 0.0f && s.beta_slow > 0.0f))
                    config_fail(source, "fields '" + where + "beta_fast' / 'beta_slow' must be positive");
                s.truncate = optional_bool(*r, source, "truncate", true);
                const float fallback = 0.1f * std::log(s.factor) + 1.0f;
                s.attention_factor = number("attention_factor", fallback);
                if (field(*r, "mscale") || field(*r, "mscale_all_dim"))
                    config_fail(source, "fields '" + where + "mscale' / 'mscale_all_dim' are set: DeepSeek's YaRN "
                                                             "attention factor is not supported yet");
            }
        } else if (!(t == "default" || (mrope_ok && t == "mrope"))) {
            config_fail(source, std::string("field '") + name + "' is set (" + r->dump() +
                                    "): supported RoPE types are default, linear and yarn");
        }
        if (field(*r, "rope_theta")) theta = optional_float(*r, source, "rope_theta", 0.0f);
    }
    return theta;
}

// A field this engine does not implement must hold its harmless value.
void refuse_true(const json& j, std::string_view source, const char* name, const char* why) {
    if (optional_bool(j, source, name, false)) config_fail(source, std::string("field '") + name + "' = true: " + why);
}

}  // namespace

const char* model_config_architectures() {
    return SUPPORTED_ARCHITECTURES;
}

bool ModelConfig::layer_is_moe(int l) const {
    return is_moe() && !std::binary_search(dense_layers.begin(), dense_layers.end(), l);
}

int ModelConfig::n_attention_layers() const {
    int n = 0;
    for (int l = 0; l < n_layers; l++) n += is_attention(layer_mixer(l));
    return n;
}

std::vector<double> rope_inv_freq(const ModelConfig& c) {
    const int dim = c.rope_dim(), half = dim / 2;
    const double base = c.rope_theta;
    const RopeScaling& s = c.rope_scaling;
    std::vector<double> freq(static_cast<size_t>(half));
    for (int i = 0; i < half; i++) freq[size_t(i)] = std::pow(base, -2.0 * i / dim);
    if (s.type == RopeScaling::Type::LINEAR)
        for (double& f : freq) f /= s.factor;
    if (s.type != RopeScaling::Type::YARN) return freq;
    // The dimension whose frequency turns `turns` times over the original
    // context; the blend runs between those of beta_fast and beta_slow.
    const double pi = 3.14159265358979323846;
    auto correction_dim = [&](double turns) {
        return dim * std::log(double(s.original_context) / (turns * 2.0 * pi)) / (2.0 * std::log(base));
    };
    double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
    if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    for (int i = 0; i < half; i++) {
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // the share of the original frequency
        double& f = freq[size_t(i)];
        f = f / s.factor * (1.0 - extrapolation) + f * extrapolation;
    }
    return freq;
}

float rope_attention_factor(const ModelConfig& c) {
    return c.rope_scaling.type == RopeScaling::Type::YARN ? c.rope_scaling.attention_factor : 1.0f;
}

int ModelConfig::layer_mlp_hidden(int l) const {
    if (!is_moe()) return 0;
    return layer_is_moe(l) ? shared_hidden_dim : dense_hidden_dim;
}

ModelConfig model_config_parse(const json& top, std::string_view source) {
    if (!top.is_object()) config_fail(source, std::string("expected a JSON object, found ") + json_type_name(top));
    ModelConfig c;
    // Qwen3.5's image-text checkpoints keep the language model's fields in
    // text_config (read over the top level, as llama.cpp's converter does).
    json merged;
    const json* text_config = field(top, "text_config");
    if (text_config && !text_config->is_object()) config_fail(source, "field 'text_config' must be an object");
    if (text_config) {
        merged = top;
        for (auto it = text_config->begin(); it != text_config->end(); ++it) merged[it.key()] = it.value();
    }
    const json& j = text_config ? merged : top;

    const json* archs = field(j, "architectures");
    if (!archs) config_fail(source, "field 'architectures' missing");
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string())
        config_fail(source, "field 'architectures' must be a non-empty list of strings");
    c.architecture = (*archs)[0].get<std::string>();
    Arch arch;
    if (c.architecture == "MixtralForCausalLM")
        arch = Arch::MIXTRAL;
    else if (c.architecture == "MistralForCausalLM")
        arch = Arch::MISTRAL;
    else if (c.architecture == "Qwen3MoeForCausalLM")
        arch = Arch::QWEN3_MOE;
    else if (c.architecture == "Qwen2MoeForCausalLM")
        arch = Arch::QWEN2_MOE;
    else if (c.architecture == "OlmoeForCausalLM")
        arch = Arch::OLMOE;
    else if (c.architecture == "Qwen3_5MoeForConditionalGeneration" || c.architecture == "Qwen3_5MoeForCausalLM")
        arch = Arch::QWEN35_MOE;
    else if (c.architecture == "Qwen3NextForCausalLM")
        arch = Arch::QWEN3_NEXT;
    else if (c.architecture == "GptOssForCausalLM")
        arch = Arch::GPT_OSS;
    else
        config_fail(source, "architecture '" + c.architecture +
                                "' is not supported (supported: " + SUPPORTED_ARCHITECTURES + ")");
    const bool hybrid = arch == Arch::QWEN35_MOE || arch == Arch::QWEN3_NEXT;
    const bool qwen = arch == Arch::QWEN3_MOE || arch == Arch::QWEN2_MOE || hybrid;

    c.dim = required_int(j, source, "hidden_size");
    c.n_layers = required_int(j, source, "num_hidden_layers");
    c.n_heads = required_int(j, source, "num_attention_heads");
    c.n_kv_heads = optional_int(j, source, "num_key_value_heads", c.n_heads);
    c.vocab_size = required_int(j, source, "vocab_size");
    require_positive(source, "hidden_size", c.dim);
    require_positive(source, "num_attention_heads", c.n_heads);
    require_positive(source, "num_hidden_layers", c.n_layers);
    c.head_dim = optional_int(j, source, "head_dim", hybrid ? 256 : arch == Arch::GPT_OSS ? 64 : c.dim / c.n_heads);
    switch (arch) {
    case Arch::MISTRAL:
        c.hidden_dim = required_int(j, source, "intermediate_size");
        break;
    case Arch::MIXTRAL:
        c.hidden_dim = required_int(j, source, "intermediate_size");
        c.n_experts = required_int(j, source, "num_local_experts");
        c.n_experts_active = required_int(j, source, "num_experts_per_tok");
        require_positive(source, "num_local_experts", c.n_experts);
        c.norm_topk_prob = optional_bool(j, source, "norm_topk_prob", true);
        break;
    case Arch::QWEN3_MOE:
    case Arch::QWEN2_MOE:
        // Qwen3MoeConfig / Qwen2MoeConfig defaults.
        c.hidden_dim = optional_int(j, source, "moe_intermediate_size", arch == Arch::QWEN3_MOE ? 768 : 1408);
        c.dense_hidden_dim = optional_int(j, source, "intermediate_size", arch == Arch::QWEN3_MOE ? 6144 : 5632);
        c.n_experts = optional_int(j, source, "num_experts", arch == Arch::QWEN3_MOE ? 128 : 60);
        c.n_experts_active = optional_int(j, source, "num_experts_per_tok", arch == Arch::QWEN3_MOE ? 8 : 4);
        require_positive(source, "moe_intermediate_size", c.hidden_dim);
        require_positive(source, "num_experts", c.n_experts);
        c.norm_topk_prob = optional_bool(j, source, "norm_topk_prob", false);
        c.dense_layers = qwen_dense_layers(j, source, c.n_layers);
        refuse_true(j, source, "use_sliding_window", "sliding-window attention is not supported");
        if (arch == Arch::QWEN3_MOE) {
            c.qk_norm = QkNorm::PER_HEAD;
            refuse_true(j, source, "attention_bias", "Qwen3-MoE projection biases are not supported");
        } else {
            c.qkv_bias = true;  // Qwen2-MoE's q/k/v projections always have biases, o_proj none
            c.shared_hidden_dim = optional_int(j, source, "shared_expert_intermediate_size", 5632);
            require_positive(source, "shared_expert_intermediate_size", c.shared_hidden_dim);
        }
        break;
    case Arch::QWEN35_MOE:
    case Arch::QWEN3_NEXT: {
        // Qwen3_5MoeTextConfig / Qwen3NextConfig defaults.
        const bool next = arch == Arch::QWEN3_NEXT;
        c.hidden_dim = optional_int(j, source, "moe_intermediate_size", 512);
        c.n_experts = optional_int(j, source, "num_experts", next ? 512 : 256);
        c.n_experts_active = optional_int(j, source, "num_experts_per_tok", next ? 10 : 8);
        c.shared_hidden_dim = optional_int(j, source, "shared_expert_intermediate_size", 512);
        require_positive(source, "moe_intermediate_size", c.hidden_dim);
        require_positive(source, "num_experts", c.n_experts);
        require_positive(source, "shared_expert_intermediate_size", c.shared_hidden_dim);
        // Qwen3.5's router always renormalises the top k (its config's
        // norm_topk_prob is not read); Qwen3-Next's follows the flag.
        c.norm_topk_prob = next ? optional_bool(j, source, "norm_topk_prob", true) : true;
        if (next) {
            c.dense_hidden_dim = optional_int(j, source, "intermediate_size", 5120);
            c.dense_layers = qwen_dense_layers(j, source, c.n_layers);
        } else {
            c.dense_hidden_dim = c.hidden_dim;  // every Qwen3.5 layer is sparse
        }
        c.qk_norm = QkNorm::PER_HEAD;
        c.attn_output_gate = true;
        c.norms_zero_centered = true;
        refuse_true(j, source, "attention_bias", "projection biases are not supported");
        refuse_true(j, source, "use_sliding_window", "sliding-window attention is not supported");
        c.layer_mixers = hybrid_layer_mixers(j, source, c.n_layers);
        c.linear.conv_kernel = optional_int(j, source, "linear_conv_kernel_dim", 4);
        c.linear.n_k_heads = optional_int(j, source, "linear_num_key_heads", 16);
        c.linear.n_v_heads = optional_int(j, source, "linear_num_value_heads", 32);
        c.linear.head_k_dim = optional_int(j, source, "linear_key_head_dim", 128);
        c.linear.head_v_dim = optional_int(j, source, "linear_value_head_dim", 128);
        c.n_mtp_layers = optional_int(j, source, "mtp_num_hidden_layers", 0);
        c.linear.fused_qkvz = c.linear.fused_ba = next;
        if (text_config) {
            c.tensor_prefix = "model.language_model.";
            c.has_vision_tower = field(top, "vision_config") != nullptr;
        }
        break;
    }
    case Arch::GPT_OSS: {
        // GptOssConfig defaults. The router's softmax is taken over the
        // chosen k logits: the softmax over all of them, renormalised.
        c.hidden_dim = optional_int(j, source, "intermediate_size", 2880);
        c.n_experts = optional_int(j, source, "num_local_experts", 128);
        c.n_experts_active =
            optional_int(j, source, "num_experts_per_tok", optional_int(j, source, "experts_per_token", 4));
        require_positive(source, "num_local_experts", c.n_experts);
        c.norm_topk_prob = true;
        c.qkv_bias = c.o_bias = optional_bool(j, source, "attention_bias", true);
        c.attn_sinks = c.router_bias = c.expert_bias = true;
        c.ffn_act.kind = FfnActivation::Kind::CLAMPED_SWIGLU;
        c.ffn_act.limit = optional_float(j, source, "swiglu_limit", 7.0f);
        if (!(c.ffn_act.limit > 0.0f))
            config_fail(source, "field 'swiglu_limit' must be positive, found " + std::to_string(c.ffn_act.limit));
        c.sliding_window = optional_int(j, source, "sliding_window", 128);
        require_positive(source, "sliding_window", c.sliding_window);
        c.layer_mixers = gpt_oss_layer_mixers(j, source, c.n_layers);
        break;
    }
    case Arch::OLMOE:
        // OlmoeConfig defaults.
        c.hidden_dim = optional_int(j, source, "intermediate_size", 2048);
        c.n_experts = optional_int(j, source, "num_experts", 64);
        c.n_experts_active = optional_int(j, source, "num_experts_per_tok", 8);
        require_positive(source, "num_experts", c.n_experts);
        c.norm_topk_prob = optional_bool(j, source, "norm_topk_prob", false);
        c.qk_norm = QkNorm::FULL;
        refuse_true(j, source, "attention_bias", "OLMoE projection biases are not supported");
        if (field(j, "clip_qkv"))
            config_fail(source, "field 'clip_qkv' is set: clipping q/k/v is not supported (only null)");
        break;
    }
    if (!qwen) c.dense_hidden_dim = c.hidden_dim;  // only Qwen gives dense layers their own width
    const std::optional<float> rope_parameters_theta = parse_rope(j, source, arch == Arch::QWEN35_MOE, c);
    // Hugging Face defaults of each config class.
    const float theta = arch == Arch::MIXTRAL ? 1e6f : arch == Arch::GPT_OSS ? 150000.0f : 10000.0f;
    const float eps = arch == Arch::MIXTRAL || arch == Arch::OLMOE || arch == Arch::GPT_OSS ? 1e-5f : 1e-6f;
    const int max_pos = arch == Arch::OLMOE        ? 4096
                        : arch == Arch::QWEN35_MOE ? 262144
                        : qwen                     ? 32768
                                                   : 4096 * 32;  // Mixtral, Mistral, gpt-oss
    c.rope_theta = optional_float(j, source, "rope_theta", rope_parameters_theta.value_or(theta));
    if (hybrid) {
        float factor = 0.25f;
        if (const json* r = field(j, "rope_parameters"); r && r->is_object())
            factor = optional_float(*r, source, "partial_rotary_factor", factor);
        factor = optional_float(j, source, "partial_rotary_factor", factor);
        c.rotary_dim = int(float(c.head_dim) * factor);
        if (!(factor > 0.0f && factor <= 1.0f) || c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
            config_fail(source, "field 'partial_rotary_factor' = " + std::to_string(factor) +
                                    " does not give an even number of rotary dimensions of head_dim " +
                                    std::to_string(c.head_dim));
    }
    c.rms_norm_eps = optional_float(j, source, "rms_norm_eps", eps);
    c.tie_embeddings = optional_bool(j, source, "tie_word_embeddings", false);
    c.max_position_embeddings = optional_int(j, source, "max_position_embeddings", max_pos);
    // Qwen's <|endoftext|> and OLMoE's eos are the defaults; their configs
    // may give no BOS (OLMoE's is null): the first EOS id stands in.
    const std::vector<int> default_eos = arch == Arch::OLMOE        ? std::vector<int>{50279}
                                         : arch == Arch::QWEN35_MOE ? std::vector<int>{248044}
                                         : arch == Arch::GPT_OSS    ? std::vector<int>{200002}  // <|return|>
                                         : qwen                     ? std::vector<int>{151643}
                                                                    : std::vector<int>{2};
    const json* eos = field(j, "eos_token_id");
    c.eos_token_ids = eos ? eos_ids(*eos, source) : default_eos;
    const bool mistral_family = arch == Arch::MIXTRAL || arch == Arch::MISTRAL;
    if (mistral_family) {
        // Mixtral-8x7B's config says null (no window). A window no shorter
        // than max_position_embeddings, which caps the context, never slides:
        // the same as none. A shorter one (Mistral-7B v0.1's 4096) makes
        // every layer sliding-window attention, as Hugging Face's Mistral
        // runs it.
        const int window = optional_int(j, source, "sliding_window", 0);
        if (window < 0) config_fail(source, "field 'sliding_window' must be positive or null");
        if (window != 0 && window < c.max_position_embeddings) {
            c.sliding_window = window;
            c.layer_mixers.assign(size_t(c.n_layers), MixerKind::SLIDING_ATTENTION);
        }
    }
    c.bos_token_id = optional_int(j, source, "bos_token_id", mistral_family ? 1 : c.eos_token_ids[0]);

    validate(c, source);
    return c;
}

ModelConfig model_config_load(const fs::path& dir) {
    fs::path config_path = dir / "config.json";
    const fs::file_type dir_type = file_type_at(dir);
    if (dir_type != fs::file_type::directory && dir_type != fs::file_type::not_found)
        throw MoeError(dir.string() + ": not a folder (a model is a folder holding config.json)");
    const fs::file_type config_type = file_type_at(config_path);
    if (config_type == fs::file_type::not_found)
        throw MoeError(config_path.string() + ": missing (not a model folder?)");
    if (config_type != fs::file_type::regular) throw MoeError(config_path.string() + ": not a regular file");
    ModelConfig c = model_config_parse(read_json_file(config_path), config_path.string());

    fs::path gen_path = dir / "generation_config.json";
    if (file_exists(gen_path)) {
        json g = read_json_file(gen_path);
        std::string source = gen_path.string();
        if (const json* bos = field(g, "bos_token_id")) c.bos_token_id = int_value(*bos, source, "bos_token_id");
        if (const json* eos = field(g, "eos_token_id")) c.eos_token_ids = eos_ids(*eos, source);
        check_token_id(source, "bos_token_id", c.bos_token_id, c.vocab_size);
        for (int id : c.eos_token_ids) check_token_id(source, "eos_token_id", id, c.vocab_size);
    }
    return c;
}
