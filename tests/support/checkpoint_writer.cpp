// write_safetensors and test_checkpoint_dir (see checkpoint_writer.h).
#include "checkpoint_writer.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <system_error>

#include "engine/model/model_config.h"
#include "engine/model/synth_model.h"
#include "engine/model/tensor_table.h"
#include "test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

uint16_t to_bf16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    REQUIRE((bits & 0xFFFF) == 0);
    return uint16_t(bits >> 16);
}

uint16_t to_f16(float x) {
    if (x == 0.0f) return std::signbit(x) ? 0x8000 : 0;
    int exponent;
    double m = std::frexp(std::fabs(double(x)), &exponent);  // |x| = m * 2^exponent, m in [0.5, 1)
    int e = exponent - 1 + 15;                               // biased exponent of 1.m form
    REQUIRE(e >= 1);
    REQUIRE(e <= 30);
    double frac = (m * 2.0 - 1.0) * 1024.0;
    REQUIRE(frac == std::floor(frac));
    return uint16_t((x < 0 ? 0x8000 : 0) | (e << 10) | int(frac));
}

// x with its low 16 bits cleared: a bf16 value.
float bf16_trunc(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    bits &= 0xFFFF0000u;
    std::memcpy(&x, &bits, 4);
    return x;
}

// Random values for one tensor by its role: uniform in [-a, a] (a = sqrt(3)
// times the RMS wanted), or 1 + uniform(-0.1, 0.1) for a norm.
TestTensor random_tensor(const TensorEntry& t, std::mt19937_64& rng) {
    TestTensor out{t.shape, {}};
    size_t n = 1;
    for (int64_t d : t.shape) n *= size_t(d);
    const double fan_in = t.shape.size() == 2 ? double(t.shape[1]) : 1.0;
    double rms = 1.0 / std::sqrt(fan_in), offset = 0.0;
    switch (t.role) {
    case TensorRole::EMBED:
        rms = 1.0;
        break;
    case TensorRole::LM_HEAD:
        rms = 2.5 / std::sqrt(fan_in);
        break;
    case TensorRole::Q_BIAS:
    case TensorRole::K_BIAS:
    case TensorRole::V_BIAS:
        rms = 0.1;
        break;
    case TensorRole::ATTN_NORM:
    case TensorRole::FFN_NORM:
    case TensorRole::Q_NORM:
    case TensorRole::K_NORM:
    case TensorRole::FINAL_NORM:
        rms = 0.05;
        offset = t.values == TensorValues::PLUS_ONE ? 0.0 : 1.0;  // zero-centred: the scale is 1 + w
        break;
    case TensorRole::LIN_NORM:
        rms = 0.05;
        offset = 1.0;
        break;
    case TensorRole::LIN_CONV:
        rms = 0.5;
        break;
    case TensorRole::LIN_A_LOG:  // decay -exp(A_log) softplus(a + dt_bias): about 0.85 a step
        rms = 0.3;
        offset = 1.0;
        break;
    case TensorRole::LIN_DT_BIAS:
        rms = 0.5;
        offset = -3.0;
        break;
    default:
        break;
    }
    std::uniform_real_distribution<double> u(-std::sqrt(3.0) * rms, std::sqrt(3.0) * rms);
    out.data.resize(n);
    for (float& x : out.data) x = bf16_trunc(float(offset + u(rng)));
    return out;
}

// One row of values as MXFP4 in Hugging Face's layout: per block of 32 a
// scale byte s (2^(s - 127)) and 16 bytes, element 2j in byte j's low
// nibble, 2j + 1 in its high one; the scale is the smallest power of two
// that puts the block's largest magnitude within e2m1's 6, each value the
// nearest e2m1 (ties to the lower code). `row` is replaced by the values
// written.
void mxfp4_row(std::vector<float>& row, size_t from, size_t n, std::vector<uint8_t>& blocks,
               std::vector<uint8_t>& scales) {
    static const float E2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    REQUIRE(n % 32 == 0);
    for (size_t b = 0; b < n / 32; ++b) {
        float* x = row.data() + from + 32 * b;
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
        int e = amax > 0 ? int(std::ceil(std::log2(amax / 6.0))) : 0;
        const float scale = std::ldexp(1.0f, e);
        scales.push_back(uint8_t(e + 127));
        uint8_t codes[32];
        for (int i = 0; i < 32; ++i) {
            int best = 0;
            for (int q = 1; q < 16; ++q)
                if (std::fabs(E2M1[q] * scale - x[i]) < std::fabs(E2M1[best] * scale - x[i])) best = q;
            codes[i] = uint8_t(best);
            x[i] = E2M1[best] * scale;
        }
        for (int j = 0; j < 16; ++j) blocks.push_back(uint8_t(codes[2 * j] | (codes[2 * j + 1] << 4)));
    }
}

// gpt-oss's Hugging Face layout: each layer's per-expert tensors (the
// table's mlp.experts.E.{gate,up,down}_proj.{weight,bias}) replaced by the
// fused gate_up_proj (gate row i at 2i, up row i at 2i + 1) and down_proj,
// as MXFP4 _blocks / _scales or transposed floats, and their fused biases.
void gpt_oss_fuse(TensorMap& tensors, BytesMap& bytes, const ModelConfig& c, bool mxfp4) {
    const int64_t n = c.n_experts, hidden = c.hidden_dim, dim = c.dim;
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string q = c.tensor_prefix + "layers." + std::to_string(l) + ".mlp.experts.";
        // (n, rows, cols) in (out, in) rows: gate_up's rows interleaved.
        std::vector<float> gate_up, down, gate_up_bias, down_bias;
        for (int64_t e = 0; e < n; ++e) {
            const std::string x = q + std::to_string(e) + ".";
            auto take = [&](const std::string& name) {
                auto it = tensors.find(x + name);
                REQUIRE(it != tensors.end());
                std::vector<float> v = std::move(it->second.data);
                tensors.erase(it);
                return v;
            };
            const std::vector<float> w1 = take("gate_proj.weight"), w3 = take("up_proj.weight"),
                                     w2 = take("down_proj.weight"), b1 = take("gate_proj.bias"),
                                     b3 = take("up_proj.bias"), b2 = take("down_proj.bias");
            for (int64_t r = 0; r < hidden; ++r) {
                gate_up.insert(gate_up.end(), w1.begin() + r * dim, w1.begin() + (r + 1) * dim);
                gate_up.insert(gate_up.end(), w3.begin() + r * dim, w3.begin() + (r + 1) * dim);
                gate_up_bias.push_back(b1[size_t(r)]);
                gate_up_bias.push_back(b3[size_t(r)]);
            }
            down.insert(down.end(), w2.begin(), w2.end());
            down_bias.insert(down_bias.end(), b2.begin(), b2.end());
        }
        tensors[q + "gate_up_proj_bias"] = {{n, 2 * hidden}, gate_up_bias};
        tensors[q + "down_proj_bias"] = {{n, dim}, down_bias};
        auto put = [&](const std::string& name, std::vector<float>& w, int64_t rows, int64_t cols) {
            if (mxfp4) {
                TestBytes blocks{{n, rows, cols / 32, 16}, {}}, scales{{n, rows, cols / 32}, {}};
                for (int64_t r = 0; r < n * rows; ++r)
                    mxfp4_row(w, size_t(r * cols), size_t(cols), blocks.data, scales.data);
                bytes[name + "_blocks"] = std::move(blocks);
                bytes[name + "_scales"] = std::move(scales);
                return;
            }
            TestTensor t{{n, cols, rows}, std::vector<float>(w.size())};  // x @ W: (n, in, out)
            for (int64_t e = 0; e < n; ++e)
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t col = 0; col < cols; ++col)
                        t.data[size_t((e * cols + col) * rows + r)] = w[size_t((e * rows + r) * cols + col)];
            tensors[name] = std::move(t);
        };
        put(q + "gate_up_proj", gate_up, 2 * hidden, dim);
        put(q + "down_proj", down, dim, hidden);
    }
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error(path.string() + ": cannot write");
}

const char* const CHATML_TEMPLATE =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

void write_safetensors(const fs::path& path, const TensorMap& tensors, WriteType type, const BytesMap& bytes) {
    const char* dtype = type == WriteType::F32 ? "F32" : type == WriteType::BF16 ? "BF16" : "F16";
    const size_t elem = type == WriteType::F32 ? 4 : 2;
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    std::string data;
    for (const auto& [name, t] : bytes) {
        size_t n = 1;
        for (int64_t d : t.shape) n *= size_t(d);
        REQUIRE(n == t.data.size());
        const size_t begin = data.size();
        data.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
        header[name] = {{"dtype", "U8"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
    }
    for (const auto& [name, t] : tensors) {
        size_t begin = data.size();
        for (float v : t.data) {
            unsigned char bytes[4];
            uint32_t bits = 0;
            if (type == WriteType::F32) std::memcpy(&bits, &v, 4);
            if (type == WriteType::BF16) bits = to_bf16(v);
            if (type == WriteType::F16) bits = to_f16(v);
            for (size_t i = 0; i < elem; ++i) bytes[i] = (bits >> (8 * i)) & 0xFF;
            data.append(reinterpret_cast<char*>(bytes), elem);
        }
        header[name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
    }
    std::string h = header.dump();
    std::ofstream out(path, std::ios::binary);
    uint64_t len = h.size();
    for (int i = 0; i < 8; ++i) out.put(char((len >> (8 * i)) & 0xFF));
    out << h << data;
    if (!out) throw std::runtime_error(path.string() + ": cannot write");
}

fs::path test_checkpoint_dir(const std::string& name, const json& config, unsigned seed) {
    const std::string text = config.dump(2);
    const fs::path dir =
        fs::path(MOE_TEST_BUILD_DIR) / "test-models" /
        (name + "-" + std::to_string(std::hash<std::string>{}(text) % 1000000007) + "-seed" + std::to_string(seed));
    if (fs::exists(dir / "config.json")) return dir;
    fs::create_directories(dir.parent_path());
    const fs::path tmp = dir.string() + ".tmp" + std::to_string(getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    TensorMap tensors;
    std::mt19937_64 rng(seed);
    const ModelConfig parsed = model_config_parse(config, name);
    for (const TensorEntry& t : tensor_table(parsed)) tensors[t.name] = random_tensor(t, rng);
    BytesMap bytes;
    if (parsed.architecture == "GptOssForCausalLM") {
        const bool mxfp4 = config.contains("quantization_config") &&
                           config["quantization_config"].value("quant_method", "") == "mxfp4";
        gpt_oss_fuse(tensors, bytes, parsed, mxfp4);
    }
    write_safetensors(tmp / "model.safetensors", tensors, WriteType::BF16, bytes);
    write_text(tmp / "tokenizer.json", byte_level_tokenizer_json_text());
    const json tc = {{"chat_template", CHATML_TEMPLATE},
                     {"eos_token", "<|im_end|>"},
                     {"pad_token", "<|endoftext|>"},
                     {"bos_token", nullptr}};
    write_text(tmp / "tokenizer_config.json", tc.dump(2));
    write_text(tmp / "config.json", text);  // last: its presence marks a complete folder
    std::error_code ec;
    fs::rename(tmp, dir, ec);  // another process may have won the race
    fs::remove_all(tmp);
    return dir;
}

json small_arch_config(const std::string& preset) {
    const ModelConfig p = synth_preset(synth_preset_parse(preset));
    const int dim = 64, heads = 4;
    json j = {{"architectures", {p.architecture}},
              {"hidden_size", dim},
              {"num_hidden_layers", 2},
              {"num_attention_heads", heads},
              {"num_key_value_heads", p.n_kv_heads < p.n_heads ? heads / 2 : heads},
              {"vocab_size", 264},
              {"rope_theta", p.rope_theta},
              {"rms_norm_eps", p.rms_norm_eps},
              {"tie_word_embeddings", p.tie_embeddings},
              {"max_position_embeddings", 4096},
              {"bos_token_id", 259},
              {"eos_token_id", 261},
              {"hidden_act", "silu"},
              {"num_experts", 16},
              {"num_experts_per_tok", std::min(4, p.n_experts_active)},
              {"norm_topk_prob", p.norm_topk_prob}};
    if (p.architecture == "OlmoeForCausalLM") {
        j["intermediate_size"] = 32;
        j["clip_qkv"] = nullptr;
        return j;
    }
    if (p.head_dim * p.n_heads != p.dim) j["head_dim"] = 32;
    j["moe_intermediate_size"] = 32;
    j["intermediate_size"] = 96;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = json::array();
    if (p.shared_hidden_dim > 0) {
        j["shared_expert_intermediate_size"] = 128;
        j["qkv_bias"] = p.qkv_bias;
    }
    return j;
}

// Qwen3.5's layout (the language model in text_config of an image-text
// checkpoint) or Qwen3-Next's (flat, fused projections) at hidden size 64:
// four layers, the fourth gated attention, value heads twice the key heads.
json small_hybrid_config(bool next) {
    json t = {{"hidden_size", 64},
              {"num_hidden_layers", 4},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 32},
              {"layer_types", {"linear_attention", "linear_attention", "linear_attention", "full_attention"}},
              {"linear_conv_kernel_dim", 4},
              {"linear_num_key_heads", 2},
              {"linear_num_value_heads", 4},
              {"linear_key_head_dim", 16},
              {"linear_value_head_dim", 16},
              {"num_experts", 16},
              {"num_experts_per_tok", 4},
              {"moe_intermediate_size", 32},
              {"shared_expert_intermediate_size", 32},
              {"vocab_size", 264},
              {"rms_norm_eps", 1e-6},
              {"max_position_embeddings", 4096},
              {"bos_token_id", 259},
              {"eos_token_id", 261},
              {"tie_word_embeddings", false},
              {"hidden_act", "silu"}};
    if (next) {
        t["architectures"] = {"Qwen3NextForCausalLM"};
        t["rope_theta"] = 1e7;
        t["partial_rotary_factor"] = 0.25;
        t["norm_topk_prob"] = true;
        t["intermediate_size"] = 96;
        t["decoder_sparse_step"] = 1;
        t["mlp_only_layers"] = json::array();
        return t;
    }
    t["rope_parameters"] = {{"rope_type", "default"},
                            {"rope_theta", 1e7},
                            {"partial_rotary_factor", 0.25},
                            {"mrope_section", {2, 1, 1}},
                            {"mrope_interleaved", true}};
    return {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
            {"model_type", "qwen3_5_moe"},
            {"text_config", t},
            {"tie_word_embeddings", false}};
}

std::vector<std::pair<std::string, json>> hybrid_arch_configs() {
    return {{"qwen35-moe-mini's features", small_hybrid_config(false)},
            {"qwen3-next-mini's features", small_hybrid_config(true)}};
}

std::vector<std::pair<std::string, json>> gpt_oss_arch_configs() {
    json c = {{"architectures", {"GptOssForCausalLM"}},
              {"model_type", "gpt_oss"},
              {"hidden_size", 64},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 32},
              {"intermediate_size", 64},
              {"num_local_experts", 16},
              {"num_experts_per_tok", 4},
              {"experts_per_token", 4},
              {"layer_types", {"sliding_attention", "full_attention"}},
              {"sliding_window", 4},
              {"attention_bias", true},
              {"swiglu_limit", 7.0},
              {"rope_theta", 150000.0},
              {"rope_scaling",
               {{"rope_type", "yarn"},
                {"factor", 8.0},
                {"original_max_position_embeddings", 16},
                {"beta_fast", 4.0},
                {"beta_slow", 1.0},
                {"truncate", false}}},
              {"rms_norm_eps", 1e-5},
              {"vocab_size", 264},
              {"max_position_embeddings", 4096},
              {"bos_token_id", 259},
              {"eos_token_id", 261},
              {"tie_word_embeddings", false},
              {"hidden_act", "silu"}};
    json mxfp4 = c;
    mxfp4["swiglu_limit"] = 1.0;
    mxfp4["quantization_config"] = {
        {"quant_method", "mxfp4"},
        {"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
    return {{"gpt-oss's features, MXFP4 experts", mxfp4}, {"gpt-oss's features, bf16 experts", c}};
}

std::vector<std::pair<std::string, json>> all_arch_configs() {
    std::vector<std::pair<std::string, json>> out = small_arch_configs();
    for (auto& c : hybrid_arch_configs()) out.push_back(std::move(c));
    for (auto& c : gpt_oss_arch_configs()) out.push_back(std::move(c));
    return out;
}

std::vector<std::pair<std::string, json>> small_arch_configs() {
    std::vector<std::pair<std::string, json>> out;
    for (const char* preset : {"qwen3-moe-mini", "olmoe-mini", "qwen2-moe-mini"})
        out.emplace_back(preset, small_arch_config(preset));
    json q3 = small_arch_config("qwen3-moe-mini");
    q3["num_hidden_layers"] = 3;
    q3["mlp_only_layers"] = {0};
    out.emplace_back("qwen3-moe-mini, layer 0 dense", q3);
    json q2 = small_arch_config("qwen2-moe-mini");
    q2["num_hidden_layers"] = 3;
    q2["decoder_sparse_step"] = 2;
    out.emplace_back("qwen2-moe-mini, layers 0 and 2 dense", q2);
    // YaRN over an original context shorter than the test prompts (gpt-oss's
    // rope_scaling but for the context): its blend and attention factor in play.
    json yarn = small_arch_config("qwen3-moe-mini");
    yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 16},
                            {"beta_fast", 4.0}, {"beta_slow", 1.0}};
    out.emplace_back("qwen3-moe-mini, YaRN", yarn);
    return out;
}

Session arch_session(const nlohmann::json& config) {
    SessionOptions o;
    o.threads = 2;
    o.ctx = 256;
    return Session(load_model({test_checkpoint_dir("arch", config), o.threads}), o);
}
