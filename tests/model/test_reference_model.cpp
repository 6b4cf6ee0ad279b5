// Self-tests of the reference forward pass (tests/support/reference_model):
// a case computed by hand, causality, routing renormalisation, GQA against
// the equivalent full multi-head model, the RoPE convention and its
// relative-position property, dtypes, shards, tied and dense variants, and
// load errors. Checkpoints are small hand-made ones written here by a
// writer of our own, so these tests depend on nothing else in the tree.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "reference_model.h"
#include "test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct TestTensor {
    std::vector<int64_t> shape;
    std::vector<float> data;
};
using TensorMap = std::map<std::string, TestTensor>;

enum class WriteType { F32, BF16, F16 };

// Exact conversions only: the tests use values every dtype can hold.
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

void write_safetensors(const fs::path& path, const TensorMap& tensors, WriteType type) {
    const char* dtype = type == WriteType::F32 ? "F32" : type == WriteType::BF16 ? "BF16" : "F16";
    const size_t elem = type == WriteType::F32 ? 4 : 2;
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    std::string data;
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
}

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
};

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
    if (s.experts > 0) {
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
    TensorMap m;
    m["model.embed_tokens.weight"] = tensor({s.vocab, s.dim}, 128);
    for (int l = 0; l < s.layers; ++l) {
        std::string p = "model.layers." + std::to_string(l) + ".";
        m[p + "input_layernorm.weight"] = norm(s.dim);
        m[p + "self_attn.q_proj.weight"] = tensor({s.heads * s.head_dim, s.dim}, 96);
        m[p + "self_attn.k_proj.weight"] = tensor({s.kv_heads * s.head_dim, s.dim}, 96);
        m[p + "self_attn.v_proj.weight"] = tensor({s.kv_heads * s.head_dim, s.dim});
        m[p + "self_attn.o_proj.weight"] = tensor({s.dim, s.heads * s.head_dim});
        m[p + "post_attention_layernorm.weight"] = norm(s.dim);
        if (s.experts > 0) {
            m[p + "block_sparse_moe.gate.weight"] = tensor({s.experts, s.dim}, 128);
            for (int e = 0; e < s.experts; ++e) {
                std::string q = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
                m[q + "w1.weight"] = tensor({s.hidden, s.dim});
                m[q + "w3.weight"] = tensor({s.hidden, s.dim});
                m[q + "w2.weight"] = tensor({s.dim, s.hidden});
            }
        } else {
            m[p + "mlp.gate_proj.weight"] = tensor({s.hidden, s.dim});
            m[p + "mlp.up_proj.weight"] = tensor({s.hidden, s.dim});
            m[p + "mlp.down_proj.weight"] = tensor({s.dim, s.hidden});
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

TEST_CASE("reference: bad checkpoints are refused with a message", "[reference]") {
    Spec s;
    s.layers = 1;
    json config = config_of(s);
    TensorMap w = random_weights(s, 71);
    auto message = [](const fs::path& dir) -> std::string {
        try {
            ReferenceModel::load(dir);
        } catch (const std::runtime_error& e) {
            return e.what();
        }
        return "";
    };

    TensorMap missing = w;
    missing.erase("model.layers.0.self_attn.k_proj.weight");
    REQUIRE_THAT(message(write_model("ref-missing", config, missing)), Catch::Contains("self_attn.k_proj.weight"));

    TensorMap wrong = w;
    wrong["model.norm.weight"] = zeros({s.dim + 1});
    REQUIRE_THAT(message(write_model("ref-shape", config, wrong)), Catch::Contains("model.norm.weight"));

    fs::path truncated = write_model("ref-trunc", config, w);
    fs::resize_file(truncated / "model.safetensors", fs::file_size(truncated / "model.safetensors") - 10);
    REQUIRE_THAT(message(truncated), Catch::Contains("past end"));

    fs::path bad_header = write_model("ref-header", config, w);
    {
        std::fstream f(bad_header / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        f.put(char(0xFF));  // header length far past the end of the file
        f.seekp(6);
        f.put(char(0x7F));
    }
    REQUIRE_THAT(message(bad_header), Catch::Contains("past end of file"));

    json no_dim = config;
    no_dim.erase("hidden_size");
    REQUIRE_THAT(message(write_model("ref-config", no_dim, w)), Catch::Contains("hidden_size"));

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
