// The reference forward pass: config.json and safetensors parsing with
// nlohmann::json and std::ifstream, then the semantics of transformers'
// modeling_mixtral / _mistral / _qwen3_moe / _qwen2_moe / _olmoe in double
// precision, written out as plain loops. Must not include engine or
// cpu_kernels headers, and must not be optimised at the cost of clarity.
#include "reference_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <system_error>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& message) {
    throw std::runtime_error("reference model: " + message);
}

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

json read_json(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open " + path.string());
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        fail(path.string() + ": invalid JSON: " + e.what());
    }
}

// ---- safetensors --------------------------------------------------------------

double bf16_to_double(uint16_t bits) {
    uint32_t f = uint32_t(bits) << 16;
    float x;
    std::memcpy(&x, &f, 4);
    return x;
}

double f16_to_double(uint16_t bits) {
    int sign = bits >> 15;
    int exponent = (bits >> 10) & 0x1F;
    int mantissa = bits & 0x3FF;
    double v;
    if (exponent == 0) {
        v = std::ldexp(double(mantissa), -24);  // zero or subnormal
    } else if (exponent == 31) {
        v = mantissa ? std::nan("") : INFINITY;
    } else {
        v = std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    }
    return sign ? -v : v;
}

double f32_to_double(uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
}

uint64_t load_le(const unsigned char* p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

// ---- config -------------------------------------------------------------------

int config_int(const json& j, const char* key, const fs::path& file) {
    if (!j.contains(key)) fail(file.string() + ": missing field " + key);
    if (!j[key].is_number_integer()) fail(file.string() + ": field " + key + " is not an integer");
    return j[key].get<int>();
}

ReferenceConfig parse_config(const fs::path& file) {
    json j = read_json(file);
    if (!j.is_object()) fail(file.string() + ": not a JSON object");
    // Qwen3.5's image-text config: the language model's fields in text_config.
    const bool nested = j.contains("text_config") && j["text_config"].is_object();
    if (nested) {
        const json top = j;
        for (const auto& [key, value] : top["text_config"].items()) j[key] = value;
    }
    auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
    auto get_bool = [&](const char* key, bool fallback) {
        if (!has(key)) return fallback;
        if (!j[key].is_boolean()) fail(file.string() + ": field " + std::string(key) + " is not a boolean");
        return j[key].get<bool>();
    };
    auto get_double = [&](const char* key, double fallback) {
        if (!has(key)) return fallback;
        if (!j[key].is_number()) fail(file.string() + ": field " + std::string(key) + " is not a number");
        return j[key].get<double>();
    };
    ReferenceConfig c;
    if (has("architectures")) {
        if (!j["architectures"].is_array() || j["architectures"].empty() || !j["architectures"][0].is_string())
            fail(file.string() + ": architectures is not a list of names");
        c.architecture = j["architectures"][0].get<std::string>();
    } else {
        c.architecture = has("num_local_experts") ? "MixtralForCausalLM" : "MistralForCausalLM";
    }
    const std::string& arch = c.architecture;
    const bool mixtral = arch == "MixtralForCausalLM", mistral = arch == "MistralForCausalLM",
               qwen3 = arch == "Qwen3MoeForCausalLM", qwen2 = arch == "Qwen2MoeForCausalLM",
               olmoe = arch == "OlmoeForCausalLM",
               qwen35 = arch == "Qwen3_5MoeForConditionalGeneration" || arch == "Qwen3_5MoeForCausalLM",
               next = arch == "Qwen3NextForCausalLM", hybrid = qwen35 || next, gpt_oss = arch == "GptOssForCausalLM";
    if (!mixtral && !mistral && !qwen3 && !qwen2 && !olmoe && !hybrid && !gpt_oss)
        fail(file.string() + ": unsupported architecture " + arch);

    c.dim = config_int(j, "hidden_size", file);
    c.hidden_dim = config_int(j, has("intermediate_size") || !hybrid ? "intermediate_size" : "moe_intermediate_size", file);
    c.n_layers = config_int(j, "num_hidden_layers", file);
    c.n_heads = config_int(j, "num_attention_heads", file);
    c.vocab_size = config_int(j, "vocab_size", file);
    c.n_kv_heads = has("num_key_value_heads") ? config_int(j, "num_key_value_heads", file) : c.n_heads;
    if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.vocab_size <= 0 ||
        c.n_kv_heads <= 0) {
        fail(file.string() + ": sizes must be positive");
    }
    // OlmoeAttention always splits hidden_size evenly over the heads.
    c.head_dim = has("head_dim") && !olmoe ? config_int(j, "head_dim", file) : c.dim / c.n_heads;
    if (c.head_dim <= 0 || c.head_dim % 2) fail(file.string() + ": head_dim must be positive and even");
    if (c.n_heads % c.n_kv_heads) fail(file.string() + ": num_attention_heads not a multiple of num_key_value_heads");

    // Experts: Mixtral's num_local_experts (sized intermediate_size); the
    // others' num_experts (Qwen's sized moe_intermediate_size, OLMoE's
    // intermediate_size). These sizes are required, not defaulted.
    if (mixtral || qwen3 || qwen2 || olmoe || hybrid || gpt_oss) {
        c.n_experts = config_int(j, mixtral || gpt_oss ? "num_local_experts" : "num_experts", file);
        c.n_experts_active = config_int(j, "num_experts_per_tok", file);
        if (c.n_experts < 1 || c.n_experts_active < 1 || c.n_experts_active > c.n_experts)
            fail(file.string() + ": num_experts_per_tok must be in [1, number of experts]");
        c.moe_hidden_dim = qwen3 || qwen2 || hybrid ? config_int(j, "moe_intermediate_size", file) : c.hidden_dim;
        if (c.moe_hidden_dim <= 0) fail(file.string() + ": moe_intermediate_size must be positive");
    }
    // Qwen3.5's router always renormalises (transformers' Qwen3_5MoeTopKRouter).
    // gpt-oss's router takes the softmax of the chosen k logits (the same).
    c.norm_topk_prob = mixtral || qwen35 || gpt_oss || get_bool("norm_topk_prob", next);
    if (qwen2 || hybrid) {
        c.shared_hidden_dim = config_int(j, "shared_expert_intermediate_size", file);
        if (c.shared_hidden_dim <= 0) fail(file.string() + ": shared_expert_intermediate_size must be positive");
    }

    // Which layers are sparse: Qwen's decoder_sparse_step and mlp_only_layers.
    c.moe_layers.assign(size_t(c.n_layers), c.n_experts > 0);
    if (qwen3 || qwen2 || next) {
        const int step = has("decoder_sparse_step") ? config_int(j, "decoder_sparse_step", file) : 1;
        if (step < 1) fail(file.string() + ": decoder_sparse_step must be at least 1");
        for (int l = 0; l < c.n_layers; ++l) c.moe_layers[size_t(l)] = (l + 1) % step == 0;
        if (has("mlp_only_layers")) {
            if (!j["mlp_only_layers"].is_array()) fail(file.string() + ": mlp_only_layers is not a list");
            for (const auto& v : j["mlp_only_layers"]) {
                if (!v.is_number_integer()) fail(file.string() + ": mlp_only_layers holds a non-integer");
                const int l = v.get<int>();
                if (l >= 0 && l < c.n_layers) c.moe_layers[size_t(l)] = false;
            }
        }
    }

    c.qk_norm = qwen3 || hybrid ? ReferenceQkNorm::PER_HEAD : olmoe ? ReferenceQkNorm::FULL : ReferenceQkNorm::NONE;
    if (qwen2) c.qkv_bias = get_bool("qkv_bias", true);
    if (qwen3 || olmoe) c.qkv_bias = c.o_bias = get_bool("attention_bias", false);
    if (gpt_oss) {
        c.gpt_oss = c.sinks = true;
        c.qkv_bias = c.o_bias = get_bool("attention_bias", true);
        c.swiglu_limit = get_double("swiglu_limit", 7.0);
        c.sliding_window = int(get_double("sliding_window", 128));
        c.sliding_layers.assign(size_t(c.n_layers), false);
        for (int l = 0; l < c.n_layers; ++l)
            c.sliding_layers[size_t(l)] = has("layer_types") ? j["layer_types"][size_t(l)] == "sliding_attention" : l % 2 == 0;
    }
    if (olmoe) c.clip_qkv = get_double("clip_qkv", 0.0);
    if (c.clip_qkv < 0) fail(file.string() + ": clip_qkv must not be negative");

    c.rope_theta = get_double("rope_theta", mixtral ? 1e6 : gpt_oss ? 150000.0 : 1e4);
    c.rotary_dim = c.head_dim;
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
        const json& r = j["rope_scaling"];
        c.rope_type = r.value("rope_type", r.value("type", std::string("default")));
        c.rope_factor = r.value("factor", 1.0);
        c.rope_original_context = r.value("original_max_position_embeddings", int(get_double("max_position_embeddings", 0)));
        c.rope_beta_fast = r.value("beta_fast", 32.0);
        c.rope_beta_slow = r.value("beta_slow", 1.0);
        c.rope_truncate = r.value("truncate", true);
        if (c.rope_type == "yarn") c.rope_attention_factor = r.value("attention_factor", 0.1 * std::log(c.rope_factor) + 1.0);
    }
    if (hybrid) {
        double factor = get_double("partial_rotary_factor", 0.25);
        if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
            const json& r = j["rope_parameters"];
            if (r.contains("rope_theta")) c.rope_theta = r["rope_theta"].get<double>();
            if (r.contains("partial_rotary_factor")) factor = r["partial_rotary_factor"].get<double>();
        }
        c.rotary_dim = int(c.head_dim * factor);
        c.attn_gate = true;
        c.zero_centered = true;
        c.fused_qkvz = next;
        if (nested) c.prefix = "model.language_model.";
        c.conv_kernel = config_int(j, "linear_conv_kernel_dim", file);
        c.n_k_heads = config_int(j, "linear_num_key_heads", file);
        c.n_v_heads = config_int(j, "linear_num_value_heads", file);
        c.head_k_dim = config_int(j, "linear_key_head_dim", file);
        c.head_v_dim = config_int(j, "linear_value_head_dim", file);
        if (c.n_k_heads <= 0 || c.n_v_heads % c.n_k_heads) fail(file.string() + ": linear heads do not group");
        c.linear_layers.assign(size_t(c.n_layers), false);
        if (has("layer_types")) {
            for (int l = 0; l < c.n_layers; ++l) c.linear_layers[size_t(l)] = j["layer_types"][size_t(l)] == "linear_attention";
        } else {
            const int interval = has("full_attention_interval") ? config_int(j, "full_attention_interval", file) : 4;
            for (int l = 0; l < c.n_layers; ++l) c.linear_layers[size_t(l)] = (l + 1) % interval != 0;
        }
    }
    c.rms_norm_eps = get_double("rms_norm_eps", mixtral || olmoe || gpt_oss ? 1e-5 : 1e-6);
    // Hugging Face's Mistral and Mixtral mask keys more than sliding_window
    // back (null: none).
    if ((mixtral || mistral) && has("sliding_window")) c.sliding_window = int(get_double("sliding_window", 0));
    c.tie_embeddings = get_bool("tie_word_embeddings", false);
    return c;
}

// ---- math ---------------------------------------------------------------------

// W (out, in) row-major @ x (in,) -> (out,)
std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x, int out, int in) {
    std::vector<double> y(out, 0.0);
    for (int o = 0; o < out; ++o) {
        double sum = 0.0;
        for (int i = 0; i < in; ++i) sum += w[size_t(o) * in + i] * x[i];
        y[o] = sum;
    }
    return y;
}

std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& w, double eps) {
    double ss = 0.0;
    for (double v : x) ss += v * v;
    double scale = 1.0 / std::sqrt(ss / double(x.size()) + eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w[i];
    return y;
}

void softmax(std::vector<double>& x) {
    double mx = *std::max_element(x.begin(), x.end());
    double sum = 0.0;
    for (double& v : x) sum += v = std::exp(v - mx);
    for (double& v : x) v /= sum;
}

double sigmoid(double z) {
    return 1.0 / (1.0 + std::exp(-z));
}

double silu(double z) {
    return z * sigmoid(z);
}

// y += b (a bias; nothing when b is empty)
void add_bias(std::vector<double>& y, const std::vector<double>& b) {
    for (size_t i = 0; i < b.size(); ++i) y[i] += b[i];
}

}  // namespace

// down (silu(gate h) * (up h))
std::vector<double> ReferenceModel::swiglu(const Expert& e, const std::vector<double>& h, int dim) {
    std::vector<double> g = matvec(e.w1, h, e.hidden_dim, dim);
    std::vector<double> u = matvec(e.w3, h, e.hidden_dim, dim);
    add_bias(g, e.b1);
    add_bias(u, e.b3);
    for (int i = 0; i < e.hidden_dim; ++i) {
        if (e.limit > 0) {  // GptOssExperts: gate clamped above, up both ways, (up + 1) * gate * sigmoid(1.702 gate)
            const double gc = std::min(g[i], e.limit), uc = std::clamp(u[i], -e.limit, e.limit);
            g[i] = (uc + 1.0) * gc * sigmoid(1.702 * gc);
        } else {
            g[i] = silu(g[i]) * u[i];
        }
    }
    std::vector<double> y = matvec(e.w2, g, dim, e.hidden_dim);
    add_bias(y, e.b2);
    return y;
}

std::map<std::string, ReferenceTensor> reference_read_safetensors(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("cannot open " + file.string());
    std::error_code ec;
    uint64_t file_size = fs::file_size(file, ec);
    if (ec || file_size < 8) fail(file.string() + ": too short for a safetensors header");
    unsigned char len_bytes[8];
    in.read(reinterpret_cast<char*>(len_bytes), 8);
    uint64_t header_len = load_le(len_bytes, 8);
    if (header_len > file_size - 8)
        fail(file.string() + ": header length " + std::to_string(header_len) + " past end of file");
    std::string header(header_len, '\0');
    in.read(header.data(), std::streamsize(header_len));
    if (!in) fail(file.string() + ": cannot read header");
    json j;
    try {
        j = json::parse(header);
    } catch (const json::exception& e) {
        fail(file.string() + ": invalid header JSON: " + e.what());
    }
    if (!j.is_object()) fail(file.string() + ": header is not a JSON object");
    const uint64_t data_start = 8 + header_len;
    const uint64_t data_size = file_size - data_start;

    std::map<std::string, ReferenceTensor> tensors;
    for (const auto& [name, info] : j.items()) {
        if (name == "__metadata__") continue;
        const std::string where = file.string() + ": tensor " + name;
        try {
            std::string dtype = info.at("dtype").get<std::string>();
            size_t elem = dtype == "F32" ? 4 : (dtype == "BF16" || dtype == "F16") ? 2 : dtype == "U8" ? 1 : 0;
            if (!elem) fail(where + ": unsupported dtype " + dtype);
            ReferenceTensor t;
            uint64_t numel = 1;
            for (const auto& d : info.at("shape")) {
                int64_t n = d.get<int64_t>();
                if (n < 0) fail(where + ": negative dimension");
                t.shape.push_back(n);
                numel *= uint64_t(n);
            }
            uint64_t begin = info.at("data_offsets").at(0).get<uint64_t>();
            uint64_t end = info.at("data_offsets").at(1).get<uint64_t>();
            if (end < begin || end > data_size) fail(where + ": data offsets past end of file");
            if (end - begin != numel * elem) fail(where + ": data size does not match shape " + shape_str(t.shape));
            std::vector<unsigned char> bytes(end - begin);
            in.seekg(std::streamoff(data_start + begin));
            in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
            if (!in) fail(where + ": cannot read data");
            t.data.resize(numel);
            for (uint64_t i = 0; i < numel; ++i) {
                const unsigned char* p = bytes.data() + i * elem;
                if (dtype == "F32") t.data[i] = f32_to_double(uint32_t(load_le(p, 4)));
                if (dtype == "BF16") t.data[i] = bf16_to_double(uint16_t(load_le(p, 2)));
                if (dtype == "F16") t.data[i] = f16_to_double(uint16_t(load_le(p, 2)));
                if (dtype == "U8") t.data[i] = double(p[0]);
            }
            tensors[name] = std::move(t);
        } catch (const json::exception& e) {
            fail(where + ": malformed header entry: " + e.what());
        }
    }
    return tensors;
}

std::vector<double> reference_rope_freq(const ReferenceConfig& c) {
    const int d = c.rotary_dim;
    std::vector<double> freq;
    for (int i = 0; i < d / 2; ++i) {
        const double plain = 1.0 / std::pow(c.rope_theta, double(2 * i) / d);
        freq.push_back(c.rope_type == "linear" ? plain / c.rope_factor : plain);
    }
    if (c.rope_type != "yarn") return freq;
    // The pair index whose wave turns r times over the original context.
    auto pair_of = [&](double r) {
        return d * std::log(c.rope_original_context / (r * 2.0 * M_PI)) / (2.0 * std::log(c.rope_theta));
    };
    double lo = pair_of(c.rope_beta_fast), hi = pair_of(c.rope_beta_slow);
    if (c.rope_truncate) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
    }
    lo = std::max(0.0, lo);
    hi = std::min(double(d - 1), hi);
    if (hi == lo) hi += 0.001;
    for (int i = 0; i < d / 2; ++i) {
        const double t = std::min(1.0, std::max(0.0, (i - lo) / (hi - lo)));  // 0: keep, 1: interpolate
        freq[size_t(i)] = freq[size_t(i)] * (1.0 - t) + freq[size_t(i)] / c.rope_factor * t;
    }
    return freq;
}

void reference_rope(double* v, int head_dim, int pos, const std::vector<double>& freq, double mscale) {
    int half = head_dim / 2;
    for (int i = 0; i < half; ++i) {
        double angle = pos * freq[size_t(i)];
        double a = v[i], b = v[i + half];
        v[i] = mscale * (a * std::cos(angle) - b * std::sin(angle));
        v[i + half] = mscale * (b * std::cos(angle) + a * std::sin(angle));
    }
}

void reference_rope(double* v, int head_dim, int pos, double theta) {
    int half = head_dim / 2;
    for (int i = 0; i < half; ++i) {
        double freq = std::pow(theta, -2.0 * i / head_dim);
        double angle = pos * freq;
        double a = v[i], b = v[i + half];
        v[i] = a * std::cos(angle) - b * std::sin(angle);
        v[i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
}

ReferenceModel ReferenceModel::load(const fs::path& dir) {
    ReferenceModel m;
    m.config_ = parse_config(dir / "config.json");
    const ReferenceConfig& c = m.config_;

    std::map<std::string, ReferenceTensor> tensors;
    std::map<std::string, std::string> tensor_file;
    fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
        json j = read_json(index);
        if (!j.contains("weight_map") || !j["weight_map"].is_object()) fail(index.string() + ": missing weight_map");
        std::set<std::string> files;
        for (const auto& [name, f] : j["weight_map"].items()) {
            if (!f.is_string()) fail(index.string() + ": weight_map entry " + name + " is not a file name");
            files.insert(f.get<std::string>());
        }
        for (const auto& f : files) {
            for (auto& [name, t] : reference_read_safetensors(dir / f)) {
                tensor_file[name] = f;
                tensors[name] = std::move(t);
            }
        }
        for (const auto& [name, f] : j["weight_map"].items()) {
            if (tensor_file[name] != f.get<std::string>())
                fail(index.string() + ": tensor " + name + " not in " + f.get<std::string>());
        }
    } else {
        tensors = reference_read_safetensors(dir / "model.safetensors");
    }

    auto take = [&](const std::string& name, std::vector<int64_t> shape) {
        auto it = tensors.find(name);
        if (it == tensors.end()) fail(dir.string() + ": missing tensor " + name);
        if (it->second.shape != shape) {
            fail(dir.string() + ": tensor " + name + " has shape " + shape_str(it->second.shape) + ", expected " +
                 shape_str(shape));
        }
        return std::move(it->second.data);
    };

    const int64_t dim = c.dim, q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
    // gate / up / down of one MLP under prefix q: w1 / w3 / w2 (Mixtral's
    // experts) or gate_proj / up_proj / down_proj (every other MLP).
    auto mlp = [&](const std::string& q, bool mixtral_names, int64_t hidden) {
        Expert e;
        e.w1 = take(q + (mixtral_names ? "w1" : "gate_proj") + ".weight", {hidden, dim});
        e.w3 = take(q + (mixtral_names ? "w3" : "up_proj") + ".weight", {hidden, dim});
        e.w2 = take(q + (mixtral_names ? "w2" : "down_proj") + ".weight", {dim, hidden});
        e.hidden_dim = int(hidden);
        return e;
    };
    const bool mixtral = c.architecture == "MixtralForCausalLM";
    // A zero-centred RMSNorm weight w scales by 1 + w.
    auto norm = [&](const std::string& name, int64_t n) {
        std::vector<double> w = take(name, {n});
        if (c.zero_centered)
            for (double& x : w) x += 1.0;
        return w;
    };
    // gpt-oss's experts, all of a layer in fused tensors: gate_up (gate row
    // i at 2i, up row i at 2i + 1) and down, either MXFP4 (_blocks: 16
    // bytes a block of 32, element 2j in byte j's low nibble and 2j + 1 in
    // its high one; _scales: one byte s a block, the value is e2m1 times
    // 2^(s - 127)) or floats stored transposed (x @ W, so (n, in, out)).
    auto gpt_oss_experts = [&](const std::string& q) {
        const int64_t n = c.n_experts, hidden = c.moe_hidden_dim;
        // The (n, rows, cols) weights of one fused tensor, as (out, in) rows.
        auto fused = [&](const std::string& name, int64_t rows, int64_t cols) {
            std::vector<double> w(static_cast<size_t>(n * rows * cols));
            if (tensors.count(name + "_blocks")) {
                static const double E2M1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
                const std::vector<double> blocks = take(name + "_blocks", {n, rows, cols / 32, 16});
                const std::vector<double> scales = take(name + "_scales", {n, rows, cols / 32});
                for (size_t b = 0; b < scales.size(); ++b) {
                    const double scale = std::ldexp(1.0, int(scales[b]) - 127);
                    for (int j = 0; j < 16; ++j) {
                        const int byte = int(blocks[b * 16 + size_t(j)]);
                        w[b * 32 + size_t(2 * j)] = E2M1[byte & 15] * scale;
                        w[b * 32 + size_t(2 * j + 1)] = E2M1[byte >> 4] * scale;
                    }
                }
                return w;
            }
            const std::vector<double> t = take(name, {n, cols, rows});
            for (int64_t e = 0; e < n; ++e)
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t col = 0; col < cols; ++col)
                        w[size_t((e * rows + r) * cols + col)] = t[size_t((e * cols + col) * rows + r)];
            return w;
        };
        const std::vector<double> gate_up = fused(q + "gate_up_proj", 2 * hidden, dim);
        const std::vector<double> down = fused(q + "down_proj", dim, hidden);
        const std::vector<double> gate_up_bias = take(q + "gate_up_proj_bias", {n, 2 * hidden});
        const std::vector<double> down_bias = take(q + "down_proj_bias", {n, dim});
        std::vector<Expert> experts(static_cast<size_t>(n));
        for (int64_t e = 0; e < n; ++e) {
            Expert& x = experts[size_t(e)];
            x.hidden_dim = int(hidden);
            x.limit = c.swiglu_limit;
            for (int64_t r = 0; r < 2 * hidden; ++r) {
                const auto row = gate_up.begin() + (e * 2 * hidden + r) * dim;
                (r % 2 ? x.w3 : x.w1).insert((r % 2 ? x.w3 : x.w1).end(), row, row + dim);
                (r % 2 ? x.b3 : x.b1).push_back(gate_up_bias[size_t(e * 2 * hidden + r)]);
            }
            x.w2.assign(down.begin() + e * dim * hidden, down.begin() + (e + 1) * dim * hidden);
            x.b2.assign(down_bias.begin() + e * dim, down_bias.begin() + (e + 1) * dim);
        }
        return experts;
    };
    const std::string& pre = c.prefix;
    m.embed_ = take(pre + "embed_tokens.weight", {c.vocab_size, dim});
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string p = pre + "layers." + std::to_string(l) + ".";
        Layer layer;
        layer.attn_norm = norm(p + "input_layernorm.weight", dim);
        if (!c.linear_layers.empty() && c.linear_layers[size_t(l)]) {
            const std::string a = p + "linear_attn.";
            const int64_t nk = c.n_k_heads, nv = c.n_v_heads, dk = c.head_k_dim, dv = c.head_v_dim, r = nv / nk;
            const int64_t key_dim = nk * dk, value_dim = nv * dv, channels = 2 * key_dim + value_dim;
            if (c.fused_qkvz) {
                // Per key head g: rows q_g (dk), k_g (dk), v of its r value heads, z of them.
                const std::vector<double> qkvz = take(a + "in_proj_qkvz.weight", {channels + value_dim, dim});
                const std::vector<double> ba = take(a + "in_proj_ba.weight", {2 * nv, dim});
                const int64_t group = 2 * dk + 2 * r * dv;
                auto rows = [&](const std::vector<double>& w, int64_t from, int64_t count, std::vector<double>& to) {
                    to.insert(to.end(), w.begin() + from * dim, w.begin() + (from + count) * dim);
                };
                std::vector<double> wq, wk, wv, wz, wb, wa;
                for (int64_t g = 0; g < nk; ++g) {
                    rows(qkvz, g * group, dk, wq);
                    rows(qkvz, g * group + dk, dk, wk);
                    rows(qkvz, g * group + 2 * dk, r * dv, wv);
                    rows(qkvz, g * group + 2 * dk + r * dv, r * dv, wz);
                    rows(ba, g * 2 * r, r, wb);
                    rows(ba, g * 2 * r + r, r, wa);
                }
                layer.w_qkv = wq;
                layer.w_qkv.insert(layer.w_qkv.end(), wk.begin(), wk.end());
                layer.w_qkv.insert(layer.w_qkv.end(), wv.begin(), wv.end());
                layer.w_z = wz;
                layer.w_b = wb;
                layer.w_a = wa;
            } else {
                layer.w_qkv = take(a + "in_proj_qkv.weight", {channels, dim});
                layer.w_z = take(a + "in_proj_z.weight", {value_dim, dim});
                layer.w_b = take(a + "in_proj_b.weight", {nv, dim});
                layer.w_a = take(a + "in_proj_a.weight", {nv, dim});
            }
            layer.conv = take(a + "conv1d.weight", {channels, 1, c.conv_kernel});
            layer.dt_bias = take(a + "dt_bias", {nv});
            layer.a_log = take(a + "A_log", {nv});
            layer.lin_norm = take(a + "norm.weight", {dv});  // a plain weight
            layer.w_out = take(a + "out_proj.weight", {dim, value_dim});
            layer.ffn_norm = norm(p + "post_attention_layernorm.weight", dim);
            const std::string moe = p + "mlp.";
            layer.gate = take(moe + "gate.weight", {c.n_experts, dim});
            for (int e = 0; e < c.n_experts; ++e)
                layer.experts.push_back(mlp(moe + "experts." + std::to_string(e) + ".", false, c.moe_hidden_dim));
            layer.shared.push_back(mlp(moe + "shared_expert.", false, c.shared_hidden_dim));
            layer.shared_gate = take(moe + "shared_expert_gate.weight", {1, dim});
            m.layers_.push_back(std::move(layer));
            continue;
        }
        layer.wq = take(p + "self_attn.q_proj.weight", {c.attn_gate ? 2 * q_dim : q_dim, dim});
        layer.wk = take(p + "self_attn.k_proj.weight", {kv_dim, dim});
        layer.wv = take(p + "self_attn.v_proj.weight", {kv_dim, dim});
        layer.wo = take(p + "self_attn.o_proj.weight", {dim, q_dim});
        if (c.qkv_bias) {
            layer.bq = take(p + "self_attn.q_proj.bias", {q_dim});
            layer.bk = take(p + "self_attn.k_proj.bias", {kv_dim});
            layer.bv = take(p + "self_attn.v_proj.bias", {kv_dim});
        }
        if (c.o_bias) layer.bo = take(p + "self_attn.o_proj.bias", {dim});
        if (c.sinks) layer.sinks = take(p + "self_attn.sinks", {c.n_heads});
        if (c.qk_norm != ReferenceQkNorm::NONE) {
            const bool per_head = c.qk_norm == ReferenceQkNorm::PER_HEAD;
            layer.q_norm = norm(p + "self_attn.q_norm.weight", per_head ? c.head_dim : q_dim);
            layer.k_norm = norm(p + "self_attn.k_norm.weight", per_head ? c.head_dim : kv_dim);
        }
        layer.ffn_norm = norm(p + "post_attention_layernorm.weight", dim);
        if (c.gpt_oss) {
            layer.gate = take(p + "mlp.router.weight", {c.n_experts, dim});
            layer.gate_bias = take(p + "mlp.router.bias", {c.n_experts});
            layer.experts = gpt_oss_experts(p + "mlp.experts.");
            m.layers_.push_back(std::move(layer));
            continue;
        }
        if (c.moe_layers[size_t(l)]) {
            const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
            layer.gate = take(moe + "gate.weight", {c.n_experts, dim});
            for (int e = 0; e < c.n_experts; ++e)
                layer.experts.push_back(mlp(moe + "experts." + std::to_string(e) + ".", mixtral, c.moe_hidden_dim));
            if (c.shared_hidden_dim > 0) {
                layer.shared.push_back(mlp(moe + "shared_expert.", false, c.shared_hidden_dim));
                layer.shared_gate = take(moe + "shared_expert_gate.weight", {1, dim});
            }
        } else {
            layer.experts.push_back(mlp(p + "mlp.", false, c.hidden_dim));
        }
        m.layers_.push_back(std::move(layer));
    }
    m.norm_ = norm(pre + "norm.weight", dim);
    if (!c.tie_embeddings) m.lm_head_ = take("lm_head.weight", {c.vocab_size, dim});
    return m;
}

std::vector<std::vector<double>> ReferenceModel::forward(const std::vector<int>& tokens) const {
    return forward(tokens, nullptr);
}

std::vector<std::vector<double>> ReferenceModel::forward(const std::vector<int>& tokens,
                                                         ReferenceRouting* routing) const {
    std::vector<std::vector<double>> x = final_hidden(tokens, routing);
    std::vector<std::vector<double>> logits;
    for (const auto& h : x) logits.push_back(output_logits(h));
    return logits;
}

std::vector<double> ReferenceModel::output_logits(const std::vector<double>& h) const {
    return matvec(config_.tie_embeddings ? embed_ : lm_head_, h, config_.vocab_size, config_.dim);
}

std::vector<std::vector<double>> ReferenceModel::final_hidden(const std::vector<int>& tokens,
                                                              ReferenceRouting* routing) const {
    const ReferenceConfig& c = config_;
    const int n = int(tokens.size());
    const int dim = c.dim, hd = c.head_dim, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
    const int group = c.n_heads / c.n_kv_heads;
    const std::vector<double> rope_freq = reference_rope_freq(c);
    if (n == 0) fail("forward of an empty sequence");
    if (routing) routing->assign(c.n_experts > 0 ? c.n_layers : 0, std::vector<ReferenceRoute>(n));

    // x[t] = embed[token]
    std::vector<std::vector<double>> x(n);
    for (int t = 0; t < n; ++t) {
        if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
            fail("token " + std::to_string(tokens[t]) + " outside the vocabulary");
        x[t].assign(embed_.begin() + size_t(tokens[t]) * dim, embed_.begin() + size_t(tokens[t] + 1) * dim);
    }

    for (int l = 0; l < c.n_layers; ++l) {
        const Layer& L = layers_[l];
        const bool linear = !c.linear_layers.empty() && c.linear_layers[size_t(l)];
        if (linear) {
            std::vector<std::vector<double>> h(n);
            for (int t = 0; t < n; ++t) h[t] = rmsnorm(x[t], L.attn_norm, c.rms_norm_eps);
            const std::vector<std::vector<double>> out = delta_net(L, h);
            for (int t = 0; t < n; ++t)
                for (int i = 0; i < dim; ++i) x[t][i] += out[t][i];
        }

        // Attention: q, k, v of every position first, then causal softmax.
        std::vector<std::vector<double>> q(n), k(n), v(n), gate(n);
        for (int t = 0; t < n && !linear; ++t) {
            std::vector<double> h = rmsnorm(x[t], L.attn_norm, c.rms_norm_eps);
            q[t] = matvec(L.wq, h, c.attn_gate ? 2 * q_dim : q_dim, dim);
            if (c.attn_gate) {  // per head [q_h | gate_h]
                std::vector<double> qh(q_dim), gh(q_dim);
                for (int head = 0; head < c.n_heads; ++head)
                    for (int i = 0; i < hd; ++i) {
                        qh[head * hd + i] = q[t][size_t(head) * 2 * hd + i];
                        gh[head * hd + i] = q[t][size_t(head) * 2 * hd + hd + i];
                    }
                q[t] = qh;
                gate[t] = gh;
            }
            k[t] = matvec(L.wk, h, kv_dim, dim);
            v[t] = matvec(L.wv, h, kv_dim, dim);
            add_bias(q[t], L.bq);
            add_bias(k[t], L.bk);
            add_bias(v[t], L.bv);
            if (c.qk_norm == ReferenceQkNorm::FULL) {  // OLMoE: the whole projection, then clip_qkv
                q[t] = rmsnorm(q[t], L.q_norm, c.rms_norm_eps);
                k[t] = rmsnorm(k[t], L.k_norm, c.rms_norm_eps);
            }
            if (c.clip_qkv > 0) {
                for (auto* u : {&q[t], &k[t], &v[t]}) {
                    for (double& z : *u) z = std::clamp(z, -c.clip_qkv, c.clip_qkv);
                }
            }
            // Qwen3: each head's vector alone; then RoPE on every head.
            auto per_head = [&](std::vector<double>& u, int heads, const std::vector<double>& w) {
                for (int head = 0; head < heads; ++head) {
                    std::vector<double> one(u.begin() + head * hd, u.begin() + (head + 1) * hd);
                    if (c.qk_norm == ReferenceQkNorm::PER_HEAD) one = rmsnorm(one, w, c.rms_norm_eps);
                    reference_rope(one.data(), c.rotary_dim, t, rope_freq, c.rope_attention_factor);  // the first rotary_dim dims
                    std::copy(one.begin(), one.end(), u.begin() + head * hd);
                }
            };
            per_head(q[t], c.n_heads, L.q_norm);
            per_head(k[t], c.n_kv_heads, L.k_norm);
        }
        for (int t = 0; t < n && !linear; ++t) {
            std::vector<double> attn(q_dim, 0.0);
            for (int head = 0; head < c.n_heads; ++head) {
                const int kv_head = head / group;
                // A sliding window: keys s with t - s < window only (every
                // layer of Mistral's, gpt-oss's sliding layers).
                const bool slides = c.sliding_window > 0 && (c.sliding_layers.empty() || c.sliding_layers[size_t(l)]);
                const int first = slides ? std::max(0, t - c.sliding_window + 1) : 0;
                std::vector<double> scores(size_t(t + 1 - first));
                for (int s = first; s <= t; ++s) {
                    double dot = 0.0;
                    for (int i = 0; i < hd; ++i) dot += q[t][head * hd + i] * k[s][kv_head * hd + i];
                    scores[size_t(s - first)] = dot / std::sqrt(double(hd));
                }
                // A sink: one more logit in the softmax whose probability is dropped.
                if (!L.sinks.empty()) scores.push_back(L.sinks[size_t(head)]);
                softmax(scores);
                for (int s = first; s <= t; ++s) {
                    for (int i = 0; i < hd; ++i) attn[head * hd + i] += scores[size_t(s - first)] * v[s][kv_head * hd + i];
                }
            }
            if (c.attn_gate)
                for (int i = 0; i < q_dim; ++i) attn[i] *= sigmoid(gate[t][i]);
            std::vector<double> o = matvec(L.wo, attn, dim, q_dim);
            add_bias(o, L.bo);
            for (int i = 0; i < dim; ++i) x[t][i] += o[i];
        }

        // Feed-forward: a dense MLP, or softmax over all experts, top-k,
        // renormalised when norm_topk_prob, weighted sum, plus the shared
        // expert scaled by sigmoid(shared_expert_gate . h).
        for (int t = 0; t < n; ++t) {
            std::vector<double> h = rmsnorm(x[t], L.ffn_norm, c.rms_norm_eps);
            std::vector<double> ffn(dim, 0.0);
            if (L.gate.empty()) {
                ffn = swiglu(L.experts[0], h, dim);
            } else {
                std::vector<double> probs = matvec(L.gate, h, c.n_experts, dim);
                add_bias(probs, L.gate_bias);
                softmax(probs);
                ReferenceRoute route;
                std::vector<bool> taken(c.n_experts, false);
                double total = 0.0;
                for (int j = 0; j < c.n_experts_active; ++j) {
                    int best = -1;
                    for (int e = 0; e < c.n_experts; ++e) {
                        if (!taken[e] && (best < 0 || probs[e] > probs[best])) best = e;
                    }
                    taken[best] = true;
                    route.experts.push_back(best);
                    route.weights.push_back(probs[best]);
                    total += probs[best];
                }
                if (c.norm_topk_prob) {
                    for (double& w : route.weights) w /= total;
                }
                route.probs = probs;
                for (int j = 0; j < c.n_experts_active; ++j) {
                    std::vector<double> y = swiglu(L.experts[route.experts[j]], h, dim);
                    for (int i = 0; i < dim; ++i) ffn[i] += route.weights[j] * y[i];
                }
                if (!L.shared.empty()) {
                    route.shared_gate = sigmoid(matvec(L.shared_gate, h, 1, dim)[0]);
                    std::vector<double> y = swiglu(L.shared[0], h, dim);
                    for (int i = 0; i < dim; ++i) ffn[i] += route.shared_gate * y[i];
                }
                if (routing) (*routing)[l][t] = std::move(route);
            }
            for (int i = 0; i < dim; ++i) x[t][i] += ffn[i];
        }
    }

    for (int t = 0; t < n; ++t) x[t] = rmsnorm(x[t], norm_, c.rms_norm_eps);
    return x;
}

// transformers' torch_recurrent_gated_delta_rule and its causal conv, as
// plain loops: for each value head h (reading key head h / (n_v / n_k)) a
// state S (head_k x head_v) from zero, and for each position t:
// S *= exp(g_t); u = beta_t (v_t - S^T k_t); S += k_t u^T; o_t = S^T q_t.
std::vector<std::vector<double>> ReferenceModel::delta_net(const Layer& L,
                                                           const std::vector<std::vector<double>>& h) const {
    const ReferenceConfig& c = config_;
    const int n = int(h.size()), dim = c.dim, K = c.conv_kernel;
    const int nk = c.n_k_heads, nv = c.n_v_heads, dk = c.head_k_dim, dv = c.head_v_dim, r = nv / nk;
    const int key_dim = nk * dk, value_dim = nv * dv, channels = 2 * key_dim + value_dim;
    std::vector<std::vector<double>> mixed(n), z(n), b(n), a(n);
    for (int t = 0; t < n; ++t) {
        mixed[t] = matvec(L.w_qkv, h[t], channels, dim);
        z[t] = matvec(L.w_z, h[t], value_dim, dim);
        b[t] = matvec(L.w_b, h[t], nv, dim);
        a[t] = matvec(L.w_a, h[t], nv, dim);
    }
    // Causal depthwise conv (zeros before the first position), then SiLU.
    std::vector<std::vector<double>> conv(n, std::vector<double>(channels));
    for (int t = 0; t < n; ++t)
        for (int ch = 0; ch < channels; ++ch) {
            double y = 0.0;
            for (int j = 0; j < K; ++j) {
                const int s = t - (K - 1) + j;
                if (s >= 0) y += L.conv[size_t(ch) * K + j] * mixed[s][ch];
            }
            conv[t][ch] = silu(y);
        }
    auto l2norm = [](double* x, int len) {
        double ss = 0.0;
        for (int i = 0; i < len; ++i) ss += x[i] * x[i];
        const double f = 1.0 / std::sqrt(ss + 1e-6);
        for (int i = 0; i < len; ++i) x[i] *= f;
    };
    for (int t = 0; t < n; ++t)
        for (int head = 0; head < 2 * nk; ++head) {
            l2norm(&conv[t][size_t(head) * dk], dk);
            if (head < nk)
                for (int i = 0; i < dk; ++i) conv[t][size_t(head) * dk + i] /= std::sqrt(double(dk));
        }
    std::vector<std::vector<double>> o(n, std::vector<double>(value_dim));
    for (int vh = 0; vh < nv; ++vh) {
        const int kh = vh / r;
        std::vector<double> S(size_t(dk) * dv, 0.0);
        for (int t = 0; t < n; ++t) {
            const double* q = &conv[t][size_t(kh) * dk];
            const double* k = &conv[t][size_t(key_dim + kh * dk)];
            const double* v = &conv[t][size_t(2 * key_dim + vh * dv)];
            const double x = a[t][vh] + L.dt_bias[vh];
            const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));
            const double g = -std::exp(L.a_log[vh]) * softplus;
            const double beta = sigmoid(b[t][vh]);
            for (double& s : S) s *= std::exp(g);
            std::vector<double> u(dv, 0.0);
            for (int i = 0; i < dk; ++i)
                for (int j = 0; j < dv; ++j) u[j] += S[size_t(i) * dv + j] * k[i];
            for (int j = 0; j < dv; ++j) u[j] = beta * (v[j] - u[j]);
            for (int i = 0; i < dk; ++i)
                for (int j = 0; j < dv; ++j) S[size_t(i) * dv + j] += k[i] * u[j];
            for (int j = 0; j < dv; ++j) {
                double y = 0.0;
                for (int i = 0; i < dk; ++i) y += S[size_t(i) * dv + j] * q[i];
                o[t][size_t(vh) * dv + j] = y;
            }
        }
    }
    // The gated RMSNorm per value head (a plain weight), then out_proj.
    std::vector<std::vector<double>> out(n);
    for (int t = 0; t < n; ++t) {
        for (int vh = 0; vh < nv; ++vh) {
            std::vector<double> one(o[t].begin() + vh * dv, o[t].begin() + (vh + 1) * dv);
            one = rmsnorm(one, L.lin_norm, c.rms_norm_eps);
            for (int j = 0; j < dv; ++j) o[t][size_t(vh) * dv + j] = one[j] * silu(z[t][size_t(vh) * dv + j]);
        }
        out[t] = matvec(L.w_out, o[t], dim, value_dim);
    }
    return out;
}

std::vector<int> ReferenceModel::greedy(const std::vector<int>& prompt, int n) const {
    std::vector<int> seq = prompt;
    std::vector<int> out;
    for (int i = 0; i < n; ++i) {
        std::vector<double> last = output_logits(final_hidden(seq, nullptr).back());  // only the last row is needed
        int best = int(std::max_element(last.begin(), last.end()) - last.begin());    // first max: lowest id
        out.push_back(best);
        seq.push_back(best);
    }
    return out;
}

double reference_nll_sum(const ReferenceModel& model, const std::vector<int>& tokens) {
    std::vector<std::vector<double>> logits = model.forward(tokens);
    double nll = 0;
    for (size_t i = 0; i + 1 < tokens.size(); i++) {
        double mx = *std::max_element(logits[i].begin(), logits[i].end()), sum = 0;
        for (double l : logits[i]) sum += std::exp(l - mx);
        nll += std::log(sum) + mx - logits[i][tokens[i + 1]];
    }
    return nll;
}
