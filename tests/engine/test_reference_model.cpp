// Self-tests of the reference forward pass (tests/support/reference_model):
// a case computed by hand, causality, routing renormalisation, GQA against
// the equivalent full multi-head model, the RoPE convention and its
// relative-position property, dtypes, shards, tied and dense variants, load
// errors, and the Qwen3-MoE / Qwen2-MoE / OLMoE features each against an
// equivalent model it must equal (per-head and full-width q/k norms,
// unnormalised top-k, the gated shared expert, q/k/v/o biases, clip_qkv,
// dense layers among sparse ones) and each architecture's defaults.
// Checkpoints are small hand-made ones written here with the tests' own
// safetensors writer (write_safetensors, tests/support/checkpoint_writer.h,
// no engine code), so these tests depend on nothing else in the tree.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "checkpoint_writer.h"
#include "reference_model.h"
#include "test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct Spec {
    int dim = 8;
    int hidden = 6;
    int layers = 2;
    int heads = 2;
    int kv_heads = 1;
    int head_dim = 4;
    int vocab = 16;
    int experts = 4;  // 0 = dense Mistral
    int active = 2;
    bool tie = false;
    double theta = 10000.0;
    double eps = 1e-5;
    // "" = Mixtral (Mistral without experts); else Qwen3MoeForCausalLM,
    // Qwen2MoeForCausalLM or OlmoeForCausalLM, with the fields below.
    std::string arch;
    int moe_hidden = 6;         // moe_intermediate_size (Qwen)
    int shared_hidden = 5;      // shared_expert_intermediate_size (Qwen2)
    bool norm_topk = false;     // norm_topk_prob
    int sparse_step = 1;        // decoder_sparse_step (Qwen)
    std::vector<int> mlp_only;  // mlp_only_layers (Qwen)
    bool bias = false;          // Qwen2 qkv_bias; attention_bias of the others
};

bool is_qwen(const Spec& s) {
    return s.arch == "Qwen3MoeForCausalLM" || s.arch == "Qwen2MoeForCausalLM";
}

// Whether layer l of s is sparse (Qwen: decoder_sparse_step, mlp_only_layers).
bool sparse_layer(const Spec& s, int l) {
    if (s.experts == 0) return false;
    if (!is_qwen(s)) return true;
    return (l + 1) % s.sparse_step == 0 && std::find(s.mlp_only.begin(), s.mlp_only.end(), l) == s.mlp_only.end();
}

json config_of(const Spec& s) {
    json j = {{"hidden_size", s.dim},
              {"intermediate_size", s.hidden},
              {"num_hidden_layers", s.layers},
              {"num_attention_heads", s.heads},
              {"num_key_value_heads", s.kv_heads},
              {"head_dim", s.head_dim},
              {"vocab_size", s.vocab},
              {"rope_theta", s.theta},
              {"rms_norm_eps", s.eps},
              {"tie_word_embeddings", s.tie}};
    if (!s.arch.empty()) {
        j["architectures"] = {s.arch};
        j["num_experts"] = s.experts;
        j["num_experts_per_tok"] = s.active;
        j["norm_topk_prob"] = s.norm_topk;
        if (is_qwen(s)) {
            j["moe_intermediate_size"] = s.moe_hidden;
            j["decoder_sparse_step"] = s.sparse_step;
            j["mlp_only_layers"] = s.mlp_only;
        }
        if (s.arch == "Qwen2MoeForCausalLM") {
            j["shared_expert_intermediate_size"] = s.shared_hidden;
            j["qkv_bias"] = s.bias;
        } else {
            j["attention_bias"] = s.bias;
        }
    } else if (s.experts > 0) {
        j["architectures"] = {"MixtralForCausalLM"};
        j["num_local_experts"] = s.experts;
        j["num_experts_per_tok"] = s.active;
    } else {
        j["architectures"] = {"MistralForCausalLM"};
    }
    return j;
}

// Values k/128 (and norms 1 + k/64): exact in F32, BF16 and F16.
TensorMap random_weights(const Spec& s, uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto tensor = [&](std::vector<int64_t> shape, int range = 40) {
        TestTensor t{shape, {}};
        size_t n = 1;
        for (auto d : shape) n *= size_t(d);
        for (size_t i = 0; i < n; ++i) t.data.push_back(float(int(rng() % (2 * range + 1)) - range) / 128.0f);
        return t;
    };
    auto norm = [&](int64_t n) {
        TestTensor t{{n}, {}};
        for (int64_t i = 0; i < n; ++i) t.data.push_back(1.0f + float(int(rng() % 17) - 8) / 64.0f);
        return t;
    };
    auto mlp = [&](TensorMap& m, const std::string& q, int hidden) {
        m[q + "gate_proj.weight"] = tensor({hidden, s.dim});
        m[q + "up_proj.weight"] = tensor({hidden, s.dim});
        m[q + "down_proj.weight"] = tensor({s.dim, hidden});
    };
    const int q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
    TensorMap m;
    m["model.embed_tokens.weight"] = tensor({s.vocab, s.dim}, 128);
    for (int l = 0; l < s.layers; ++l) {
        std::string p = "model.layers." + std::to_string(l) + ".";
        m[p + "input_layernorm.weight"] = norm(s.dim);
        m[p + "self_attn.q_proj.weight"] = tensor({q_dim, s.dim}, 96);
        m[p + "self_attn.k_proj.weight"] = tensor({kv_dim, s.dim}, 96);
        m[p + "self_attn.v_proj.weight"] = tensor({kv_dim, s.dim});
        m[p + "self_attn.o_proj.weight"] = tensor({s.dim, q_dim});
        m[p + "post_attention_layernorm.weight"] = norm(s.dim);
        if (s.bias) {
            m[p + "self_attn.q_proj.bias"] = tensor({q_dim}, 64);
            m[p + "self_attn.k_proj.bias"] = tensor({kv_dim}, 64);
            m[p + "self_attn.v_proj.bias"] = tensor({kv_dim}, 64);
            if (s.arch != "Qwen2MoeForCausalLM") m[p + "self_attn.o_proj.bias"] = tensor({s.dim}, 64);
        }
        if (s.arch == "Qwen3MoeForCausalLM" || s.arch == "OlmoeForCausalLM") {
            const bool per_head = s.arch == "Qwen3MoeForCausalLM";
            m[p + "self_attn.q_norm.weight"] = norm(per_head ? s.head_dim : q_dim);
            m[p + "self_attn.k_norm.weight"] = norm(per_head ? s.head_dim : kv_dim);
        }
        if (s.arch.empty() && s.experts > 0) {
            m[p + "block_sparse_moe.gate.weight"] = tensor({s.experts, s.dim}, 128);
            for (int e = 0; e < s.experts; ++e) {
                std::string q = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
                m[q + "w1.weight"] = tensor({s.hidden, s.dim});
                m[q + "w3.weight"] = tensor({s.hidden, s.dim});
                m[q + "w2.weight"] = tensor({s.dim, s.hidden});
            }
        } else if (sparse_layer(s, l)) {
            m[p + "mlp.gate.weight"] = tensor({s.experts, s.dim}, 128);
            for (int e = 0; e < s.experts; ++e)
                mlp(m, p + "mlp.experts." + std::to_string(e) + ".", is_qwen(s) ? s.moe_hidden : s.hidden);
            if (s.arch == "Qwen2MoeForCausalLM") {
                mlp(m, p + "mlp.shared_expert.", s.shared_hidden);
                m[p + "mlp.shared_expert_gate.weight"] = tensor({1, s.dim}, 128);
            }
        } else {
            mlp(m, p + "mlp.", s.hidden);
        }
    }
    m["model.norm.weight"] = norm(s.dim);
    if (!s.tie) m["lm_head.weight"] = tensor({s.vocab, s.dim}, 128);
    return m;
}

// Writes config.json and the weights, as one file or as n_shards shards
// with an index.
fs::path write_model(const std::string& tag, const json& config, const TensorMap& tensors,
                     WriteType type = WriteType::F32, int n_shards = 1) {
    fs::path dir = test_temp_dir(tag);
    std::ofstream(dir / "config.json") << config.dump(2);
    if (n_shards == 1) {
        write_safetensors(dir / "model.safetensors", tensors, type);
        return dir;
    }
    std::vector<TensorMap> shards(n_shards);
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
    int i = 0;
    for (const auto& [name, t] : tensors) {
        int s = i++ % n_shards;
        char file[64];
        std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        shards[s][name] = t;
        index["weight_map"][name] = file;
    }
    for (int s = 0; s < n_shards; ++s) {
        char file[64];
        std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        write_safetensors(dir / file, shards[s], type);
    }
    std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
    return dir;
}

ReferenceModel random_model(const Spec& s, uint64_t seed, const std::string& tag) {
    return ReferenceModel::load(write_model(tag, config_of(s), random_weights(s, seed)));
}

void require_close(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b,
                   double tol = 1e-12) {
    REQUIRE(a.size() == b.size());
    for (size_t t = 0; t < a.size(); ++t) {
        REQUIRE(a[t].size() == b[t].size());
        for (size_t i = 0; i < a[t].size(); ++i) {
            INFO("position " << t << " logit " << i);
            REQUIRE(a[t][i] == Approx(b[t][i]).epsilon(0).margin(tol));
        }
    }
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

TestTensor zeros(std::vector<int64_t> shape) {
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    return {shape, std::vector<float>(n, 0.0f)};
}

}  // namespace

TEST_CASE("reference: a model whose logits are computed by hand", "[reference]") {
    // dim 8, 2 heads sharing 1 kv head (head_dim 4), 3 experts top-2, vocab 16.
    // Embeddings repeat with period 4, v = h[0..4] and o = identity, so the
    // attention output of both heads adds (attn, attn) to the residual.
    // q = k = (h0, h1, 0, 0) exercises RoPE with frequencies 1 and 0.01.
    Spec s;
    s.layers = 1;
    s.hidden = 4;
    s.experts = 3;
    s.active = 2;
    TensorMap w = random_weights(s, 3);  // random leftovers must not matter
    const std::map<int, std::vector<float>> rows = {
        {3, {1, 2, -1, 0.5f}}, {7, {3, -1, 0, 2}}, {11, {0.5f, 0.25f, 2, -3}}};
    for (const auto& [token, r] : rows) {
        for (int i = 0; i < 8; ++i) w["model.embed_tokens.weight"].data[token * 8 + i] = r[i % 4];
    }
    const std::string p = "model.layers.0.";
    w[p + "input_layernorm.weight"].data.assign(8, 1.0f);
    w[p + "post_attention_layernorm.weight"].data.assign(8, 0.5f);
    w["model.norm.weight"].data.assign(8, 1.0f);
    auto set = [&](const std::string& name, std::vector<int64_t> shape, auto value) {
        TestTensor t = zeros(shape);
        for (int64_t r = 0; r < shape[0]; ++r) {
            for (int64_t c = 0; c < shape[1]; ++c) t.data[r * shape[1] + c] = value(int(r), int(c));
        }
        w[name] = t;
    };
    set(p + "self_attn.q_proj.weight", {8, 8}, [](int r, int c) { return float((r % 4) < 2 && c == r % 4); });
    set(p + "self_attn.k_proj.weight", {4, 8}, [](int r, int c) { return float(r < 2 && c == r); });
    set(p + "self_attn.v_proj.weight", {4, 8}, [](int r, int c) { return float(c == r); });
    set(p + "self_attn.o_proj.weight", {8, 8}, [](int r, int c) { return float(c == r); });
    // Router logits (h2[0], 0, -h2[0]): experts 0 and 1 with h2[0] > 0.
    set(p + "block_sparse_moe.gate.weight", {3, 8}, [](int r, int c) { return c == 0 ? float(1 - r) : 0.0f; });
    for (int e = 0; e < 2; ++e) {
        const std::string q = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        set(q + "w1.weight", {4, 8}, [](int r, int c) { return float(c == r); });
        set(q + "w3.weight", {4, 8}, [](int r, int c) { return c == r ? 0.5f : 0.0f; });  // up = gate / 2
        const float scale = e == 0 ? 1.0f : -2.0f;
        set(q + "w2.weight", {8, 4}, [scale](int r, int c) { return c == r ? scale : 0.0f; });
    }
    set("lm_head.weight", {16, 8}, [](int r, int c) { return c == r % 8 ? (r < 8 ? 1.0f : -1.0f) : 0.0f; });
    ReferenceModel model = ReferenceModel::load(write_model("ref-hand", config_of(s), w));

    const std::vector<int> tokens = {7, 3, 11, 3};
    ReferenceRouting routing;
    auto logits = model.forward(tokens, &routing);

    // The same computation written out for this special case.
    const double eps = 1e-5;
    auto rms = [&](const std::vector<double>& x) {
        double ss = 0;
        for (double v : x) ss += v * v;
        return std::sqrt(ss / double(x.size()) + eps);
    };
    const int n = int(tokens.size());
    std::vector<std::vector<double>> e(n, std::vector<double>(8)), h(n, std::vector<double>(8));
    for (int t = 0; t < n; ++t) {
        for (int i = 0; i < 8; ++i) e[t][i] = rows.at(tokens[t])[i % 4];
        double r = rms(e[t]);
        for (int i = 0; i < 8; ++i) h[t][i] = e[t][i] / r;
    }
    for (int t = 0; t < n; ++t) {
        std::vector<double> score(t + 1);
        double z = 0;
        for (int s2 = 0; s2 <= t; ++s2) {
            double d = t - s2;
            score[s2] = std::exp((h[t][0] * h[s2][0] * std::cos(d) + h[t][1] * h[s2][1] * std::cos(0.01 * d)) / 2.0);
            z += score[s2];
        }
        std::vector<double> x1 = e[t];
        for (int s2 = 0; s2 <= t; ++s2) {
            for (int i = 0; i < 8; ++i) x1[i] += score[s2] / z * h[s2][i % 4];
        }
        double r1 = rms(x1);
        std::vector<double> h2(8);
        for (int i = 0; i < 8; ++i) h2[i] = 0.5 * x1[i] / r1;
        REQUIRE(h2[0] > 0.0);
        // top-2 of softmax(h2[0], 0, -h2[0]) renormalised = softmax(h2[0], 0)
        double w0 = 1.0 / (1.0 + std::exp(-h2[0])), w1 = 1.0 - w0;
        REQUIRE(routing[0][t].experts == std::vector<int>{0, 1});
        REQUIRE(routing[0][t].weights[0] == Approx(w0).epsilon(0).margin(1e-10));
        REQUIRE(routing[0][t].weights[1] == Approx(w1).epsilon(0).margin(1e-10));
        std::vector<double> x2 = x1;
        for (int i = 0; i < 4; ++i) {
            double g = h2[i];
            x2[i] += (w0 - 2.0 * w1) * g / (1.0 + std::exp(-g)) * (0.5 * g);  // silu(gate) * up
        }
        double r2 = rms(x2);
        for (int v = 0; v < 16; ++v) {
            INFO("position " << t << " token " << v);
            REQUIRE(logits[t][v] == Approx((v < 8 ? 1 : -1) * x2[v % 8] / r2).epsilon(0).margin(1e-10));
        }
    }
}

TEST_CASE("reference: the rope convention is rotate-half", "[reference]") {
    double v[4] = {1, 0, 0, 0};
    reference_rope(v, 4, 1, 10000.0);  // pairs (0, 2) and (1, 3); frequencies 1 and 0.01
    REQUIRE(v[0] == Approx(std::cos(1.0)));
    REQUIRE(v[1] == 0.0);
    REQUIRE(v[2] == Approx(std::sin(1.0)));
    REQUIRE(v[3] == 0.0);
    double u[4] = {0, 1, 0, 0};
    reference_rope(u, 4, 3, 10000.0);
    REQUIRE(u[0] == 0.0);
    REQUIRE(u[1] == Approx(std::cos(0.03)));
    REQUIRE(u[2] == 0.0);
    REQUIRE(u[3] == Approx(std::sin(0.03)));
    double z[4] = {0.3, -0.2, 0.7, 0.1};
    reference_rope(z, 4, 0, 10000.0);
    REQUIRE(z[0] == 0.3);
    REQUIRE(z[2] == 0.7);
}

TEST_CASE("reference: rope scores depend only on the position difference", "[reference]") {
    std::mt19937_64 rng(5);
    std::normal_distribution<double> normal;
    const int hd = 16;
    std::vector<double> q(hd), k(hd);
    for (auto& x : q) x = normal(rng);
    for (auto& x : k) x = normal(rng);
    auto score = [&](int m, int n) {
        std::vector<double> a = q, b = k;
        reference_rope(a.data(), hd, m, 10000.0);
        reference_rope(b.data(), hd, n, 10000.0);
        double d = 0, na = 0, nq = 0;
        for (int i = 0; i < hd; ++i) d += a[i] * b[i], na += a[i] * a[i], nq += q[i] * q[i];
        REQUIRE(na == Approx(nq));  // a rotation keeps the norm
        return d;
    };
    for (int delta : {0, 1, 5, 37}) {
        double base = score(delta, 0);
        for (int n : {1, 7, 100, 1000}) REQUIRE(score(n + delta, n) == Approx(base).margin(1e-9));
    }
    REQUIRE(std::fabs(score(3, 0) - score(4, 0)) > 1e-3);
}

TEST_CASE("reference: logits are causal and attention mixes positions", "[reference]") {
    Spec s;
    ReferenceModel model = random_model(s, 11, "ref-causal");
    const std::vector<int> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
    auto full = model.forward(tokens);
    for (size_t len = 1; len < tokens.size(); ++len) {
        auto prefix = model.forward(std::vector<int>(tokens.begin(), tokens.begin() + len));
        require_close(prefix, std::vector<std::vector<double>>(full.begin(), full.begin() + len));
    }
    // An earlier token changes later logits (otherwise causality is trivial).
    std::vector<int> other = tokens;
    other[0] = 12;
    auto changed = model.forward(other);
    REQUIRE(max_abs_diff(changed[5], full[5]) > 1e-4);
    // The same token at another position gives other logits (RoPE and context).
    REQUIRE(max_abs_diff(full[1], full[3]) > 1e-4);
}

TEST_CASE("reference: routing takes the top-k of the softmax and renormalises", "[reference]") {
    // Channel 0 of the residual is a large constant (embeddings hold 4 there,
    // o_proj and every w2 write 0 to it), so the router logit of expert e is
    // about gate[e][0] * h[0]: experts 0 and 1 are chosen, expert 2 comes
    // third but keeps about 10% of the softmax. Renormalising the top 2 must
    // give exactly the model that has only experts 0 and 1.
    Spec s3;
    s3.experts = 3;
    s3.active = 2;
    TensorMap w3 = random_weights(s3, 21);
    for (int v = 0; v < s3.vocab; ++v) w3["model.embed_tokens.weight"].data[v * s3.dim] = 4.0f;
    for (int l = 0; l < s3.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        for (int c = 0; c < s3.heads * s3.head_dim; ++c) w3[p + "self_attn.o_proj.weight"].data[c] = 0.0f;
        auto& gate = w3[p + "block_sparse_moe.gate.weight"].data;
        for (int e = 0; e < 3; ++e) {
            for (int c = 0; c < s3.dim; ++c)
                gate[e * s3.dim + c] = c == 0 ? (e < 2 ? 1.0f : 0.5f) : gate[e * s3.dim + c] / 8;
            auto& w2 = w3[p + "block_sparse_moe.experts." + std::to_string(e) + ".w2.weight"].data;
            for (int c = 0; c < s3.hidden; ++c) w2[c] = 0.0f;
        }
        for (auto& x : w3[p + "block_sparse_moe.experts.2.w2.weight"].data) x *= 64;  // loud if ever used
    }
    Spec s2 = s3;
    s2.experts = 2;
    TensorMap w2 = w3;
    for (int l = 0; l < s3.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        auto& gate = w2[p + "block_sparse_moe.gate.weight"];
        gate.shape = {2, s3.dim};
        gate.data.resize(2 * s3.dim);
        for (const char* m : {"w1", "w2", "w3"}) w2.erase(p + "block_sparse_moe.experts.2." + m + ".weight");
    }
    ReferenceModel three = ReferenceModel::load(write_model("ref-route3", config_of(s3), w3));
    ReferenceModel two = ReferenceModel::load(write_model("ref-route2", config_of(s2), w2));
    const std::vector<int> tokens = {0, 5, 10, 15, 3};
    ReferenceRouting routing;
    auto a = three.forward(tokens, &routing);
    require_close(a, two.forward(tokens), 1e-10);
    REQUIRE(routing.size() == 2);
    for (const auto& layer : routing) {
        REQUIRE(layer.size() == tokens.size());
        for (const auto& r : layer) {
            REQUIRE(r.experts.size() == 2);
            REQUIRE(std::min(r.experts[0], r.experts[1]) == 0);
            REQUIRE(std::max(r.experts[0], r.experts[1]) == 1);
            REQUIRE(r.probs[r.experts[0]] >= r.probs[r.experts[1]]);
            REQUIRE(r.probs[2] > 0.03);  // renormalising really matters
            double kept = r.probs[0] + r.probs[1];
            REQUIRE(r.probs[0] + r.probs[1] + r.probs[2] == Approx(1.0));
            REQUIRE(r.weights[0] == Approx(r.probs[r.experts[0]] / kept));
            REQUIRE(r.weights[1] == Approx(r.probs[r.experts[1]] / kept));
        }
    }
}

TEST_CASE("reference: routing ties go to the lower expert id", "[reference]") {
    Spec s;  // 4 experts, top 2
    TensorMap w = random_weights(s, 23);
    for (int l = 0; l < s.layers; ++l)
        w["model.layers." + std::to_string(l) + ".block_sparse_moe.gate.weight"] = zeros({4, s.dim});
    ReferenceRouting routing;
    ReferenceModel::load(write_model("ref-ties", config_of(s), w)).forward({1, 2, 3}, &routing);
    for (const auto& layer : routing) {
        for (const auto& r : layer) {
            REQUIRE(r.experts == std::vector<int>{0, 1});
            REQUIRE(r.weights == std::vector<double>{0.5, 0.5});
        }
    }
}

TEST_CASE("reference: grouped-query attention equals the duplicated multi-head model", "[reference]") {
    Spec gqa;
    gqa.heads = 4;
    gqa.kv_heads = 2;
    gqa.head_dim = 4;
    TensorMap w = random_weights(gqa, 31);
    Spec mha = gqa;
    mha.kv_heads = 4;
    TensorMap wm = w;
    for (int l = 0; l < gqa.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
        for (const char* m : {"k_proj.weight", "v_proj.weight"}) {
            const TestTensor& src = w[p + m];
            TestTensor dst{{4 * 4, gqa.dim}, {}};
            for (int head = 0; head < 4; ++head) {
                int kv = head / 2;  // query heads 0,1 -> kv 0; 2,3 -> kv 1
                dst.data.insert(dst.data.end(), src.data.begin() + kv * 4 * gqa.dim,
                                src.data.begin() + (kv + 1) * 4 * gqa.dim);
            }
            wm[p + m] = dst;
        }
    }
    ReferenceModel a = ReferenceModel::load(write_model("ref-gqa", config_of(gqa), w));
    ReferenceModel b = ReferenceModel::load(write_model("ref-mha", config_of(mha), wm));
    const std::vector<int> tokens = {2, 7, 1, 8, 2, 8};
    require_close(a.forward(tokens), b.forward(tokens));
}

TEST_CASE("reference: dtypes and shards load to the same model", "[reference]") {
    Spec s;
    json config = config_of(s);
    TensorMap w = random_weights(s, 41);
    const std::vector<int> tokens = {1, 2, 3, 4, 5};
    auto f32 = ReferenceModel::load(write_model("ref-f32", config, w)).forward(tokens);
    require_close(ReferenceModel::load(write_model("ref-bf16", config, w, WriteType::BF16)).forward(tokens), f32, 0.0);
    require_close(ReferenceModel::load(write_model("ref-f16", config, w, WriteType::F16, 3)).forward(tokens), f32, 0.0);
    require_close(ReferenceModel::load(write_model("ref-shard", config, w, WriteType::F32, 2)).forward(tokens), f32,
                  0.0);

    // Raw conversions, including F16 subnormals and negative values.
    fs::path dir = test_temp_dir("ref-raw");
    TensorMap raw = {{"x", {{4}, {-2.5f, 0.0f, 1.0f / 65536.0f, 1024.0f}}}};
    write_safetensors(dir / "a.safetensors", raw, WriteType::F32);
    auto t = reference_read_safetensors(dir / "a.safetensors");
    REQUIRE(t.at("x").shape == std::vector<int64_t>{4});
    REQUIRE(t.at("x").data == std::vector<double>{-2.5, 0.0, 1.0 / 65536.0, 1024.0});
    {
        // F16 0x0001 = 2^-24 (subnormal), 0xC500 = -5, 0x3C00 = 1; BF16 0xBF80 = -1.
        std::string h =
            R"({"a":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[6,8]}})";
        std::ofstream out(dir / "b.safetensors", std::ios::binary);
        uint64_t len = h.size();
        for (int i = 0; i < 8; ++i) out.put(char((len >> (8 * i)) & 0xFF));
        const unsigned char data[] = {0x01, 0x00, 0x00, 0xC5, 0x00, 0x3C, 0x80, 0xBF};
        out << h;
        out.write(reinterpret_cast<const char*>(data), sizeof data);
    }
    auto u = reference_read_safetensors(dir / "b.safetensors");
    REQUIRE(u.at("a").data == std::vector<double>{std::ldexp(1.0, -24), -5.0, 1.0});
    REQUIRE(u.at("b").data == std::vector<double>{-1.0});
}

TEST_CASE("reference: tied embeddings and dense models", "[reference]") {
    Spec untied;
    TensorMap w = random_weights(untied, 51);
    w["lm_head.weight"] = w["model.embed_tokens.weight"];
    Spec tied = untied;
    tied.tie = true;
    TensorMap wt = w;
    wt.erase("lm_head.weight");
    const std::vector<int> tokens = {9, 8, 7};
    require_close(ReferenceModel::load(write_model("ref-tied", config_of(tied), wt)).forward(tokens),
                  ReferenceModel::load(write_model("ref-untied", config_of(untied), w)).forward(tokens), 0.0);

    // A dense Mistral MLP is a Mixtral layer with one expert chosen with weight 1.
    Spec dense = untied;
    dense.experts = 0;
    TensorMap wd = random_weights(dense, 52);
    Spec moe1 = untied;
    moe1.experts = 1;
    moe1.active = 1;
    TensorMap wm;
    for (const auto& [name, t] : wd) {
        std::string n = name;
        for (auto [from, to] : {std::pair{"mlp.gate_proj", "block_sparse_moe.experts.0.w1"},
                                std::pair{"mlp.up_proj", "block_sparse_moe.experts.0.w3"},
                                std::pair{"mlp.down_proj", "block_sparse_moe.experts.0.w2"}}) {
            if (auto pos = n.find(from); pos != std::string::npos) n.replace(pos, std::strlen(from), to);
        }
        wm[n] = t;
    }
    for (int l = 0; l < dense.layers; ++l) {
        wm["model.layers." + std::to_string(l) + ".block_sparse_moe.gate.weight"] = zeros({1, dense.dim});
    }
    ReferenceModel d = ReferenceModel::load(write_model("ref-dense", config_of(dense), wd));
    REQUIRE(d.config().n_experts == 0);
    require_close(d.forward(tokens), ReferenceModel::load(write_model("ref-moe1", config_of(moe1), wm)).forward(tokens),
                  0.0);
}

TEST_CASE("reference: greedy continues with the argmax of the last position", "[reference]") {
    Spec s;
    ReferenceModel model = random_model(s, 61, "ref-greedy");
    std::vector<int> seq = {4, 2};
    auto out = model.greedy(seq, 5);
    REQUIRE(out.size() == 5);
    for (int token : out) {
        auto last = model.forward(seq).back();
        for (int v = 0; v < s.vocab; ++v) REQUIRE(last[v] <= last[token]);
        seq.push_back(token);
    }
}

// The error ReferenceModel::load gives for a folder; "" when it loads.
std::string load_message(const fs::path& dir) {
    try {
        ReferenceModel::load(dir);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST_CASE("reference: bad checkpoints are refused with a message", "[reference]") {
    Spec s;
    s.layers = 1;
    json config = config_of(s);
    TensorMap w = random_weights(s, 71);

    TensorMap missing = w;
    missing.erase("model.layers.0.self_attn.k_proj.weight");
    REQUIRE_THAT(load_message(write_model("ref-missing", config, missing)), Catch::Contains("self_attn.k_proj.weight"));

    TensorMap wrong = w;
    wrong["model.norm.weight"] = zeros({s.dim + 1});
    REQUIRE_THAT(load_message(write_model("ref-shape", config, wrong)), Catch::Contains("model.norm.weight"));

    fs::path truncated = write_model("ref-trunc", config, w);
    fs::resize_file(truncated / "model.safetensors", fs::file_size(truncated / "model.safetensors") - 10);
    REQUIRE_THAT(load_message(truncated), Catch::Contains("past end"));

    fs::path bad_header = write_model("ref-header", config, w);
    {
        std::fstream f(bad_header / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        f.put(char(0xFF));  // header length far past the end of the file
        f.seekp(6);
        f.put(char(0x7F));
    }
    REQUIRE_THAT(load_message(bad_header), Catch::Contains("past end of file"));

    json no_dim = config;
    no_dim.erase("hidden_size");
    REQUIRE_THAT(load_message(write_model("ref-config", no_dim, w)), Catch::Contains("hidden_size"));

    ReferenceModel model = ReferenceModel::load(write_model("ref-ok", config, w));
    REQUIRE_THROWS_AS(model.forward({1, s.vocab}), std::runtime_error);
    REQUIRE_THROWS_AS(model.forward({}), std::runtime_error);
}

TEST_CASE("reference: the synthetic tiny model gives finite, varied logits", "[reference]") {
    ReferenceModel model = ReferenceModel::load(test_model_dir("tiny"));
    REQUIRE(model.config().n_experts > 0);
    REQUIRE(model.config().n_experts_active < model.config().n_experts);
    const std::vector<int> tokens = {1, 415, 2936, 9060, 285, 1142, 28705};
    ReferenceRouting routing;
    auto logits = model.forward(tokens, &routing);
    REQUIRE(logits.size() == tokens.size());
    for (const auto& row : logits) {
        REQUIRE(int(row.size()) == model.vocab_size());
        for (double v : row) REQUIRE(std::isfinite(v));
        double spread = *std::max_element(row.begin(), row.end()) - *std::min_element(row.begin(), row.end());
        REQUIRE(spread > 0.1);
    }
    REQUIRE(max_abs_diff(logits[2], logits[5]) > 1e-3);
    // The router uses more than one pair of experts over the layers and tokens.
    std::set<std::vector<int>> pairs;
    for (const auto& layer : routing) {
        for (const auto& r : layer) pairs.insert(r.experts);
    }
    REQUIRE(pairs.size() > 1);
}

// ---- Qwen3-MoE, Qwen2-MoE and OLMoE features ------------------------------

namespace {

// The same tensors under Mixtral's names (mlp.gate -> block_sparse_moe.gate,
// mlp.experts.E.gate_proj / up_proj / down_proj -> w1 / w3 / w2), without
// q_norm / k_norm.
TensorMap as_mixtral(const TensorMap& w) {
    TensorMap out;
    for (const auto& [name, t] : w) {
        if (name.find("_norm.weight") != std::string::npos && name.find("self_attn") != std::string::npos) continue;
        std::string n = name;
        for (auto [from, to] :
             {std::pair{"mlp.gate.", "block_sparse_moe.gate."}, std::pair{"mlp.experts.", "block_sparse_moe.experts."},
              std::pair{"gate_proj", "w1"}, std::pair{"up_proj", "w3"}, std::pair{"down_proj", "w2"}}) {
            if (auto pos = n.find(from); pos != std::string::npos) n.replace(pos, std::strlen(from), to);
        }
        out[n] = t;
    }
    return out;
}

// (rows, cols) filled by value(r, c).
TestTensor matrix(int64_t rows, int64_t cols, const std::function<float(int, int)>& value) {
    TestTensor t = zeros({rows, cols});
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) t.data[r * cols + c] = value(int(r), int(c));
    }
    return t;
}

std::string layer_prefix(int l) {
    return "model.layers." + std::to_string(l) + ".";
}

}  // namespace

TEST_CASE("reference: Qwen3 normalises each head, OLMoE the whole projection", "[reference]") {
    // One layer, dim 8, 2 query heads on 1 kv head of 4. Every embedding row
    // repeats with period 4 and the input norm is 1, so h[0..4] has RMS 1.
    // Each query head reads a_head * R_head h[0..4] and the key b * R_k h[0..4]
    // with signed permutations R (RMS-preserving). Normalising a vector of
    // RMS 1 is the identity, so:
    //  * Qwen3 (per head) = Mixtral with q rows diag(q_norm) R_head, k rows
    //    diag(k_norm) R_k: the scales a_head and b vanish;
    //  * OLMoE (full width: RMS of (3 R0 h, 0.5 R1 h) is sqrt(4.625)) = Mixtral
    //    with q rows diag(q_norm[head]) a_head / sqrt(4.625) R_head.
    Spec s;
    s.layers = 1;
    s.eps = 1e-12;
    s.norm_topk = true;  // as Mixtral
    s.moe_hidden = s.hidden;
    const double a[2] = {3.0, 0.5}, b = 2.0;
    auto perm = [](int which, int r, int c) -> float {  // signed permutations of 4 coordinates
        if (which == 0) return float(c == r);
        if (which == 1) return c == 3 - r ? (r % 2 ? -1.0f : 1.0f) : 0.0f;
        return c == (r + 1) % 4 ? (r == 2 ? -1.0f : 1.0f) : 0.0f;
    };
    auto build = [&](const std::string& arch) {
        Spec q = s;
        q.arch = arch;
        TensorMap w = random_weights(q, 81);
        auto& embed = w["model.embed_tokens.weight"].data;
        for (int v = 0; v < s.vocab; ++v) {
            for (int i = 4; i < 8; ++i) embed[v * 8 + i] = embed[v * 8 + i - 4];
        }
        w[layer_prefix(0) + "input_layernorm.weight"].data.assign(8, 1.0f);
        w[layer_prefix(0) + "self_attn.q_proj.weight"] =
            matrix(8, 8, [&](int r, int c) { return c < 4 ? float(a[r / 4]) * perm(r / 4, r % 4, c) : 0.0f; });
        w[layer_prefix(0) + "self_attn.k_proj.weight"] =
            matrix(4, 8, [&](int r, int c) { return c < 4 ? float(b) * perm(2, r, c) : 0.0f; });
        return std::pair{q, w};
    };
    // Mixtral with q rows scale[head] * diag(qn[head part]) R_head and k rows diag(kn) R_k.
    auto mixtral = [&](const TensorMap& w, const std::vector<double>& scale, const std::vector<float>& qn,
                       const std::vector<float>& kn, const std::string& tag) {
        TensorMap m = as_mixtral(w);
        m[layer_prefix(0) + "self_attn.q_proj.weight"] = matrix(8, 8, [&](int r, int c) {
            return c < 4 ? float(scale[r / 4]) * qn[qn.size() == 8 ? r : r % 4] * perm(r / 4, r % 4, c) : 0.0f;
        });
        m[layer_prefix(0) + "self_attn.k_proj.weight"] =
            matrix(4, 8, [&](int r, int c) { return c < 4 ? kn[r] * perm(2, r, c) : 0.0f; });
        Spec ms = s;
        return ReferenceModel::load(write_model(tag, config_of(ms), m));
    };
    const std::vector<int> tokens = {3, 9, 3, 14, 0, 7};

    auto [q3, w3] = build("Qwen3MoeForCausalLM");
    const auto& qn3 = w3[layer_prefix(0) + "self_attn.q_norm.weight"].data;
    const auto& kn3 = w3[layer_prefix(0) + "self_attn.k_norm.weight"].data;
    REQUIRE(qn3.size() == 4);
    ReferenceModel qwen3 = ReferenceModel::load(write_model("ref-qk-qwen3", config_of(q3), w3));
    REQUIRE(qwen3.config().qk_norm == ReferenceQkNorm::PER_HEAD);
    auto per_head = mixtral(w3, {1.0, 1.0}, qn3, kn3, "ref-qk-mix1").forward(tokens);
    require_close(qwen3.forward(tokens), per_head, 1e-9);

    auto [ol, wo] = build("OlmoeForCausalLM");
    const auto& qno = wo[layer_prefix(0) + "self_attn.q_norm.weight"].data;
    const auto& kno = wo[layer_prefix(0) + "self_attn.k_norm.weight"].data;
    REQUIRE(qno.size() == 8);
    REQUIRE(kno.size() == 4);
    ReferenceModel olmoe = ReferenceModel::load(write_model("ref-qk-olmoe", config_of(ol), wo));
    REQUIRE(olmoe.config().qk_norm == ReferenceQkNorm::FULL);
    const double r = std::sqrt((a[0] * a[0] + a[1] * a[1]) / 2);
    auto full = mixtral(wo, {a[0] / r, a[1] / r}, qno, kno, "ref-qk-mix2").forward(tokens);
    require_close(olmoe.forward(tokens), full, 1e-6);  // a / r rounded to float in the Mixtral weights

    // The two normalisations give different models: per-head weights on the
    // OLMoE checkpoint are not what it computes.
    REQUIRE(max_abs_diff(olmoe.forward(tokens)[5],
                         mixtral(wo, {1.0, 1.0}, qno, kno, "ref-qk-mix3").forward(tokens)[5]) > 1e-4);
    // Position 0 attends only to itself: q and k cannot matter there.
    REQUIRE(max_abs_diff(olmoe.forward(tokens)[0], full[0]) < 1e-9);
}

TEST_CASE("reference: without norm_topk_prob the top-k weights are the softmax probabilities", "[reference]") {
    Spec s;
    s.arch = "OlmoeForCausalLM";  // 4 experts, top 2
    TensorMap w = random_weights(s, 91);
    ReferenceModel model = ReferenceModel::load(write_model("ref-topk-raw", config_of(s), w));
    REQUIRE_FALSE(model.config().norm_topk_prob);
    const std::vector<int> tokens = {5, 1, 12, 7};
    ReferenceRouting routing;
    auto logits = model.forward(tokens, &routing);
    for (const auto& layer : routing) {
        for (const auto& r : layer) {
            REQUIRE(r.weights.size() == 2);
            REQUIRE(r.weights[0] == r.probs[r.experts[0]]);
            REQUIRE(r.weights[1] == r.probs[r.experts[1]]);
            REQUIRE(r.weights[0] + r.weights[1] < 0.999);
        }
    }
    Spec norm = s;
    norm.norm_topk = true;
    REQUIRE(max_abs_diff(ReferenceModel::load(write_model("ref-topk-norm", config_of(norm), w)).forward(tokens)[3],
                         logits[3]) > 1e-4);

    // Identical experts and a zero router: every expert has probability 1/4,
    // so the unnormalised top 2 weigh 1/2 in all: the renormalised model with
    // every down_proj halved.
    TensorMap same = w, halved;
    for (int l = 0; l < s.layers; ++l) {
        const std::string p = layer_prefix(l) + "mlp.";
        same[p + "gate.weight"] = zeros({s.experts, s.dim});
        for (int e = 1; e < s.experts; ++e) {
            for (const char* m : {"gate_proj", "up_proj", "down_proj"}) {
                same[p + "experts." + std::to_string(e) + "." + m + ".weight"] = same[p + "experts.0." + m + ".weight"];
            }
        }
    }
    halved = same;
    for (auto& [name, t] : halved) {
        if (name.find("down_proj") != std::string::npos) {
            for (float& x : t.data) x *= 0.5f;
        }
    }
    ReferenceModel raw = ReferenceModel::load(write_model("ref-topk-same", config_of(s), same));
    raw.forward(tokens, &routing);
    REQUIRE(routing[0][0].experts == std::vector<int>{0, 1});
    REQUIRE(routing[0][0].weights == std::vector<double>{0.25, 0.25});
    require_close(raw.forward(tokens),
                  ReferenceModel::load(write_model("ref-topk-half", config_of(norm), halved)).forward(tokens), 1e-12);
}

TEST_CASE("reference: Qwen2's shared expert is added with weight sigmoid(shared_expert_gate . h)", "[reference]") {
    // Every routed expert and the shared one are the same MLP, the router and
    // the shared gate are zero: the routed experts sum to the MLP (renormalised)
    // and the shared one adds sigmoid(0) = 1/2 of it. That is Mixtral with
    // the MLP's down_proj times 1.5.
    Spec s;
    s.arch = "Qwen2MoeForCausalLM";
    s.norm_topk = true;
    s.moe_hidden = s.shared_hidden = 5;
    TensorMap w = random_weights(s, 101);
    for (int l = 0; l < s.layers; ++l) {
        const std::string p = layer_prefix(l) + "mlp.";
        w[p + "gate.weight"] = zeros({s.experts, s.dim});
        w[p + "shared_expert_gate.weight"] = zeros({1, s.dim});
        for (int e = 0; e < s.experts; ++e) {
            for (const char* m : {"gate_proj", "up_proj", "down_proj"})
                w[p + "experts." + std::to_string(e) + "." + m + ".weight"] = w[p + "shared_expert." + m + ".weight"];
        }
    }
    ReferenceModel qwen2 = ReferenceModel::load(write_model("ref-shared", config_of(s), w));
    REQUIRE(qwen2.config().shared_hidden_dim == 5);
    REQUIRE_FALSE(qwen2.config().qkv_bias);
    TensorMap m = as_mixtral(w);
    for (auto it = m.begin(); it != m.end();) {
        if (it->first.find("shared_expert") != std::string::npos) {
            it = m.erase(it);
            continue;
        }
        if (it->first.find(".w2.") != std::string::npos) {
            for (float& x : it->second.data) x *= 1.5f;
        }
        ++it;
    }
    Spec ms = s;
    ms.arch.clear();
    ms.hidden = 5;
    const std::vector<int> tokens = {2, 11, 4, 4, 9};
    ReferenceRouting routing;
    auto got = qwen2.forward(tokens, &routing);
    require_close(got, ReferenceModel::load(write_model("ref-shared-mix", config_of(ms), m)).forward(tokens), 1e-12);
    REQUIRE(routing[1][3].shared_gate == 0.5);

    // A gate of its own moves the shared expert's weight away from 1/2.
    TensorMap g = w;
    g[layer_prefix(1) + "mlp.shared_expert_gate.weight"] =
        matrix(1, s.dim, [](int, int c) { return c % 2 ? 2.0f : -1.0f; });
    ReferenceModel gated = ReferenceModel::load(write_model("ref-shared-gate", config_of(s), g));
    auto moved = gated.forward(tokens, &routing);
    for (const auto& r : routing[1]) {
        REQUIRE(r.shared_gate > 0.0);
        REQUIRE(r.shared_gate < 1.0);
        REQUIRE(std::fabs(r.shared_gate - 0.5) > 1e-3);
    }
    REQUIRE(max_abs_diff(moved[4], got[4]) > 1e-4);
}

TEST_CASE("reference: q/k/v biases are a weight on a constant input channel", "[reference]") {
    // Qwen2 with qkv_bias: every embedding row holds 1 in channel 0 and a
    // signed permutation of one vector elsewhere, so every row has the same
    // RMS and h[0] is the same constant h0 at every position of layer 0. A
    // bias b then equals adding b / h0 to column 0 of the projection.
    Spec s;
    s.arch = "Qwen2MoeForCausalLM";
    s.layers = 1;
    s.bias = true;
    TensorMap w = random_weights(s, 111);
    const float base[7] = {0.5f, -0.25f, 0.75f, 1.0f, -0.5f, 0.125f, 0.375f};
    std::mt19937_64 rng(7);
    auto& embed = w["model.embed_tokens.weight"].data;
    for (int v = 0; v < s.vocab; ++v) {
        std::vector<int> order = {0, 1, 2, 3, 4, 5, 6};
        std::shuffle(order.begin(), order.end(), rng);
        embed[v * 8] = 1.0f;
        for (int i = 0; i < 7; ++i) embed[v * 8 + 1 + i] = (rng() % 2 ? -1.0f : 1.0f) * base[order[i]];
    }
    double ss = 1.0;
    for (float x : base) ss += double(x) * x;
    const double h0 = w[layer_prefix(0) + "input_layernorm.weight"].data[0] / std::sqrt(ss / 8 + s.eps);
    TensorMap folded = w;
    for (const char* m : {"q_proj", "k_proj", "v_proj"}) {
        const std::string p = layer_prefix(0) + "self_attn." + m;
        auto& wt = folded[p + ".weight"].data;
        const auto& bias = w[p + ".bias"].data;
        for (size_t r = 0; r < bias.size(); ++r) wt[r * 8] += float(bias[r] / h0);
        folded.erase(p + ".bias");
    }
    Spec nobias = s;
    nobias.bias = false;
    const std::vector<int> tokens = {1, 6, 15, 6, 2};
    auto with = ReferenceModel::load(write_model("ref-bias", config_of(s), w)).forward(tokens);
    // float(bias / h0) rounds: compare at the float's precision.
    require_close(with, ReferenceModel::load(write_model("ref-bias-folded", config_of(nobias), folded)).forward(tokens),
                  1e-5);
    REQUIRE(max_abs_diff(with[4],
                         ReferenceModel::load(write_model("ref-bias-none", config_of(nobias), w)).forward(tokens)[4]) >
            1e-3);
}

TEST_CASE("reference: OLMoE's o_proj bias and a constant value bias", "[reference]") {
    // With v_proj zero and value bias b, every head's attention output is b
    // (the softmax sums to 1), so o = Wo (b per head): the same model with no
    // value bias and o_proj's bias raised by Wo (b per head).
    Spec s;
    s.arch = "OlmoeForCausalLM";
    s.bias = true;  // attention_bias
    s.layers = 1;
    TensorMap w = random_weights(s, 121);
    const std::string p = layer_prefix(0) + "self_attn.";
    w[p + "v_proj.weight"] = zeros({4, s.dim});
    TensorMap moved = w;
    const auto& bv = w[p + "v_proj.bias"].data;
    const auto& wo = w[p + "o_proj.weight"].data;
    auto& bo = moved[p + "o_proj.bias"].data;
    for (int r = 0; r < s.dim; ++r) {
        double sum = 0;
        for (int c = 0; c < 8; ++c) sum += double(wo[r * 8 + c]) * bv[c % 4];  // 2 heads on kv head 0
        bo[r] = float(bo[r] + sum);
    }
    moved[p + "v_proj.bias"] = zeros({4});
    ReferenceModel a = ReferenceModel::load(write_model("ref-obias", config_of(s), w));
    REQUIRE(a.config().o_bias);
    const std::vector<int> tokens = {8, 3, 3, 10};
    require_close(a.forward(tokens),
                  ReferenceModel::load(write_model("ref-obias2", config_of(s), moved)).forward(tokens), 1e-5);

    // clip_qkv: far above every value changes nothing; small, it does.
    json clip = config_of(s);
    clip["clip_qkv"] = 1e6;
    require_close(ReferenceModel::load(write_model("ref-clip-big", clip, w)).forward(tokens), a.forward(tokens), 0.0);
    clip["clip_qkv"] = 0.05;
    REQUIRE(max_abs_diff(ReferenceModel::load(write_model("ref-clip-small", clip, w)).forward(tokens)[3],
                         a.forward(tokens)[3]) > 1e-4);
}

TEST_CASE("reference: Qwen dense layers among MoE layers", "[reference]") {
    // decoder_sparse_step 2 on 3 layers: layers 0 and 2 dense, 1 sparse; the
    // same as mlp_only_layers [0, 2]. A dense MLP equals a sparse layer whose
    // experts all are that MLP (renormalised weights sum to 1), when the
    // shared expert writes nothing.
    Spec s;
    s.arch = "Qwen2MoeForCausalLM";
    s.bias = true;
    s.layers = 3;
    s.norm_topk = true;
    s.sparse_step = 2;
    TensorMap w = random_weights(s, 131);
    REQUIRE(w.count(layer_prefix(0) + "mlp.gate_proj.weight"));
    REQUIRE(w.count(layer_prefix(1) + "mlp.gate.weight"));
    for (const auto& [name, t] : w) {
        if (name.find("shared_expert.down_proj") != std::string::npos) w[name] = zeros(t.shape);
    }
    ReferenceModel stepped = ReferenceModel::load(write_model("ref-dense-step", config_of(s), w));
    REQUIRE(stepped.config().moe_layers == std::vector<bool>{false, true, false});
    Spec listed = s;
    listed.sparse_step = 1;
    listed.mlp_only = {0, 2, 7};  // a layer past the end is ignored, as transformers does
    ReferenceModel only = ReferenceModel::load(write_model("ref-dense-only", config_of(listed), w));
    REQUIRE(only.config().moe_layers == std::vector<bool>{false, true, false});

    const std::vector<int> tokens = {4, 13, 0, 13, 6};
    ReferenceRouting routing;
    auto got = stepped.forward(tokens, &routing);
    require_close(only.forward(tokens), got, 0.0);
    REQUIRE(routing.size() == 3);
    REQUIRE(routing[0][0].experts.empty());
    REQUIRE(routing[2][4].experts.empty());
    REQUIRE(routing[1][4].experts.size() == 2);

    Spec all = s;
    all.sparse_step = 1;
    TensorMap wa = random_weights(all, 131);  // the layout; values replaced below
    for (auto& [name, t] : wa) {
        if (w.count(name)) t = w.at(name);
    }
    for (int l : {0, 2}) {
        const std::string p = layer_prefix(l) + "mlp.";
        for (int e = 0; e < s.experts; ++e) {
            for (const char* m : {"gate_proj", "up_proj", "down_proj"})
                wa[p + "experts." + std::to_string(e) + "." + m + ".weight"] = w.at(p + m + ".weight");
        }
        wa[p + "shared_expert.down_proj.weight"] = zeros({s.dim, s.shared_hidden});
    }
    require_close(ReferenceModel::load(write_model("ref-dense-all", config_of(all), wa)).forward(tokens), got, 1e-12);

    // Dense layers use intermediate_size, experts moe_intermediate_size.
    Spec sizes = s;
    sizes.arch = "Qwen3MoeForCausalLM";
    sizes.hidden = 10;
    sizes.moe_hidden = 4;
    ReferenceModel sized =
        ReferenceModel::load(write_model("ref-dense-sizes", config_of(sizes), random_weights(sizes, 3)));
    REQUIRE(sized.config().hidden_dim == 10);
    REQUIRE(sized.config().moe_hidden_dim == 4);
    for (const auto& row : sized.forward(tokens)) {
        for (double v : row) REQUIRE(std::isfinite(v));
    }
}

TEST_CASE("reference: each architecture's defaults and its tensors' names", "[reference]") {
    auto load_config = [](const std::string& tag, json config, const TensorMap& w) {
        return ReferenceModel::load(write_model(tag, config, w)).config();
    };
    auto bare = [](const Spec& s) {
        json j = config_of(s);
        for (const char* k : {"rope_theta", "rms_norm_eps", "tie_word_embeddings", "norm_topk_prob", "qkv_bias",
                              "attention_bias", "decoder_sparse_step", "mlp_only_layers"})
            j.erase(k);
        return j;
    };
    Spec q3;
    q3.arch = "Qwen3MoeForCausalLM";
    ReferenceConfig c = load_config("ref-def-qwen3", bare(q3), random_weights(q3, 1));
    REQUIRE(c.rope_theta == 1e4);
    REQUIRE(c.rms_norm_eps == 1e-6);
    REQUIRE_FALSE(c.norm_topk_prob);
    REQUIRE_FALSE(c.qkv_bias);
    REQUIRE(c.shared_hidden_dim == 0);
    REQUIRE(c.qk_norm == ReferenceQkNorm::PER_HEAD);

    Spec q2;
    q2.arch = "Qwen2MoeForCausalLM";
    q2.bias = true;
    c = load_config("ref-def-qwen2", bare(q2), random_weights(q2, 2));
    REQUIRE(c.qkv_bias);  // Qwen2MoeConfig.qkv_bias defaults to true
    REQUIRE_FALSE(c.o_bias);
    REQUIRE_FALSE(c.norm_topk_prob);
    REQUIRE(c.rms_norm_eps == 1e-6);
    REQUIRE(c.qk_norm == ReferenceQkNorm::NONE);

    Spec ol;
    ol.arch = "OlmoeForCausalLM";
    json oj = bare(ol);
    oj["head_dim"] = 2;  // OlmoeAttention ignores it: hidden_size / heads
    c = load_config("ref-def-olmoe", oj, random_weights(ol, 3));
    REQUIRE(c.head_dim == 4);
    REQUIRE(c.rms_norm_eps == 1e-5);
    REQUIRE(c.rope_theta == 1e4);
    REQUIRE(c.clip_qkv == 0.0);
    REQUIRE_FALSE(c.norm_topk_prob);
    REQUIRE(c.moe_hidden_dim == c.hidden_dim);

    Spec mx;
    c = load_config("ref-def-mixtral", bare(mx), random_weights(mx, 4));
    REQUIRE(c.rope_theta == 1e6);
    REQUIRE(c.rms_norm_eps == 1e-5);
    REQUIRE(c.norm_topk_prob);

    TensorMap w = random_weights(q3, 5);
    w.erase("model.layers.1.self_attn.k_norm.weight");
    REQUIRE_THAT(load_message(write_model("ref-no-knorm", config_of(q3), w)),
                 Catch::Contains("model.layers.1.self_attn.k_norm.weight"));
    TensorMap wb = random_weights(q2, 6);
    wb.erase("model.layers.0.mlp.shared_expert_gate.weight");
    REQUIRE_THAT(load_message(write_model("ref-no-sgate", config_of(q2), wb)), Catch::Contains("shared_expert_gate"));
    json other = config_of(q3);
    other["architectures"] = {"DeepseekV3ForCausalLM"};
    REQUIRE_THAT(load_message(write_model("ref-arch", other, random_weights(q3, 7))),
                 Catch::Contains("unsupported architecture DeepseekV3ForCausalLM"));
    json no_moe = config_of(q3);
    no_moe.erase("moe_intermediate_size");
    REQUIRE_THAT(load_message(write_model("ref-no-moe-size", no_moe, random_weights(q3, 8))),
                 Catch::Contains("moe_intermediate_size"));
}
