// synth-model: presets and the writer of random-weight checkpoints in the
// exact Hugging Face layout of their architecture (Mixtral, Qwen3-MoE,
// Qwen2-MoE, OLMoE: config.json, tensors, tokenizer files), and the same
// weights made in memory.
// Weights come from a fast PRNG (splitmix64) seeded per tensor from (seed,
// tensor name), so the same seed always gives the same bytes; one function
// (synth_fill) makes any chunk of a tensor, for both. The writer streams to
// disk in small chunks (memory use stays a few MB whatever the model size),
// into "<out>.partial" renamed at the end; the in-memory weights are made on
// a thread pool, chunk by chunk. Must not load or run a model.
#include "engine/model/synth_model.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>
#include <tuple>
#include <unordered_map>

#include "base/errors.h"
#include "cpu_kernels/bf16.h"
#include "cpu_kernels/quant.h"
#include "cpu_kernels/thread_pool.h"
#include "embedded_files.h"
#include "engine/formats/gguf.h"
#include "engine/formats/safetensors.h"
#include "engine/model/tensor_table.h"
#include "engine/text/gguf_tokenizer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const SYNTH_MIXTRAL_CHAT_TEMPLATE =
    R"TPL({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})TPL";

namespace {

// Room left for config.json, tokenizer.model, the index and headers.
constexpr uint64_t SMALL_FILES_BYTES = uint64_t(4) << 20;
// Elements generated per write (a multiple of 4: one PRNG draw gives 4 values).
constexpr size_t CHUNK_ELEMENTS = size_t(1) << 20;
constexpr float SQRT3 = 1.7320508f;

// splitmix64: one add and two multiply-xorshift rounds per 64 random bits.
// The state only ever grows by GAMMA, so skipping ahead is one multiply:
// any chunk of a tensor can be generated on its own, in any order.
struct Rng {
    static constexpr uint64_t GAMMA = 0x9e3779b97f4a7c15ull;
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += GAMMA);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    void skip(uint64_t draws) { state += draws * GAMMA; }
};

Rng tensor_rng(uint64_t seed, const std::string& name) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name
    for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
    Rng r{seed ^ h};
    r.next();
    return r;
}

// out[i] = uniform(-a, a) + offset[(start + i) % cols] (offset may be null),
// 4 values per draw (16 bits each).
void fill_uniform(Rng& rng, float a, const float* offset, size_t cols, size_t start, bf16* out, size_t n) {
    const float k = a / 32768.0f;
    size_t col = cols ? start % cols : 0;
    for (size_t i = 0; i < n; i += 4) {
        uint64_t r = rng.next();
        size_t m = std::min<size_t>(4, n - i);
        for (size_t j = 0; j < m; j++) {
            float v = (float(int16_t(r >> (16 * j))) + 0.5f) * k;
            if (offset) {
                v += offset[col];
                if (++col == cols) col = 0;
            }
            out[i + j] = f32_to_bf16(v);
        }
    }
}

enum class Init {
    UNIFORM,   // uniform with standard deviation `scale`
    EMBED,     // uniform plus the shared direction every token has in common
    CENTERED,  // uniform around `center` (an RMSNorm weight: 1 +- a little; zero-centred: 0 +- a little)
    ROUTER,    // per-expert scale and bias, so experts differ in popularity
    // gpt-oss's MXFP4 experts in their Hugging Face form (U8 tensors):
    MXFP4_CODES,   // *_blocks: uniform random bytes (two e2m1 codes each)
    MXFP4_SCALES,  // *_scales: every byte `center`, the power of two that gives unit-RMS outputs
};

// RMS of the direction all embeddings share (the noise has RMS 1). It gives
// the hidden state a component the routers can read as a per-expert bias.
constexpr float COMMON_RMS = 0.5f;
// Router logit bias of the least and most favoured expert, at layer 0.
constexpr float ROUTER_BIAS = 0.6f;

std::vector<float> common_direction(uint64_t seed, int dim) {
    Rng rng = tensor_rng(seed, "synth.common_direction");
    std::vector<float> m(static_cast<size_t>(dim));
    const float k = SQRT3 * COMMON_RMS / 32768.0f;
    for (float& x : m) x = (float(int16_t(rng.next())) + 0.5f) * k;
    return m;
}

struct SynthTensor {
    TensorView view;  // name, dtype, shape, nbytes
    Init init = Init::UNIFORM;
    float scale = 0.0f;
    float center = 0.0f;                        // CENTERED
    TensorValues values = TensorValues::AS_IS;  // the in-memory weights hold what the loader would make of them
    int shard = 0;
    bool fused_experts = false;  // one of gpt-oss's fused expert tensors (no table entry of its own)
};

struct SynthInit {
    Init init;
    float scale;
    float center = 0.0f;
};

// Initialisation and scale of a tensor by its role. Matrix scales are
// 1/sqrt(fan_in) (fan_in = columns) so each projection keeps unit RMS;
// lm_head is larger so the logits have a standard deviation of about 2.5
// (peaked but not one-hot).
SynthInit synth_init(const TensorEntry& t) {
    const float fan_in = t.shape.size() == 2 ? 1.0f / std::sqrt(float(t.shape[1])) : 0.0f;
    // Biases near 0, but the delta net's dt_bias (below).
    if (tensor_role_is_bias(t.role) && t.role != TensorRole::LIN_DT_BIAS) return {Init::UNIFORM, 0.1f};
    switch (t.role) {
    case TensorRole::EMBED:
        return {Init::EMBED, 1.0f};
    case TensorRole::ATTN_NORM:
    case TensorRole::FFN_NORM:
    case TensorRole::Q_NORM:
    case TensorRole::K_NORM:
    case TensorRole::FINAL_NORM:
        // Zero-centred weights scale by 1 + w: the same norms either way.
        return {Init::CENTERED, 0.05f, t.values == TensorValues::PLUS_ONE ? 0.0f : 1.0f};
    case TensorRole::LIN_NORM:
        return {Init::CENTERED, 0.05f, 1.0f};
    // A causal conv of K taps keeping unit RMS; the decay
    // -exp(A_log) * softplus(a + dt_bias) around -0.15 a step (exp: 0.86),
    // with a spread between heads.
    case TensorRole::LIN_CONV:
        return {Init::UNIFORM, 1.0f / std::sqrt(float(t.shape.back()))};
    case TensorRole::LIN_A_LOG:
        return {Init::CENTERED, 0.3f, 1.0f};
    case TensorRole::LIN_DT_BIAS:
        return {Init::CENTERED, 0.5f, -3.0f};
    // Sink logits of the order of the scores (a sink takes a share of each
    // softmax without swamping it).
    case TensorRole::SINKS:
        return {Init::UNIFORM, 1.0f};
    case TensorRole::ROUTER:
        return {Init::ROUTER, fan_in};
    case TensorRole::LM_HEAD:
        return {Init::UNIFORM, 2.5f * fan_in};
    default:  // every other matrix (the biases: above)
        break;
    }
    return {Init::UNIFORM, fan_in};
}

SynthTensor synth_tensor(const TensorEntry& entry) {
    SynthTensor t;
    t.view.name = entry.name;
    t.view.dtype = DType::BF16;
    t.view.shape = entry.shape;
    t.view.nbytes = tensor_nbytes(DType::BF16, t.view.shape, t.view.name);
    const SynthInit init = synth_init(entry);
    t.init = init.init;
    t.scale = init.scale;
    t.center = init.center;
    t.values = entry.values;
    return t;
}

// Where a tensor goes in the files, as a sort key: embed; per layer the
// attention, the router, each expert's w1, w2, w3, then the post-attention
// norm; the final norm and lm_head. This writer's order differs from the
// table's load order and is kept so every seed keeps giving the same bytes.
std::tuple<int, int, int, int> synth_file_order(const TensorEntry& t, int n_layers) {
    const int block = t.role == TensorRole::EMBED ? 0 : t.layer >= 0 ? 1 + t.layer : 1 + n_layers;
    const int part = t.role == TensorRole::FFN_NORM ? 2 : t.expert >= 0 ? 1 : 0;
    const int matrix = t.role == TensorRole::EXPERT_W2 ? 1 : t.role == TensorRole::EXPERT_W3 ? 2 : 0;
    return {block, part, t.expert, matrix};
}

// gpt-oss's checkpoints keep a layer's experts fused, gate and up
// interleaved, in MXFP4 (engine/model/weights.cpp reads them so).
bool gpt_oss_layout(const ModelConfig& c) {
    return c.architecture == "GptOssForCausalLM";
}

// The e8m0 byte of an MXFP4 scale that gives a matrix of `fan_in` columns of
// uniform random e2m1 codes (RMS 2.93) outputs of about unit RMS.
uint8_t mxfp4_unit_scale(int64_t fan_in) {
    return uint8_t(127 + std::lround(std::log2(1.0 / (2.93 * std::sqrt(double(fan_in))))));
}

// The six fused tensors of layer l's experts as gpt-oss's Hugging Face files
// hold them: gate_up_proj (gate row i at 2i, up row i at 2i + 1) and
// down_proj as MXFP4 blocks and scales, and their biases.
std::vector<SynthTensor> gpt_oss_expert_tensors(const ModelConfig& c, int l) {
    const int64_t n = c.n_experts, hidden = c.hidden_dim, dim = c.dim;
    const std::string q = c.tensor_prefix + "layers." + std::to_string(l) + ".mlp.experts.";
    std::vector<SynthTensor> out;
    auto add = [&](const std::string& name, DType dtype, std::vector<int64_t> shape, Init init, float scale,
                   float center) {
        SynthTensor t;
        t.view.name = q + name;
        t.view.dtype = dtype;
        t.view.shape = std::move(shape);
        t.view.nbytes = tensor_nbytes(dtype, t.view.shape, t.view.name);
        t.init = init;
        t.scale = scale;
        t.center = center;
        t.fused_experts = true;
        out.push_back(std::move(t));
    };
    for (const auto& [stem, rows, cols] : {std::tuple{"gate_up_proj", 2 * hidden, dim}, std::tuple{"down_proj", dim, hidden}}) {
        add(std::string(stem) + "_blocks", DType::U8, {n, rows, cols / 32, 16}, Init::MXFP4_CODES, 0, 0);
        add(std::string(stem) + "_scales", DType::U8, {n, rows, cols / 32}, Init::MXFP4_SCALES, 0,
            float(mxfp4_unit_scale(cols)));
        add(std::string(stem) + "_bias", DType::BF16, {n, rows}, Init::UNIFORM, 0.1f, 0);
    }
    return out;
}

// Every tensor of the table, in file order, with its initialisation
// (gpt-oss's experts as its six fused tensors a layer).
std::vector<SynthTensor> synth_tensors(const ModelConfig& c) {
    std::vector<TensorEntry> table = tensor_table(c);
    std::stable_sort(table.begin(), table.end(), [&](const TensorEntry& a, const TensorEntry& b) {
        return synth_file_order(a, c.n_layers) < synth_file_order(b, c.n_layers);
    });
    std::vector<SynthTensor> ts;
    for (const TensorEntry& t : table) {
        if (gpt_oss_layout(c) && t.expert >= 0) {
            if (t.expert == 0 && t.role == TensorRole::EXPERT_W1)
                for (SynthTensor& f : gpt_oss_expert_tensors(c, t.layer)) ts.push_back(std::move(f));
            continue;
        }
        ts.push_back(synth_tensor(t));
    }
    return ts;
}

// Assigns shards greedily in order; returns the shard count.
int assign_shards(std::vector<SynthTensor>& ts, size_t max_shard_bytes) {
    int shard = 0;
    size_t in_shard = 0;
    for (SynthTensor& t : ts) {
        if (in_shard > 0 && in_shard + t.view.nbytes > max_shard_bytes) {
            shard++;
            in_shard = 0;
        }
        t.shard = shard;
        in_shard += t.view.nbytes;
    }
    return shard + 1;
}

std::string shard_name(int i, int n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, n);
    return buf;
}

class OutFile {
public:
    explicit OutFile(const fs::path& path) : path_(path), f_(std::fopen(path.string().c_str(), "wb")) {
        if (!f_) throw MoeError(path_.string() + ": cannot create (" + std::strerror(errno) + ")");
    }
    ~OutFile() {
        if (f_) std::fclose(f_);
    }
    OutFile(const OutFile&) = delete;
    OutFile& operator=(const OutFile&) = delete;
    void write(const void* data, size_t n) {
        if (n && std::fwrite(data, 1, n, f_) != n)
            throw MoeError(path_.string() + ": write failed (" + std::strerror(errno) + ")");
    }
    void close() {
        std::FILE* f = f_;
        f_ = nullptr;
        if (std::fclose(f) != 0) throw MoeError(path_.string() + ": write failed (" + std::strerror(errno) + ")");
    }

private:
    fs::path path_;
    std::FILE* f_;
};

// Router row e: noise with scale c_e in [0.7, 1.3], made orthogonal to the
// common direction, plus b_e * common scaled so the normalised hidden state's
// common part adds a logit bias b_e in [-ROUTER_BIAS, ROUTER_BIAS]. Scales
// and biases follow a seeded order, so some experts are clearly more popular
// than others. out: (n_experts, dim), the whole tensor.
void fill_router(Rng& rng, const SynthTensor& t, const std::vector<float>& common, bf16* out) {
    size_t n_rows = size_t(t.view.shape[0]), cols = size_t(t.view.shape[1]);
    std::vector<int> order(n_rows);
    for (size_t e = 0; e < n_rows; e++) order[e] = int(e);
    for (size_t e = n_rows; e > 1; e--) std::swap(order[e - 1], order[rng.next() % e]);
    double mm = 0;
    for (float x : common) mm += double(x) * x;
    // h = rmsnorm(noise + common) ~ (noise + common) / sqrt(1 + COMMON_RMS^2), so h . common ~ mm / that.
    double per_bias = std::sqrt(1.0 + double(COMMON_RMS) * COMMON_RMS) / mm;
    std::vector<float> row(cols);
    for (size_t e = 0; e < n_rows; e++) {
        double rank = n_rows > 1 ? double(order[e]) / double(n_rows - 1) : 0.5;
        double next_rank = n_rows > 1 ? double(order[(e + 1) % n_rows]) / double(n_rows - 1) : 0.5;
        double bias = ROUTER_BIAS * (2.0 * rank - 1.0);
        float a = SQRT3 * float(0.7 + 0.6 * next_rank) * t.scale / 32768.0f;
        for (size_t i = 0; i < cols; i += 4) {
            uint64_t r = rng.next();
            for (size_t j = 0; j < 4 && i + j < cols; j++) row[i + j] = (float(int16_t(r >> (16 * j))) + 0.5f) * a;
        }
        double along = 0;
        for (size_t i = 0; i < cols; i++) along += double(row[i]) * common[i];
        double k = bias * per_bias - along / mm;
        for (size_t i = 0; i < cols; i++) out[e * cols + i] = f32_to_bf16(float(row[i] + k * common[i]));
    }
}

// Elements [start, start + n) of a tensor's random values (row-major), the
// same whichever chunks they are asked in: start must be a multiple of 4 (one
// draw gives 4 values), and a router is only ever made whole (start 0, all of
// it). `common` is the shared embedding direction (dim,).
void synth_fill(const SynthTensor& t, uint64_t seed, const std::vector<float>& common, size_t start, bf16* out,
                size_t n) {
    Rng rng = tensor_rng(seed, t.view.name);
    if (t.init == Init::ROUTER) {
        if (start != 0 || n != t.view.nbytes / sizeof(bf16))
            throw MoeError("synth-model: " + t.view.name + ": a router is generated whole");
        fill_router(rng, t, common, out);
        return;
    }
    if (start % 4 != 0) throw MoeError("synth-model: " + t.view.name + ": chunk start not a multiple of 4");
    rng.skip(start / 4);
    const float* offset = nullptr;
    size_t cols = 0;
    if (t.init == Init::CENTERED) {
        offset = &t.center;
        cols = 1;
    } else if (t.init == Init::EMBED) {
        offset = common.data();
        cols = common.size();
    }
    fill_uniform(rng, SQRT3 * t.scale, offset, cols, start, out, n);
}

// Bytes [start, start + n) of a U8 tensor (MXFP4 blocks or scales), the
// same whichever chunks they are asked in; start a multiple of 8 (a draw
// gives 8 bytes).
void synth_fill_bytes(const SynthTensor& t, uint64_t seed, size_t start, uint8_t* out, size_t n) {
    if (t.init == Init::MXFP4_SCALES) {
        std::fill_n(out, n, uint8_t(t.center));
        return;
    }
    if (start % 8 != 0) throw MoeError("synth-model: " + t.view.name + ": chunk start not a multiple of 8");
    Rng rng = tensor_rng(seed, t.view.name);
    rng.skip(start / 8);
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t r = rng.next();
        for (size_t j = 0; j < 8 && i + j < n; j++) out[i + j] = uint8_t(r >> (8 * j));
    }
}

// Streams one tensor's random values to the file.
void write_tensor(OutFile& out, const SynthTensor& t, uint64_t seed, const std::vector<float>& common,
                  std::vector<bf16>& buf) {
    if (t.view.dtype == DType::U8) {
        std::vector<uint8_t> bytes(std::min(t.view.nbytes, CHUNK_ELEMENTS));
        for (size_t done = 0; done < t.view.nbytes;) {
            const size_t m = std::min(t.view.nbytes - done, bytes.size());
            synth_fill_bytes(t, seed, done, bytes.data(), m);
            out.write(bytes.data(), m);
            done += m;
        }
        return;
    }
    size_t n = t.view.nbytes / sizeof(bf16);
    size_t chunk = t.init == Init::ROUTER ? n : CHUNK_ELEMENTS;
    buf.resize(std::min(n, chunk));
    for (size_t done = 0; done < n;) {
        size_t m = std::min(n - done, chunk);
        synth_fill(t, seed, common, done, buf.data(), m);
        out.write(buf.data(), m * sizeof(bf16));
        done += m;
    }
}

void write_text(const fs::path& path, std::string_view text) {
    OutFile f(path);
    f.write(text.data(), text.size());
    f.close();
}

// A float as the shortest decimal that reads back as the same float (1e-05, not 9.99e-06).
double json_float(float x) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

// config.json's rope_scaling of a config (null: plain RoPE).
json rope_scaling_json(const RopeScaling& r) {
    if (r.type == RopeScaling::Type::NONE) return nullptr;
    const bool yarn = r.type == RopeScaling::Type::YARN;
    json j = {{"rope_type", yarn ? "yarn" : "linear"}, {"factor", json_float(r.factor)}};
    if (yarn) {
        j["original_max_position_embeddings"] = r.original_context;
        j["beta_fast"] = json_float(r.beta_fast);
        j["beta_slow"] = json_float(r.beta_slow);
        j["attention_factor"] = json_float(r.attention_factor);
        j["truncate"] = r.truncate;
    }
    return j;
}

const char* model_type(const ModelConfig& c) {
    if (c.architecture == "Qwen3MoeForCausalLM") return "qwen3_moe";
    if (c.architecture == "Qwen2MoeForCausalLM") return "qwen2_moe";
    if (c.architecture == "OlmoeForCausalLM") return "olmoe";
    if (c.architecture == "Qwen3_5MoeForConditionalGeneration") return "qwen3_5_moe";
    if (c.architecture == "Qwen3NextForCausalLM") return "qwen3_next";
    if (c.architecture == "GptOssForCausalLM") return "gpt_oss";
    return "mixtral";
}

bool mixtral_family(const ModelConfig& c) {
    return std::string_view(model_type(c)) == "mixtral";
}

json hybrid_config_json(const ModelConfig& c);
json gpt_oss_config_json(const ModelConfig& c);

json config_json(const ModelConfig& c) {
    if (gpt_oss_layout(c)) return gpt_oss_config_json(c);
    if (!c.layer_mixers.empty()) return hybrid_config_json(c);
    json j;
    j["architectures"] = {c.architecture};
    j["attention_dropout"] = 0.0;
    j["bos_token_id"] = c.bos_token_id;
    j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
    j["hidden_act"] = "silu";
    j["hidden_size"] = c.dim;
    j["initializer_range"] = 0.02;
    j["intermediate_size"] =
        model_type(c) == std::string_view("qwen3_moe") || model_type(c) == std::string_view("qwen2_moe")
            ? c.dense_hidden_dim
            : c.hidden_dim;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["model_type"] = model_type(c);
    j["num_attention_heads"] = c.n_heads;
    j["num_experts_per_tok"] = c.n_experts_active;
    j["num_hidden_layers"] = c.n_layers;
    j["num_key_value_heads"] = c.n_kv_heads;
    j["output_router_logits"] = false;
    j["rms_norm_eps"] = json_float(c.rms_norm_eps);
    j["rope_theta"] = json_float(c.rope_theta);
    j["tie_word_embeddings"] = c.tie_embeddings;
    j["torch_dtype"] = "bfloat16";
    j["use_cache"] = true;
    j["vocab_size"] = c.vocab_size;
    if (mixtral_family(c)) {
        j["num_local_experts"] = c.n_experts;
        j["router_aux_loss_coef"] = 0.02;
        j["sliding_window"] = nullptr;
        j["transformers_version"] = "4.36.0.dev0";
        if (c.head_dim != c.dim / c.n_heads) j["head_dim"] = c.head_dim;
        return j;
    }
    // The fields of Qwen3-30B-A3B's, Qwen1.5-MoE-A2.7B's and OLMoE-1B-7B's config.json.
    j["num_experts"] = c.n_experts;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["router_aux_loss_coef"] = 0.001;
    j["rope_scaling"] = rope_scaling_json(c.rope_scaling);
    j["transformers_version"] = "4.51.0";
    if (c.architecture == "OlmoeForCausalLM") {
        j["bos_token_id"] = nullptr;  // as OLMoE's: the parser takes the EOS id
        j["attention_bias"] = false;
        j["clip_qkv"] = nullptr;
        j["pad_token_id"] = 1;
        return j;
    }
    j["head_dim"] = c.head_dim;
    j["moe_intermediate_size"] = c.hidden_dim;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = c.dense_layers;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = c.n_layers;
    if (c.architecture == "Qwen3MoeForCausalLM") {
        j["attention_bias"] = false;
    } else {
        j["shared_expert_intermediate_size"] = c.shared_hidden_dim;
    }
    return j;
}

// Qwen3.5's config.json (the language model's fields in text_config; no
// vision tower written) or Qwen3-Next's (flat).
json hybrid_config_json(const ModelConfig& c) {
    json t;
    t["bos_token_id"] = c.bos_token_id;
    t["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
    t["hidden_act"] = "silu";
    t["hidden_size"] = c.dim;
    t["head_dim"] = c.head_dim;
    t["num_hidden_layers"] = c.n_layers;
    t["num_attention_heads"] = c.n_heads;
    t["num_key_value_heads"] = c.n_kv_heads;
    json types = json::array();
    for (MixerKind k : c.layer_mixers)
        types.push_back(k == MixerKind::ATTENTION ? "full_attention" : "linear_attention");
    t["layer_types"] = types;
    t["full_attention_interval"] = 4;
    t["linear_conv_kernel_dim"] = c.linear.conv_kernel;
    t["linear_key_head_dim"] = c.linear.head_k_dim;
    t["linear_value_head_dim"] = c.linear.head_v_dim;
    t["linear_num_key_heads"] = c.linear.n_k_heads;
    t["linear_num_value_heads"] = c.linear.n_v_heads;
    t["num_experts"] = c.n_experts;
    t["num_experts_per_tok"] = c.n_experts_active;
    t["moe_intermediate_size"] = c.hidden_dim;
    t["shared_expert_intermediate_size"] = c.shared_hidden_dim;
    t["norm_topk_prob"] = c.norm_topk_prob;
    t["max_position_embeddings"] = c.max_position_embeddings;
    t["rms_norm_eps"] = json_float(c.rms_norm_eps);
    t["tie_word_embeddings"] = c.tie_embeddings;
    t["vocab_size"] = c.vocab_size;
    t["attention_bias"] = false;
    t["attention_dropout"] = 0.0;
    t["initializer_range"] = 0.02;
    t["router_aux_loss_coef"] = 0.001;
    t["output_router_logits"] = false;
    t["use_cache"] = true;
    const double factor = double(c.rope_dim()) / c.head_dim;
    if (c.architecture == "Qwen3NextForCausalLM") {
        t["architectures"] = {c.architecture};
        t["model_type"] = "qwen3_next";
        t["rope_theta"] = json_float(c.rope_theta);
        t["partial_rotary_factor"] = factor;
        t["rope_scaling"] = rope_scaling_json(c.rope_scaling);
        t["intermediate_size"] = c.dense_hidden_dim;
        t["decoder_sparse_step"] = 1;
        t["mlp_only_layers"] = c.dense_layers;
        t["torch_dtype"] = "bfloat16";
        t["transformers_version"] = "4.57.0.dev0";
        return t;
    }
    t["model_type"] = "qwen3_5_moe_text";
    t["mtp_num_hidden_layers"] = c.n_mtp_layers;
    t["rope_parameters"] = {
        {"rope_type", "default"},
        {"rope_theta", json_float(c.rope_theta)},
        {"partial_rotary_factor", factor},
        {"mrope_section", {c.rope_dim() / 2 - 2 * (c.rope_dim() / 6), c.rope_dim() / 6, c.rope_dim() / 6}},
        {"mrope_interleaved", true}};
    t["dtype"] = "bfloat16";
    json j;
    j["architectures"] = {c.architecture};
    j["model_type"] = "qwen3_5_moe";
    j["text_config"] = t;
    j["tie_word_embeddings"] = c.tie_embeddings;
    j["transformers_version"] = "5.2.0";
    return j;
}

// gpt-oss-20b's config.json fields (its MXFP4 quantization_config included).
json gpt_oss_config_json(const ModelConfig& c) {
    json j;
    j["architectures"] = {c.architecture};
    j["attention_bias"] = c.o_bias;
    j["attention_dropout"] = 0.0;
    j["bos_token_id"] = c.bos_token_id;
    j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
    j["experts_per_token"] = c.n_experts_active;
    j["head_dim"] = c.head_dim;
    j["hidden_act"] = "silu";
    j["hidden_size"] = c.dim;
    j["initial_context_length"] = c.rope_scaling.original_context;
    j["initializer_range"] = 0.02;
    j["intermediate_size"] = c.hidden_dim;
    json types = json::array();
    for (int l = 0; l < c.n_layers; l++)
        types.push_back(c.layer_mixer(l) == MixerKind::SLIDING_ATTENTION ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["model_type"] = "gpt_oss";
    j["num_attention_heads"] = c.n_heads;
    j["num_experts_per_tok"] = c.n_experts_active;
    j["num_hidden_layers"] = c.n_layers;
    j["num_key_value_heads"] = c.n_kv_heads;
    j["num_local_experts"] = c.n_experts;
    j["output_router_logits"] = false;
    j["quantization_config"] = {
        {"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
        {"quant_method", "mxfp4"}};
    j["rms_norm_eps"] = json_float(c.rms_norm_eps);
    json rope = rope_scaling_json(c.rope_scaling);
    rope.erase("attention_factor");  // gpt-oss's config leaves it to the default 0.1 ln(factor) + 1
    j["rope_scaling"] = rope;
    j["rope_theta"] = json_float(c.rope_theta);
    j["router_aux_loss_coef"] = 0.9;
    j["sliding_window"] = c.sliding_window;
    j["swiglu_limit"] = json_float(c.ffn_act.limit);
    j["tie_word_embeddings"] = c.tie_embeddings;
    j["transformers_version"] = "4.55.0.dev0";
    j["use_cache"] = true;
    j["vocab_size"] = c.vocab_size;
    return j;
}

json generation_config_json(const ModelConfig& c) {
    json j;
    j["_from_model_config"] = true;
    j["bos_token_id"] = c.bos_token_id;
    j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
    j["transformers_version"] = "4.36.0.dev0";
    return j;
}

// The stand-in Qwen tokenizer's special tokens: GPT-2's <|endoftext|> (its
// own id 50256), then Qwen's ChatML markers as added tokens, then, from
// STANDIN_THINK, the thinking and tool markers Qwen3 / 3.5 add as plain
// (not special) added tokens, so that their templates' markers are one token
// each, as in the real tokenizers.
constexpr int STANDIN_ENDOFTEXT = 50256, STANDIN_IM_START = 50257, STANDIN_IM_END = 50258;
constexpr int STANDIN_THINK = 50259;
constexpr const char* STANDIN_PLAIN_ADDED[] = {"<think>",      "</think>",        "<tool_call>",
                                               "</tool_call>", "<tool_response>", "</tool_response>"};
// Its vocab_size: 50265 tokens padded to a multiple of 128 (as Qwen pads 151665 to 151936).
constexpr int STANDIN_VOCAB = 50304;

// A plain ChatML template for olmoe-mini (the stand-in tokenizer has no
// OLMoE chat markers): every message, a system one included, between
// <|im_start|>ROLE and <|im_end|>, the assistant's turn opened on request.
const char* const OLMOE_STANDIN_CHAT_TEMPLATE =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string embedded_text(const char* name) {
    std::string_view bytes = embedded_file(name);
    if (bytes.empty())
        throw MoeError(std::string("synth-model: the embedded file ") + name + " is missing from the binary");
    return std::string(bytes);
}

json tokenizer_config_json(const ModelConfig& c) {
    json j;
    if (!mixtral_family(c)) {
        // Qwen's tokenizer_config.json, with the stand-in's tokens.
        j["add_bos_token"] = false;
        j["add_prefix_space"] = false;
        j["bos_token"] = nullptr;
        j["chat_template"] = synth_chat_template(c);
        j["clean_up_tokenization_spaces"] = false;
        j["eos_token"] = c.architecture == "OlmoeForCausalLM" ? "<|endoftext|>" : "<|im_end|>";
        j["errors"] = "replace";
        j["model_max_length"] = c.max_position_embeddings;
        j["pad_token"] = "<|endoftext|>";
        j["split_special_tokens"] = false;
        j["tokenizer_class"] = "Qwen2Tokenizer";
        j["unk_token"] = nullptr;
        return j;
    }
    j["add_bos_token"] = true;
    j["add_eos_token"] = false;
    j["bos_token"] = "<s>";
    j["chat_template"] = SYNTH_MIXTRAL_CHAT_TEMPLATE;
    j["clean_up_tokenization_spaces"] = false;
    j["eos_token"] = "</s>";
    j["legacy"] = true;
    j["pad_token"] = nullptr;
    j["sp_model_kwargs"] = json::object();
    j["spaces_between_special_tokens"] = false;
    j["tokenizer_class"] = "LlamaTokenizer";
    j["unk_token"] = "<unk>";
    j["use_default_system_prompt"] = false;
    return j;
}

std::string tokenizer_bytes(const fs::path& tokenizer) {
    if (tokenizer.empty()) return std::string(synth_embedded_tokenizer());
    std::FILE* f = std::fopen(tokenizer.string().c_str(), "rb");
    if (!f) throw MoeError(tokenizer.string() + ": cannot open tokenizer (" + std::strerror(errno) + ")");
    std::string bytes;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, n);
    bool failed = std::ferror(f);
    std::fclose(f);
    if (failed || bytes.empty()) throw MoeError(tokenizer.string() + ": cannot read tokenizer (empty or unreadable)");
    return bytes;
}

ModelConfig mixtral_preset(int dim, int hidden, int layers, int heads, int kv_heads, int experts) {
    ModelConfig c;
    c.architecture = "MixtralForCausalLM";
    c.dim = dim;
    c.hidden_dim = hidden;
    c.dense_hidden_dim = hidden;
    c.n_layers = layers;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = dim / heads;
    c.vocab_size = 32000;
    c.n_experts = experts;
    c.n_experts_active = 2;
    c.norm_topk_prob = true;
    c.rope_theta = 1e6f;
    c.rms_norm_eps = 1e-5f;
    c.tie_embeddings = false;
    c.max_position_embeddings = 32768;
    c.bos_token_id = 1;
    c.eos_token_ids = {2};
    return c;
}

// The Qwen/OLMoE layout with the stand-in tokenizer's ids; Qwen3's per-head
// q/k norms and renormalised top-k (as its released config.json says).
ModelConfig qwen_preset(const char* arch, int dim, int moe_hidden, int layers, int heads, int kv_heads, int head_dim,
                        int experts, int active) {
    ModelConfig c;
    c.architecture = arch;
    c.dim = dim;
    c.hidden_dim = moe_hidden;
    c.dense_hidden_dim = 3 * dim;
    c.n_layers = layers;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = head_dim;
    c.vocab_size = STANDIN_VOCAB;
    c.n_experts = experts;
    c.n_experts_active = active;
    c.norm_topk_prob = true;
    c.qk_norm = QkNorm::PER_HEAD;
    c.rope_theta = 1e6f;
    c.rms_norm_eps = 1e-6f;
    c.tie_embeddings = false;
    c.max_position_embeddings = 32768;
    c.bos_token_id = STANDIN_ENDOFTEXT;
    c.eos_token_ids = {STANDIN_IM_END, STANDIN_ENDOFTEXT};
    return c;
}

// gpt-oss's layout: dim-wide experts of top-4 in MXFP4, 64-wide heads,
// sliding (window 128, even layers) and full attention, sinks, every bias,
// YaRN x32 over 4096 positions (not truncated), the clamped SwiGLU at 7;
// the stand-in tokenizer's ids.
ModelConfig gpt_oss_preset(int dim, int layers, int heads, int kv_heads, int experts) {
    ModelConfig c;
    c.architecture = "GptOssForCausalLM";
    c.dim = dim;
    c.hidden_dim = dim;
    c.dense_hidden_dim = dim;
    c.n_layers = layers;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = 64;
    c.vocab_size = STANDIN_VOCAB;
    c.n_experts = experts;
    c.n_experts_active = 4;
    c.norm_topk_prob = true;
    c.qkv_bias = c.o_bias = c.attn_sinks = c.router_bias = c.expert_bias = true;
    c.ffn_act.kind = FfnActivation::Kind::CLAMPED_SWIGLU;
    c.ffn_act.limit = 7.0f;
    c.rope_theta = 150000.0f;
    c.rms_norm_eps = 1e-5f;
    c.rope_scaling.type = RopeScaling::Type::YARN;
    c.rope_scaling.factor = 32.0f;
    c.rope_scaling.original_context = 4096;
    c.rope_scaling.beta_fast = 32.0f;
    c.rope_scaling.beta_slow = 1.0f;
    c.rope_scaling.attention_factor = 0.1f * std::log(32.0f) + 1.0f;
    c.rope_scaling.truncate = false;
    c.max_position_embeddings = 131072;
    c.sliding_window = 128;
    c.layer_mixers.assign(size_t(layers), MixerKind::ATTENTION);
    for (int l = 0; l < layers; l += 2) c.layer_mixers[size_t(l)] = MixerKind::SLIDING_ATTENTION;
    c.tie_embeddings = false;
    c.bos_token_id = STANDIN_ENDOFTEXT;
    c.eos_token_ids = {STANDIN_IM_END, STANDIN_ENDOFTEXT};
    return c;
}

// A Qwen3.5 / Qwen3-Next layout on a qwen_preset: every fourth layer gated
// attention (rotary on a quarter of each head, q/k norms), the others Gated
// DeltaNet with these heads; a shared expert as wide as a routed one;
// zero-centred norms; theta 1e7.
ModelConfig hybrid_preset(ModelConfig c, int n_k_heads, int n_v_heads, int head_k_dim, int head_v_dim) {
    c.attn_output_gate = true;
    c.norms_zero_centered = true;
    c.rotary_dim = c.head_dim / 4;
    c.rope_theta = 1e7f;
    c.shared_hidden_dim = c.hidden_dim;
    c.layer_mixers.assign(size_t(c.n_layers), MixerKind::GATED_DELTANET);
    for (int l = 3; l < c.n_layers; l += 4) c.layer_mixers[size_t(l)] = MixerKind::ATTENTION;
    c.linear.conv_kernel = 4;
    c.linear.n_k_heads = n_k_heads;
    c.linear.n_v_heads = n_v_heads;
    c.linear.head_k_dim = head_k_dim;
    c.linear.head_v_dim = head_v_dim;
    c.linear.fused_qkvz = c.linear.fused_ba = c.architecture == "Qwen3NextForCausalLM";
    if (c.architecture == "Qwen3_5MoeForConditionalGeneration") {
        c.tensor_prefix = "model.language_model.";
        c.dense_hidden_dim = c.hidden_dim;
        c.max_position_embeddings = 262144;
    }
    return c;
}

void write_model(const SynthOptions& o, const ModelConfig& c, std::vector<SynthTensor>& ts, int n_shards,
                 const std::string& tokenizer, const fs::path& dir) {
    std::vector<bf16> buf;
    const std::vector<float> common = common_direction(o.seed, c.dim);
    json weight_map = json::object();
    uint64_t total = 0;
    for (int s = 0; s < n_shards; s++) {
        std::string name = n_shards == 1 ? "model.safetensors" : shard_name(s, n_shards);
        std::vector<TensorView> views;
        for (const SynthTensor& t : ts) {
            if (t.shard != s) continue;
            views.push_back(t.view);
            weight_map[t.view.name] = name;
            total += t.view.nbytes;
        }
        OutFile out(dir / name);
        std::string header = safetensors_header(views);
        out.write(header.data(), header.size());
        for (const SynthTensor& t : ts)
            if (t.shard == s) write_tensor(out, t, o.seed, common, buf);
        out.close();
    }
    if (n_shards > 1) {
        json index;
        index["metadata"] = {{"total_size", total}};
        index["weight_map"] = weight_map;
        write_text(dir / "model.safetensors.index.json", index.dump(2) + "\n");
    }
    write_text(dir / "config.json", config_json(c).dump(2) + "\n");
    write_text(dir / "generation_config.json", generation_config_json(c).dump(2) + "\n");
    write_text(dir / "tokenizer_config.json", tokenizer_config_json(c).dump(2) + "\n");
    if (synth_uses_standin_tokenizer(c)) {
        write_text(dir / "tokenizer.json", tokenizer);
        return;
    }
    json special = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}};
    write_text(dir / "special_tokens_map.json", special.dump(2) + "\n");
    write_text(dir / "tokenizer.model", tokenizer);
}

}  // namespace

const char* synth_preset_name(SynthPreset preset) {
    switch (preset) {
    case SynthPreset::TINY:
        return "tiny";
    case SynthPreset::SMALL:
        return "small";
    case SynthPreset::MIXTRAL_MINI:
        return "mixtral-mini";
    case SynthPreset::MIXTRAL_8X7B:
        return "mixtral-8x7b";
    case SynthPreset::QWEN3_MOE_MINI:
        return "qwen3-moe-mini";
    case SynthPreset::QWEN3_30B_A3B:
        return "qwen3-30b-a3b";
    case SynthPreset::OLMOE_MINI:
        return "olmoe-mini";
    case SynthPreset::QWEN2_MOE_MINI:
        return "qwen2-moe-mini";
    case SynthPreset::QWEN35_MOE_MINI:
        return "qwen35-moe-mini";
    case SynthPreset::QWEN36_35B_A3B:
        return "qwen3.6-35b-a3b";
    case SynthPreset::QWEN3_NEXT_MINI:
        return "qwen3-next-mini";
    case SynthPreset::QWEN3_NEXT_80B_A3B:
        return "qwen3-next-80b-a3b";
    case SynthPreset::GPT_OSS_MINI:
        return "gpt-oss-mini";
    case SynthPreset::GPT_OSS_20B:
        return "gpt-oss-20b";
    case SynthPreset::GPT_OSS_120B:
        return "gpt-oss-120b";
    }
    return "?";
}

std::string synth_preset_list() {
    std::string names;
    for (SynthPreset p : SYNTH_PRESETS) names += (names.empty() ? "" : ", ") + std::string(synth_preset_name(p));
    return names;
}

std::optional<SynthPreset> synth_preset_find(std::string_view name) {
    for (SynthPreset p : SYNTH_PRESETS)
        if (name == synth_preset_name(p)) return p;
    return std::nullopt;
}

SynthPreset synth_preset_parse(std::string_view name) {
    if (std::optional<SynthPreset> p = synth_preset_find(name)) return *p;
    throw MoeError("synth-model: unknown preset '" + std::string(name) + "' (presets: " + synth_preset_list() + ")");
}

ModelConfig synth_preset(SynthPreset preset) {
    switch (preset) {
    case SynthPreset::TINY:
        return mixtral_preset(64, 128, 2, 4, 2, 4);
    case SynthPreset::SMALL:
        return mixtral_preset(256, 512, 4, 8, 2, 8);
    case SynthPreset::MIXTRAL_MINI:
        return mixtral_preset(1024, 3584, 8, 16, 4, 8);
    // The shapes of mixtral-8x7b-instruct-v0.1/config.json.
    case SynthPreset::MIXTRAL_8X7B:
        return mixtral_preset(4096, 14336, 32, 32, 8, 8);
    case SynthPreset::QWEN3_30B_A3B: {
        // Qwen3-30B-A3B's config.json; its vocabulary padded above the stand-in tokenizer.
        ModelConfig c = qwen_preset("Qwen3MoeForCausalLM", 2048, 768, 48, 32, 4, 128, 128, 8);
        c.vocab_size = 151936;
        c.dense_hidden_dim = 6144;
        c.max_position_embeddings = 40960;
        return c;
    }
    // Qwen3-30B-A3B scaled down: 128 experts of top-8, head_dim above
    // dim / n_heads, GQA 8:1, q/k norms per head; experts about 87 % of the weights.
    case SynthPreset::QWEN3_MOE_MINI:
        return qwen_preset("Qwen3MoeForCausalLM", 512, 256, 8, 16, 2, 64, 128, 8);
    // OLMoE-1B-7B scaled down: 64 experts of top-8, no GQA, full-width q/k norms, weights not renormalised.
    case SynthPreset::OLMOE_MINI: {
        ModelConfig c = qwen_preset("OlmoeForCausalLM", 512, 256, 8, 8, 8, 64, 64, 8);
        c.qk_norm = QkNorm::FULL;
        c.dense_hidden_dim = c.hidden_dim;  // OLMoE has no dense layers: intermediate_size is the experts'
        c.norm_topk_prob = false;
        c.rope_theta = 10000.0f;
        c.rms_norm_eps = 1e-5f;
        c.max_position_embeddings = 4096;
        c.bos_token_id = STANDIN_ENDOFTEXT;
        // Its template is ChatML, so a turn ends at <|im_end|> as well.
        c.eos_token_ids = {STANDIN_IM_END, STANDIN_ENDOFTEXT};
        return c;
    }
    // Qwen1.5-MoE-A2.7B scaled down: 60 experts of top-4 and a shared expert
    // four experts wide, q/k/v biases, weights not renormalised.
    case SynthPreset::QWEN2_MOE_MINI: {
        ModelConfig c = qwen_preset("Qwen2MoeForCausalLM", 512, 352, 8, 8, 8, 64, 60, 4);
        c.qk_norm = QkNorm::NONE;
        c.qkv_bias = true;
        c.norm_topk_prob = false;
        c.shared_hidden_dim = 4 * 352;
        c.dense_hidden_dim = 4 * 352;
        return c;
    }
    case SynthPreset::QWEN35_MOE_MINI:
        // Qwen3.5-35B-A3B scaled down: 64 experts of top-8 and a shared
        // expert, 8 layers (3 and 7 attention), value heads twice the key
        // heads, a quarter of each attention head rotary.
        return hybrid_preset(qwen_preset("Qwen3_5MoeForConditionalGeneration", 512, 128, 8, 8, 2, 64, 64, 8), 4, 8, 32,
                             32);
    case SynthPreset::QWEN3_NEXT_MINI:
        return hybrid_preset(qwen_preset("Qwen3NextForCausalLM", 512, 128, 8, 8, 2, 64, 64, 8), 4, 8, 32, 32);
    case SynthPreset::QWEN36_35B_A3B: {
        // Qwen3.6-35B-A3B's shapes (its text_config), the vocabulary padded above the stand-in tokenizer.
        ModelConfig c = hybrid_preset(
            qwen_preset("Qwen3_5MoeForConditionalGeneration", 2048, 512, 40, 16, 2, 256, 256, 8), 16, 32, 128, 128);
        c.vocab_size = 248320;
        return c;
    }
    case SynthPreset::QWEN3_NEXT_80B_A3B: {
        ModelConfig c =
            hybrid_preset(qwen_preset("Qwen3NextForCausalLM", 2048, 512, 48, 16, 2, 256, 512, 10), 16, 32, 128, 128);
        c.vocab_size = 151936;
        c.dense_hidden_dim = 5120;
        return c;
    }
    // gpt-oss-20b scaled down: 8 layers (4 sliding), 32 experts of 512, 8 heads over 2 kv heads.
    case SynthPreset::GPT_OSS_MINI:
        return gpt_oss_preset(512, 8, 8, 2, 32);
    // gpt-oss-20b's and gpt-oss-120b's shapes (their config.json), the vocabulary of o200k_harmony's size.
    case SynthPreset::GPT_OSS_20B: {
        ModelConfig c = gpt_oss_preset(2880, 24, 64, 8, 32);
        c.vocab_size = 201088;
        return c;
    }
    case SynthPreset::GPT_OSS_120B: {
        ModelConfig c = gpt_oss_preset(2880, 36, 64, 8, 128);
        c.vocab_size = 201088;
        return c;
    }
    }
    std::abort();
}

std::string synth_chat_template(const ModelConfig& c) {
    // Qwen3-Next's template is Qwen3's.
    if (c.architecture.rfind("Qwen3_5Moe", 0) == 0) return embedded_text("qwen3.5-chat-template.jinja");
    if (c.architecture == "Qwen3MoeForCausalLM" || c.architecture == "Qwen3NextForCausalLM")
        return embedded_text("qwen3-chat-template.jinja");
    if (c.architecture == "Qwen2MoeForCausalLM") return embedded_text("qwen2.5-chat-template.jinja");
    // The gpt-oss presets carry the stand-in tokenizer, which has no harmony tokens: ChatML.
    if (c.architecture == "OlmoeForCausalLM" || c.architecture == "GptOssForCausalLM")
        return OLMOE_STANDIN_CHAT_TEMPLATE;
    return SYNTH_MIXTRAL_CHAT_TEMPLATE;
}

bool synth_uses_standin_tokenizer(const ModelConfig& c) {
    return !mixtral_family(c);
}

std::string synth_standin_tokenizer_json() {
    const std::string_view gguf = embedded_file("ggml-vocab-gpt-2.gguf");
    if (gguf.empty())
        throw MoeError("synth-model: the embedded vocabulary ggml-vocab-gpt-2.gguf is missing from the binary");
    const std::string source = "embedded ggml-vocab-gpt-2.gguf";
    const GgufHeader header = gguf_parse_header(gguf, gguf.size(), source);
    HfSpecialTokens specials;
    json doc = gguf_bpe_tokenizer_json(header.metadata, source, &specials);
    if (doc["model"]["vocab"].size() != size_t(STANDIN_IM_START))
        throw MoeError(source + ": expected " + std::to_string(STANDIN_IM_START) + " tokens, found " +
                       std::to_string(doc["model"]["vocab"].size()));
    auto add = [&](int id, const char* text, bool special) {
        doc["model"]["vocab"][text] = id;
        doc["added_tokens"].push_back({{"id", id},
                                       {"content", text},
                                       {"single_word", false},
                                       {"lstrip", false},
                                       {"rstrip", false},
                                       {"normalized", false},
                                       {"special", special}});
    };
    add(STANDIN_IM_START, "<|im_start|>", true);
    add(STANDIN_IM_END, "<|im_end|>", true);
    int id = STANDIN_THINK;
    for (const char* text : STANDIN_PLAIN_ADDED) add(id++, text, false);
    static_assert(STANDIN_THINK + std::size(STANDIN_PLAIN_ADDED) <= STANDIN_VOCAB);
    doc["version"] = "1.0";
    return doc.dump();
}

std::string_view synth_embedded_tokenizer() {
    std::string_view bytes = embedded_file("mistral-v1.model");
    if (bytes.empty())
        throw MoeError("synth-model: the embedded tokenizer mistral-v1.model is missing from the binary");
    return bytes;
}

uint64_t synth_memory_bytes(const ModelConfig& config) {
    uint64_t total = 0;
    for (const TensorEntry& t : tensor_table(config)) {
        uint64_t n = 1;
        for (int64_t d : t.shape) n *= uint64_t(d);
        if (gpt_oss_layout(config) && t.expert >= 0 && t.shape.size() == 2)
            total += n / 32 * sizeof(BlockMXFP4);  // gpt-oss's experts stay MXFP4
        else
            total += n * (t.shape.size() != 2 ? sizeof(float) : sizeof(bf16));
    }
    return total;
}

ModelWeights synth_weights(const ModelConfig& c, uint64_t seed, int threads) {
    const std::vector<SynthTensor> ts = synth_tensors(c);
    const std::vector<float> common = common_direction(seed, c.dim);
    ModelWeights w;
    // One allocation per tensor in the huge-page arena, as the GGUF loader
    // lays out its matrices (the experts stream at the bus speed the read
    // ceiling measures; 4 KiB pages would stop the prefetchers at every
    // page). The arena's pages are zero until touched: the generating
    // threads touch every page first, so page faults are spread over them.
    std::vector<void*> out(ts.size());
    std::unordered_map<std::string, const void*> by_name;
    // Work items: a router or a norm vector whole, any other tensor in chunks.
    struct Item {
        size_t tensor, start, n;
    };
    std::vector<Item> items;
    // gpt-oss's fused expert tensors by name; they are made expert by expert below.
    std::unordered_map<std::string, const SynthTensor*> fused;
    for (size_t i = 0; i < ts.size(); i++) {
        if (ts[i].fused_experts) {
            fused[ts[i].view.name] = &ts[i];
            continue;
        }
        const size_t n = ts[i].view.nbytes / sizeof(bf16);
        const bool vector = ts[i].view.shape.size() != 2;  // norms, biases, a conv's taps: fp32
        out[i] = w.arena.alloc(n * (vector ? sizeof(float) : sizeof(bf16)));
        by_name[ts[i].view.name] = out[i];
        const size_t chunk = ts[i].init == Init::ROUTER || vector ? n : CHUNK_ELEMENTS;
        for (size_t start = 0; start < n; start += chunk) items.push_back({i, start, std::min(chunk, n - start)});
    }
    // gpt-oss: each expert's matrices in the layout the loader gives its
    // Hugging Face files (MXFP4, gate and up rows apart), converted row by
    // row from the bytes synth_fill_bytes writes, and its biases from the
    // fused bias rows: no fused copy is held. Work items after the others;
    // expert e of layer l is gpt_oss[l * n_experts + e] (every layer is MoE).
    struct GptOssExpert {
        int expert;
        const SynthTensor *gate_up_blocks, *gate_up_scales, *gate_up_bias, *down_blocks, *down_scales, *down_bias;
        BlockMXFP4 *w1, *w3, *w2;
        float *b1, *b3, *b2;
    };
    std::vector<GptOssExpert> gpt_oss;
    const int64_t hidden = c.hidden_dim, dim = c.dim;
    if (gpt_oss_layout(c)) {
        auto matrix = [&](int64_t rows, int64_t cols) {
            return reinterpret_cast<BlockMXFP4*>(w.arena.alloc(size_t(rows * cols / 32) * sizeof(BlockMXFP4)));
        };
        for (int l = 0; l < c.n_layers; l++) {
            const std::string q = c.tensor_prefix + "layers." + std::to_string(l) + ".mlp.experts.";
            for (int e = 0; e < c.n_experts; e++) {
                GptOssExpert x{e,
                               fused.at(q + "gate_up_proj_blocks"),
                               fused.at(q + "gate_up_proj_scales"),
                               fused.at(q + "gate_up_proj_bias"),
                               fused.at(q + "down_proj_blocks"),
                               fused.at(q + "down_proj_scales"),
                               fused.at(q + "down_proj_bias"),
                               matrix(hidden, dim),
                               matrix(hidden, dim),
                               matrix(dim, hidden),
                               reinterpret_cast<float*>(w.arena.alloc(size_t(2 * hidden + dim) * sizeof(float))),
                               nullptr,
                               nullptr};
                x.b3 = x.b1 + hidden;
                x.b2 = x.b3 + hidden;
                gpt_oss.push_back(x);
            }
        }
    }
    auto make_gpt_oss_expert = [&](const GptOssExpert& x, std::vector<uint8_t>& qs, std::vector<uint8_t>& es,
                                   std::vector<bf16>& bias) {
        const int64_t e = x.expert;
        // Row r of a matrix from row `src` of the fused blocks / scales (nb blocks a row).
        auto row = [&](const SynthTensor* blocks, const SynthTensor* scales, int64_t src, int64_t nb, BlockMXFP4* dst) {
            qs.resize(size_t(nb) * 16);
            es.resize(size_t(nb));
            synth_fill_bytes(*blocks, seed, size_t(src * nb * 16), qs.data(), qs.size());
            synth_fill_bytes(*scales, seed, size_t(src * nb), es.data(), es.size());
            mxfp4_from_hf(dst, qs.data(), es.data(), size_t(nb));
        };
        for (int64_t r = 0; r < hidden; r++) {
            row(x.gate_up_blocks, x.gate_up_scales, e * 2 * hidden + 2 * r, dim / 32, x.w1 + r * (dim / 32));
            row(x.gate_up_blocks, x.gate_up_scales, e * 2 * hidden + 2 * r + 1, dim / 32, x.w3 + r * (dim / 32));
        }
        for (int64_t r = 0; r < dim; r++)
            row(x.down_blocks, x.down_scales, e * dim + r, hidden / 32, x.w2 + r * (hidden / 32));
        bias.resize(size_t(2 * hidden));
        synth_fill(*x.gate_up_bias, seed, common, size_t(e * 2 * hidden), bias.data(), bias.size());
        for (int64_t i = 0; i < hidden; i++) {
            x.b1[i] = bf16_to_f32(bias[size_t(2 * i)]);
            x.b3[i] = bf16_to_f32(bias[size_t(2 * i + 1)]);
        }
        bias.resize(size_t(dim));
        synth_fill(*x.down_bias, seed, common, size_t(e * dim), bias.data(), bias.size());
        for (int64_t i = 0; i < dim; i++) x.b2[i] = bf16_to_f32(bias[size_t(i)]);
    };
    std::atomic<size_t> next{0};
    std::mutex error_mutex;
    std::exception_ptr error;
    ThreadPool pool(std::max(1, threads));
    const size_t n_work = items.size() + gpt_oss.size();
    pool.run([&](int) {
        std::vector<bf16> vector_buf;  // a norm vector before its fp32 conversion
        std::vector<uint8_t> qs, es;
        try {
            for (size_t k; (k = next.fetch_add(1)) < n_work;) {
                if (k >= items.size()) {
                    make_gpt_oss_expert(gpt_oss[k - items.size()], qs, es, vector_buf);
                    continue;
                }
                const Item& it = items[k];
                const SynthTensor& t = ts[it.tensor];
                if (t.view.shape.size() != 2) {
                    vector_buf.resize(it.n);
                    synth_fill(t, seed, common, it.start, vector_buf.data(), it.n);
                    float* dst = static_cast<float*>(out[it.tensor]) + it.start;
                    for (size_t j = 0; j < it.n; j++) dst[j] = tensor_value(bf16_to_f32(vector_buf[j]), t.values);
                } else {
                    synth_fill(t, seed, common, it.start, static_cast<bf16*>(out[it.tensor]) + it.start, it.n);
                }
            }
        } catch (...) {
            std::lock_guard lock(error_mutex);
            if (!error) error = std::current_exception();
            next.store(n_work);
        }
    });
    if (error) std::rethrow_exception(error);
    // After the values are there: a fused projection is split by copying rows.
    weights_assign(w, c, [&](const TensorEntry& t) {
        if (!gpt_oss.empty() && t.expert >= 0) {
            const GptOssExpert& x = gpt_oss[size_t(t.layer) * size_t(c.n_experts) + size_t(t.expert)];
            switch (t.role) {
            case TensorRole::EXPERT_W1: return weight_view(DType::MXFP4, x.w1, hidden, dim);
            case TensorRole::EXPERT_W3: return weight_view(DType::MXFP4, x.w3, hidden, dim);
            case TensorRole::EXPERT_W2: return weight_view(DType::MXFP4, x.w2, dim, hidden);
            case TensorRole::EXPERT_B1: return weight_view(DType::F32, x.b1, 1, hidden);
            case TensorRole::EXPERT_B3: return weight_view(DType::F32, x.b3, 1, hidden);
            case TensorRole::EXPERT_B2: return weight_view(DType::F32, x.b2, 1, dim);
            default: break;
            }
        }
        const void* p = by_name.at(t.name);
        if (t.shape.size() == 2) return weight_view(DType::BF16, p, t.shape[0], t.shape[1]);
        const int64_t rows = t.shape.size() == 1 ? 1 : t.shape[0];
        return weight_view(DType::F32, p, rows, t.shape.back());
    });
    return w;
}

uint64_t synth_disk_bytes(const ModelConfig& config) {
    std::vector<SynthTensor> ts = synth_tensors(config);
    uint64_t total = SMALL_FILES_BYTES;
    for (const SynthTensor& t : ts) total += t.view.nbytes + t.view.name.size() + 128;  // data + header entry
    return total;
}

void synth_check_free_space(const fs::path& out, uint64_t bytes) {
    fs::path probe = fs::absolute(out);
    std::error_code ec;
    while (!fs::exists(probe, ec) && probe.has_parent_path() && probe != probe.parent_path())
        probe = probe.parent_path();
    struct statvfs st;
    if (::statvfs(probe.string().c_str(), &st) != 0)
        throw MoeError(out.string() + ": cannot check free disk space (" + std::strerror(errno) + ")");
    uint64_t avail = uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
    if (avail < bytes) {
        char msg[160];
        std::snprintf(msg, sizeof msg, ": not enough free disk space: needs %.1f GB, %.1f GB available", bytes / 1e9,
                      avail / 1e9);
        throw MoeError(out.string() + msg);
    }
}

void synth_model_write(const SynthOptions& o) {
    ModelConfig c = synth_preset(o.preset);
    if (o.out.empty()) throw MoeError("synth-model: no output folder given");
    if (o.max_shard_bytes == 0) throw MoeError("synth-model: max_shard_bytes must be positive");
    fs::path out = o.out.lexically_normal();
    if (!out.has_filename()) out = out.parent_path();  // "dir/" -> "dir"
    std::error_code ec;
    if (fs::exists(out, ec)) {
        if (!fs::is_directory(out, ec)) throw MoeError(out.string() + ": exists and is not a folder");
        if (!fs::is_empty(out, ec)) throw MoeError(out.string() + ": exists and is not empty; refusing to overwrite");
    }
    if (synth_uses_standin_tokenizer(c) && !o.tokenizer.empty())
        throw MoeError("synth-model: a tokenizer file (SentencePiece) is for the Mixtral presets only; preset '" +
                       std::string(synth_preset_name(o.preset)) + "' writes its own tokenizer.json");
    std::string tokenizer =
        synth_uses_standin_tokenizer(c) ? synth_standin_tokenizer_json() : tokenizer_bytes(o.tokenizer);
    std::vector<SynthTensor> ts = synth_tensors(c);
    int n_shards = assign_shards(ts, o.max_shard_bytes);

    // The folder first: where none can be made (/proc/x, a read-only mount)
    // that is the problem to report, not the free space statvfs sees there.
    fs::path partial = out.string() + ".partial";
    fs::remove_all(partial, ec);  // left over from an interrupted run
    fs::create_directories(partial, ec);
    if (ec) throw MoeError(out.string() + ": cannot create a folder there (" + ec.message() + ")");
    try {
        synth_check_free_space(out, synth_disk_bytes(c) + tokenizer.size());
        write_model(o, c, ts, n_shards, tokenizer, partial);
        fs::rename(partial, out);  // replaces an empty `out` folder
    } catch (const fs::filesystem_error& e) {
        fs::remove_all(partial, ec);
        throw MoeError(out.string() + ": " + e.code().message());
    } catch (...) {
        fs::remove_all(partial, ec);
        throw;
    }
}
