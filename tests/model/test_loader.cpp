// Tests of weights_load on synthetic checkpoints (single file, sharded, F16,
// F32, dense Mistral names) and of one clear one-line error per kind of
// broken model folder; plus the synth-model writer: determinism, layout,
// refusals, and the statistical properties its weights promise.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/errors.h"
#include "embedded_files.h"
#include "engine/model/cost.h"
#include "engine/model/model_config.h"
#include "engine/model/synth_model.h"
#include "engine/model/weights.h"
#include "support/test_support.h"
#include "support/weights_compare.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void write_bytes(const fs::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
}

fs::path copy_model(const fs::path& from, const std::string& tag) {
    fs::path dir = test_temp_dir(tag);
    for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), dir / e.path().filename());
    return dir;
}

// Loads config + weights like the engine does; returns the MoeError message or "".
std::string load_error(const fs::path& dir) {
    try {
        ModelConfig c = model_config_load(dir);
        ModelWeights w = weights_load(c, dir);
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

// The message is one line and names the file, the tensor (when given) and the problem.
void check_error(const std::string& m, const fs::path& file, const std::string& tensor, const std::string& problem) {
    INFO("message: " << m);
    REQUIRE(!m.empty());
    CHECK(m.find('\n') == std::string::npos);
    CHECK(m.find(file.string()) != std::string::npos);
    if (!tensor.empty()) CHECK(m.find(tensor) != std::string::npos);
    CHECK(m.find(problem) != std::string::npos);
}

// Rewrites the JSON header of a safetensors file, keeping its data bytes.
template <class F>
void rewrite_header(const fs::path& path, F&& edit) {
    std::string bytes = read_file(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | uint8_t(bytes[size_t(i)]);
    json header = json::parse(bytes.substr(8, n));
    edit(header);
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string len(8, '\0');
    for (int i = 0; i < 8; i++) len[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
    write_bytes(path, len + text + bytes.substr(8 + n));
}

// Exact f32 -> f16 for values that f16 holds exactly (normal range, <= 10
// mantissa bits); smaller magnitudes become signed zero.
uint16_t f32_to_f16_exact(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    int exp = int((u >> 23) & 0xff) - 127;
    if (f == 0.0f || exp < -14) return sign;
    REQUIRE(exp <= 15);
    REQUIRE((u & 0x1fffu) == 0);
    return uint16_t(sign | uint16_t((exp + 15) << 10) | uint16_t((u >> 13) & 0x3ffu));
}

float flush_below_f16(float f) {
    return std::fabs(f) < 0x1p-14f ? 0.0f : f;
}

std::vector<float> to_f32(const TensorView& t) {
    REQUIRE(t.dtype == DType::BF16);
    std::vector<float> out(t.nbytes / 2);
    for (size_t i = 0; i < out.size(); i++) {
        bf16 h;
        std::memcpy(&h, static_cast<const char*>(t.data) + 2 * i, 2);
        out[i] = bf16_to_f32(h);
    }
    return out;
}

std::vector<float> rmsnorm(const bf16* x, const float* w, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += double(bf16_to_f32(x[i])) * bf16_to_f32(x[i]);
    float r = float(1.0 / std::sqrt(ss / n + 1e-5));
    std::vector<float> out(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) out[size_t(i)] = bf16_to_f32(x[i]) * r * w[i];
    return out;
}

float dot(const bf16* row, const std::vector<float>& x) {
    float s = 0;
    for (size_t i = 0; i < x.size(); i++) s += bf16_to_f32(row[i]) * x[i];
    return s;
}

}  // namespace

TEST_CASE("loader: tiny synthetic model, single file", "[loader]") {
    fs::path dir = test_model_dir("tiny", 1);
    CHECK(fs::exists(dir / "model.safetensors"));
    CHECK(!fs::exists(dir / "model.safetensors.index.json"));
    ModelConfig c = model_config_load(dir);
    ModelConfig p = synth_preset(SynthPreset::TINY);
    CHECK(c.dim == 64);
    CHECK(c.hidden_dim == 128);
    CHECK(c.n_layers == 2);
    CHECK(c.n_heads == 4);
    CHECK(c.n_kv_heads == 2);
    CHECK(c.head_dim == 16);
    CHECK(c.n_experts == 4);
    CHECK(c.n_experts_active == 2);
    CHECK(c.vocab_size == 32000);
    CHECK(c.rope_theta == p.rope_theta);
    CHECK(c.rms_norm_eps == p.rms_norm_eps);
    CHECK(c.eos_token_ids == std::vector<int>{2});

    ModelWeights w = weights_load(c, dir);
    REQUIRE(w.layers.size() == 2);
    CHECK(w.embed.data == w.files->find("model.embed_tokens.weight")->data);  // zero copy
    CHECK(w.lm_head.data == w.files->find("lm_head.weight")->data);
    CHECK(w.lm_head.data != w.embed.data);
    CHECK(w.owned_bf16.empty());
    CHECK(w.owned_f32.size() == 2 * 2 + 1);
    for (const LayerWeights& L : w.layers) {
        CHECK(!L.router.empty());
        REQUIRE(L.experts.size() == 4);
        for (const ExpertWeights& E : L.experts) CHECK((!E.w1.empty() && !E.w2.empty() && !E.w3.empty()));
    }
    CHECK(w.layers[0].experts[1].w2.data == w.files->find("model.layers.0.block_sparse_moe.experts.1.w2.weight")->data);
    CHECK(w.layers[0].experts[1].w3.data == w.files->find("model.layers.0.block_sparse_moe.experts.1.w3.weight")->data);
    CHECK(w.layers[1].router.data == w.files->find("model.layers.1.block_sparse_moe.gate.weight")->data);
    CHECK(w.layers[1].wo.data == w.files->find("model.layers.1.self_attn.o_proj.weight")->data);
    for (int i = 0; i < c.dim; i++) {
        CHECK(std::fabs(w.final_norm[i] - 1.0f) < 0.1f);
        CHECK(std::fabs(w.layers[0].attn_norm[i] - 1.0f) < 0.1f);
    }
    CHECK(cost_expert(c, 0).bytes == 3 * 128 * 64 * 2);
    CHECK(cost_expert(synth_preset(SynthPreset::MIXTRAL_8X7B), 0).bytes == size_t(3) * 14336 * 4096 * 2);
}

TEST_CASE("loader: small synthetic model, sharded, equals the single file", "[loader][synth]") {
    fs::path dir = test_temp_dir("small-sharded") / "model";
    struct Cleanup {
        fs::path dir;
        ~Cleanup() { fs::remove_all(dir.parent_path()); }
    } cleanup{dir};
    SynthOptions o;
    o.preset = SynthPreset::SMALL;
    o.out = dir;
    o.seed = 1;
    o.max_shard_bytes = size_t(4) << 20;
    synth_model_write(o);
    REQUIRE(fs::exists(dir / "model.safetensors.index.json"));
    CHECK(!fs::exists(dir / "model.safetensors"));
    CHECK(!fs::exists(dir.string() + ".partial"));

    json index = json::parse(read_file(dir / "model.safetensors.index.json"));
    std::set<std::string> shards;
    for (auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
    REQUIRE(shards.size() > 3);
    uint64_t total = 0, shard_sizes = 0;
    for (const std::string& s : shards) {
        INFO(s);
        CHECK(s.size() == std::string("model-00001-of-00000.safetensors").size());
        CHECK(s.find("-of-" + std::string(5 - std::to_string(shards.size()).size(), '0') +
                     std::to_string(shards.size()) + ".safetensors") != std::string::npos);
        REQUIRE(fs::exists(dir / s));
        shard_sizes += fs::file_size(dir / s);
        SafetensorsFile f(dir / s);
        uint64_t data = 0;
        for (auto& [name, t] : f.tensors()) data += t.nbytes;
        total += data;
        CHECK(data <= o.max_shard_bytes + size_t(32000) * 256 * 2);  // one over-size tensor may sit alone
    }
    CHECK(index["metadata"]["total_size"].get<uint64_t>() == total);
    CHECK(shard_sizes > total);

    ModelConfig c = model_config_load(dir);
    ModelWeights sharded = weights_load(c, dir);
    fs::path single_dir = test_model_dir("small", 1);
    ModelWeights single = weights_load(model_config_load(single_dir), single_dir);
    CHECK(sharded.layers.size() == 4);
    check_same_weights(c, sharded, single);
}

TEST_CASE("loader: F32 and F16 checkpoints load as the bf16 values", "[loader]") {
    fs::path src = test_model_dir("tiny", 1);
    ModelConfig c = model_config_load(src);
    ModelWeights ref = weights_load(c, src);
    SafetensorsSet set(src);

    for (DType dtype : {DType::F32, DType::F16}) {
        INFO(dtype_name(dtype));
        fs::path dir = test_temp_dir("loader-wide");
        fs::copy_file(src / "config.json", dir / "config.json");
        std::vector<std::string> storage;
        std::vector<TensorView> views;
        for (const auto& [name, t] : set.tensors()) {
            std::vector<float> v = to_f32(t);
            if (dtype == DType::F32 && name == "model.embed_tokens.weight") {
                v[0] = 1.00390625f;                // halfway 1.0 / 1.0078125: ties to even -> 1.0
                v[1] = 1.01171875f;                // halfway 1.0078125 / 1.015625 -> 1.015625
                v[2] = -(1.00390625f + 0x1p-23f);  // just past halfway -> -1.0078125
            }
            std::string bytes;
            if (dtype == DType::F32) {
                bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
            } else {
                std::vector<uint16_t> h(v.size());
                for (size_t i = 0; i < v.size(); i++) h[i] = f32_to_f16_exact(v[i]);
                if (name == "model.norm.weight") {
                    const uint16_t special[] = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x7BFF,
                                                0x7C00, 0xFC00, 0x8000, 0x3555, 0x7E00};
                    std::copy(std::begin(special), std::end(special), h.begin());
                }
                bytes.assign(reinterpret_cast<const char*>(h.data()), h.size() * 2);
            }
            storage.push_back(std::move(bytes));
            TensorView out = t;
            out.dtype = dtype;
            out.nbytes = storage.back().size();
            out.data = storage.back().data();
            views.push_back(out);
        }
        safetensors_write(dir / "model.safetensors", views);
        ModelWeights w = weights_load(c, dir);
        CHECK(!w.owned_bf16.empty());
        CHECK(w.embed.data != w.files->find("model.embed_tokens.weight")->data);

        Flat fw = flatten(c, w), fr = flatten(c, ref);
        REQUIRE(fw.matrices.size() == fr.matrices.size());
        for (size_t m = 0; m < fw.matrices.size(); m++) {
            size_t n = size_t(fw.matrices[m].rows * fw.matrices[m].cols), bad = 0;
            for (size_t i = 0; i < n; i++) {
                float got = bf16_to_f32(static_cast<const bf16*>(fw.matrices[m].data)[i]);
                float want = bf16_to_f32(static_cast<const bf16*>(fr.matrices[m].data)[i]);
                if (dtype == DType::F16) want = flush_below_f16(want);
                if (dtype == DType::F32 && m == 0 && i < 3) continue;
                bad += got != want;
            }
            INFO("matrix " << m);
            CHECK(bad == 0);
        }
        for (size_t m = 0; m < fw.vectors.size(); m++) {
            size_t bad = 0;
            bool special = dtype == DType::F16 && m + 1 == fw.vectors.size();
            for (size_t i = special ? 10 : 0; i < fw.vectors[m].second; i++) {
                float want = fr.vectors[m].first[i];
                bad += fw.vectors[m].first[i] != (dtype == DType::F16 ? flush_below_f16(want) : want);
            }
            INFO("vector " << m);
            CHECK(bad == 0);
        }
        if (dtype == DType::F32) {
            CHECK(static_cast<const bf16*>(w.embed.data)[0] == 0x3F80);
            CHECK(static_cast<const bf16*>(w.embed.data)[1] == 0x3F82);
            CHECK(static_cast<const bf16*>(w.embed.data)[2] == 0xBF81);
        } else {
            const float* f = w.final_norm;
            CHECK(f[0] == 1.0f);
            CHECK(f[1] == -2.0f);
            CHECK(f[2] == 0x1p-24f);
            CHECK(f[3] == 1023 * 0x1p-24f);
            CHECK(f[4] == 65504.0f);
            CHECK(std::isinf(f[5]));
            CHECK(f[5] > 0);
            CHECK(std::isinf(f[6]));
            CHECK(f[6] < 0);
            CHECK(f[7] == 0.0f);
            CHECK(std::signbit(f[7]));
            CHECK(f[8] == 0.333251953125f);
            CHECK(std::isnan(f[9]));
        }
        fs::remove_all(dir);
    }
}

TEST_CASE("loader: dense Mistral names and tied embeddings", "[loader]") {
    fs::path dir = test_temp_dir("loader-dense");
    json config = {{"architectures", {"MistralForCausalLM"}},
                   {"hidden_size", 16},
                   {"intermediate_size", 24},
                   {"num_hidden_layers", 2},
                   {"num_attention_heads", 4},
                   {"num_key_value_heads", 2},
                   {"vocab_size", 10},
                   {"tie_word_embeddings", true}};
    write_bytes(dir / "config.json", config.dump());
    std::vector<std::string> storage;
    std::vector<TensorView> views;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, DType dtype) {
        size_t n = 1;
        for (int64_t d : shape) n *= size_t(d);
        std::string bytes;
        for (size_t i = 0; i < n; i++) {
            float v = float((i * 7 + name.size()) % 13) * 0.125f - 0.5f;
            if (dtype == DType::F32) {
                bytes.append(reinterpret_cast<const char*>(&v), 4);
            } else {
                bf16 h = f32_to_bf16(v);
                bytes.append(reinterpret_cast<const char*>(&h), 2);
            }
        }
        storage.push_back(bytes);
        TensorView t;
        t.name = name;
        t.dtype = dtype;
        t.shape = shape;
        t.nbytes = bytes.size();
        views.push_back(t);
    };
    add("model.embed_tokens.weight", {10, 16}, DType::BF16);
    for (int l = 0; l < 2; l++) {
        std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {16}, DType::F32);
        add(p + "self_attn.q_proj.weight", {16, 16}, DType::BF16);
        add(p + "self_attn.k_proj.weight", {8, 16}, DType::BF16);
        add(p + "self_attn.v_proj.weight", {8, 16}, DType::BF16);
        add(p + "self_attn.o_proj.weight", {16, 16}, DType::BF16);
        add(p + "post_attention_layernorm.weight", {16}, DType::BF16);
        add(p + "mlp.gate_proj.weight", {24, 16}, DType::BF16);
        add(p + "mlp.up_proj.weight", {24, 16}, DType::BF16);
        add(p + "mlp.down_proj.weight", {16, 24}, DType::BF16);
    }
    add("model.norm.weight", {16}, DType::F32);
    for (size_t i = 0; i < views.size(); i++) views[i].data = storage[i].data();
    safetensors_write(dir / "model.safetensors", views);

    ModelConfig c = model_config_load(dir);
    ModelWeights w = weights_load(c, dir);
    CHECK(w.lm_head.data == w.embed.data);
    for (int l = 0; l < 2; l++) {
        const LayerWeights& L = w.layers[size_t(l)];
        std::string p = "model.layers." + std::to_string(l) + ".mlp.";
        CHECK(L.router.empty());
        REQUIRE(L.experts.size() == 1);
        CHECK(L.experts[0].w1.data == w.files->find(p + "gate_proj.weight")->data);
        CHECK(L.experts[0].w3.data == w.files->find(p + "up_proj.weight")->data);
        CHECK(L.experts[0].w2.data == w.files->find(p + "down_proj.weight")->data);
        CHECK(L.attn_norm[3] ==
              float((3 * 7 + std::strlen("model.layers.0.input_layernorm.weight")) % 13) * 0.125f - 0.5f);
    }

    config["tie_word_embeddings"] = false;
    write_bytes(dir / "config.json", config.dump());
    check_error(load_error(dir), dir / "model.safetensors", "lm_head.weight", "tensor missing");
    fs::remove_all(dir);
}

TEST_CASE("loader: each broken single-file model gives a one-line error", "[loader]") {
    fs::path dir = copy_model(test_model_dir("tiny", 1), "loader-broken");
    struct Cleanup {
        fs::path dir;
        ~Cleanup() { fs::remove_all(dir); }
    } cleanup{dir};
    fs::path st = dir / "model.safetensors";
    REQUIRE(load_error(dir).empty());

    SECTION("missing config") {
        fs::remove(dir / "config.json");
        check_error(load_error(dir), dir / "config.json", "", "missing");
    }
    SECTION("config missing a field") {
        json j = json::parse(read_file(dir / "config.json"));
        j.erase("intermediate_size");
        write_bytes(dir / "config.json", j.dump());
        check_error(load_error(dir), dir / "config.json", "", "field 'intermediate_size' missing");
    }
    SECTION("no weights") {
        fs::remove(st);
        check_error(load_error(dir), dir, "", "no model.safetensors or model.safetensors.index.json");
    }
    SECTION("header length past the end of the file") {
        std::string bytes = read_file(st);
        uint64_t n = bytes.size();
        for (int i = 0; i < 8; i++) bytes[size_t(i)] = char((n >> (8 * i)) & 0xff);
        write_bytes(st, bytes);
        check_error(load_error(dir), st, "", "header length " + std::to_string(n) + " runs past the end of the file");
    }
    SECTION("header not JSON") {
        std::string bytes = read_file(st);
        bytes[8] = 'x';
        write_bytes(st, bytes);
        check_error(load_error(dir), st, "", "header is not valid JSON");
    }
    SECTION("truncated file") {
        fs::resize_file(st, fs::file_size(st) / 2);
        std::string m = load_error(dir);
        check_error(m, st, ".weight: data_offsets", "run past the end of the data");
        CHECK(m.find("truncated file?") != std::string::npos);
    }
    SECTION("overlapping offsets") {
        rewrite_header(st, [](json& h) {
            h["model.layers.1.input_layernorm.weight"]["data_offsets"] =
                h["model.layers.0.input_layernorm.weight"]["data_offsets"];
        });
        std::string m = load_error(dir);
        check_error(m, st, "model.layers.1.input_layernorm.weight", "overlap tensor");
        CHECK(m.find("model.layers.0.input_layernorm.weight") != std::string::npos);
    }
    SECTION("offsets past the data") {
        uint64_t data_size = 0;
        rewrite_header(st, [&](json& h) {
            for (auto& [name, t] : h.items())
                if (name != "__metadata__") data_size = std::max(data_size, t["data_offsets"][1].get<uint64_t>());
            json& off = h["lm_head.weight"]["data_offsets"];
            off = {off[0].get<uint64_t>() + data_size, off[1].get<uint64_t>() + data_size};
        });
        check_error(load_error(dir), st, "lm_head.weight", "run past the end of the data");
    }
    SECTION("unsupported dtype") {
        rewrite_header(st, [](json& h) { h["model.layers.1.self_attn.k_proj.weight"]["dtype"] = "I8"; });
        check_error(load_error(dir), st, "model.layers.1.self_attn.k_proj.weight", "unsupported dtype 'I8'");
    }
    SECTION("shape not matching the config") {
        rewrite_header(st, [](json& h) {
            h["model.layers.1.block_sparse_moe.experts.2.w1.weight"]["shape"] = {64, 128};
        });
        std::string m = load_error(dir);
        check_error(m, st, "model.layers.1.block_sparse_moe.experts.2.w1.weight",
                    "expected shape [128, 64], found [64, 128]");
        CHECK(m == st.string() +
                       ": model.layers.1.block_sparse_moe.experts.2.w1.weight: expected shape [128, 64], "
                       "found [64, 128]");
    }
    SECTION("missing tensor") {
        rewrite_header(st, [](json& h) { h.erase("model.layers.1.block_sparse_moe.experts.3.w2.weight"); });
        std::string m = load_error(dir);
        check_error(m, st, "model.layers.1.block_sparse_moe.experts.3.w2.weight", "tensor missing");
    }
    SECTION("tied config needs no lm_head") {
        rewrite_header(st, [](json& h) { h.erase("lm_head.weight"); });
        check_error(load_error(dir), st, "lm_head.weight", "tensor missing");
        json j = json::parse(read_file(dir / "config.json"));
        j["tie_word_embeddings"] = true;
        write_bytes(dir / "config.json", j.dump());
        ModelConfig c = model_config_load(dir);
        ModelWeights w = weights_load(c, dir);
        CHECK(w.lm_head.data == w.embed.data);
    }
}

TEST_CASE("loader: broken sharded models give a one-line error", "[loader]") {
    fs::path dir = test_temp_dir("loader-shards") / "model";
    struct Cleanup {
        fs::path dir;
        ~Cleanup() { fs::remove_all(dir.parent_path()); }
    } cleanup{dir};
    SynthOptions o;
    o.preset = SynthPreset::TINY;
    o.out = dir;
    o.seed = 1;
    o.max_shard_bytes = size_t(1) << 20;
    synth_model_write(o);
    json index = json::parse(read_file(dir / "model.safetensors.index.json"));
    std::string last = index["weight_map"]["lm_head.weight"];
    std::string middle = index["weight_map"]["model.layers.1.self_attn.q_proj.weight"];
    REQUIRE(last != middle);
    REQUIRE(load_error(dir).empty());
    {
        // The sharded tiny model holds exactly the single-file tiny model's weights.
        ModelConfig c = model_config_load(dir);
        fs::path single = test_model_dir("tiny", 1);
        check_same_weights(c, weights_load(c, dir), weights_load(c, single));
    }

    SECTION("missing shard") {
        fs::remove(dir / last);
        check_error(load_error(dir), dir / last, "lm_head.weight", "shard missing");
    }
    SECTION("truncated shard") {
        fs::resize_file(dir / middle, fs::file_size(dir / middle) - 100);
        check_error(load_error(dir), dir / middle, ".weight: data_offsets", "run past the end of the data");
    }
    SECTION("tensor listed in the index but absent from its shard") {
        rewrite_header(dir / middle, [](json& h) { h.erase("model.layers.1.self_attn.q_proj.weight"); });
        check_error(load_error(dir), dir / middle, "model.layers.1.self_attn.q_proj.weight",
                    "tensor missing (listed in model.safetensors.index.json)");
    }
    SECTION("header of a shard not JSON") {
        std::string bytes = read_file(dir / middle);
        bytes[9] = '\x01';
        write_bytes(dir / middle, bytes);
        check_error(load_error(dir), dir / middle, "", "header is not valid JSON");
    }
}

TEST_CASE("synth: same seed same bytes, different seed different weights", "[synth]") {
    fs::path root = test_temp_dir("synth-det");
    auto write = [&](const std::string& name, uint64_t seed) {
        SynthOptions o;
        o.preset = SynthPreset::TINY;
        o.out = root / name;
        o.seed = seed;
        synth_model_write(o);
        return root / name;
    };
    fs::create_directories(root / "a");  // an existing empty folder is fine
    fs::path a = write("a", 7), b = write("b", 7), c = write("c", 8);
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(a)) names.insert(e.path().filename().string());
    CHECK(names == std::set<std::string>{"config.json", "generation_config.json", "model.safetensors",
                                         "special_tokens_map.json", "tokenizer.model", "tokenizer_config.json"});
    for (const std::string& n : names) {
        INFO(n);
        CHECK(read_file(a / n) == read_file(b / n));
    }
    std::string wa = read_file(a / "model.safetensors"), wc = read_file(c / "model.safetensors");
    CHECK(wa.size() == wc.size());
    CHECK(wa != wc);
    CHECK(read_file(a / "config.json") == read_file(c / "config.json"));
    // Every tensor differs between seeds, not just some.
    SafetensorsFile fa(a / "model.safetensors"), fc(c / "model.safetensors");
    for (const auto& [name, t] : fa.tensors()) {
        INFO(name);
        CHECK(std::memcmp(t.data, fc.tensors().at(name).data, t.nbytes) != 0);
    }
    CHECK(!fs::exists(root / "a.partial"));
    fs::remove_all(root);
}

TEST_CASE("synth: the files follow the Hugging Face Mixtral layout", "[synth]") {
    fs::path dir = test_model_dir("tiny", 1);
    CHECK(read_file(dir / "tokenizer.model") == std::string(embedded_file("mistral-v1.model")));
    CHECK(read_file(dir / "tokenizer.model") == read_file(shared_data_dir() / "tokenizers" / "mistral-v1.model"));
    json tc = json::parse(read_file(dir / "tokenizer_config.json"));
    CHECK(tc["bos_token"] == "<s>");
    CHECK(tc["eos_token"] == "</s>");
    CHECK(tc["unk_token"] == "<unk>");
    CHECK(tc["add_bos_token"] == true);
    CHECK(tc["chat_template"] == read_file(shared_data_dir() / "chat_templates" / "mixtral-8x7b-instruct-v0.1.jinja"));
    json cfg = json::parse(read_file(dir / "config.json"));
    json real = json::parse(read_file(shared_data_dir() / "model_configs" / "mixtral-8x7b-instruct-v0.1.config.json"));
    std::set<std::string> keys, real_keys;
    for (auto& [k, v] : cfg.items()) keys.insert(k);
    for (auto& [k, v] : real.items()) real_keys.insert(k);
    CHECK(keys == real_keys);
    CHECK(cfg["rms_norm_eps"].dump() == "1e-05");
    CHECK(cfg["rope_theta"].get<double>() == 1e6);
    json gen = json::parse(read_file(dir / "generation_config.json"));
    CHECK(gen["bos_token_id"] == 1);
    CHECK(gen["eos_token_id"] == 2);

    // A tokenizer given by file is copied as is.
    fs::path root = test_temp_dir("synth-tok");
    write_bytes(root / "my.model", "not really a tokenizer");
    SynthOptions o;
    o.out = root / "m";
    o.tokenizer = root / "my.model";
    synth_model_write(o);
    CHECK(read_file(root / "m" / "tokenizer.model") == "not really a tokenizer");
    fs::remove_all(root);
}

TEST_CASE("synth: refusals", "[synth]") {
    fs::path root = test_temp_dir("synth-refuse");
    fs::create_directories(root / "full");
    write_bytes(root / "full" / "x", "x");
    SynthOptions o;
    o.out = root / "full";
    try {
        synth_model_write(o);
        FAIL("wrote into a non-empty folder");
    } catch (const MoeError& e) {
        CHECK(std::string(e.what()) == (root / "full").string() + ": exists and is not empty; refusing to overwrite");
    }
    CHECK(read_file(root / "full" / "x") == "x");

    o.out = root / "fresh";
    try {
        o.preset = synth_preset_parse("huge");
        FAIL("unknown preset accepted");
    } catch (const MoeError& e) {
        CHECK(std::string(e.what()) ==
              "synth-model: unknown preset 'huge' (presets: tiny, small, mixtral-mini, mixtral-8x7b, qwen3-moe-mini, "
              "qwen3-30b-a3b, olmoe-mini, qwen2-moe-mini, qwen35-moe-mini, qwen3.6-35b-a3b, qwen3-next-mini, "
              "qwen3-next-80b-a3b, gpt-oss-mini, gpt-oss-20b, gpt-oss-120b)");
    }
    o.preset = SynthPreset::TINY;
    o.tokenizer = root / "absent.model";
    CHECK_THROWS_WITH(synth_model_write(o), Catch::Contains((root / "absent.model").string()));
    CHECK(!fs::exists(root / "fresh"));
    CHECK(!fs::exists(root / "fresh.partial"));

    try {
        synth_check_free_space(root / "fresh" / "deeper", uint64_t(1) << 62);
        FAIL("an exabyte of free space?");
    } catch (const MoeError& e) {
        std::string m = e.what();
        CHECK(m.rfind((root / "fresh" / "deeper").string() + ": not enough free disk space: needs 4611686018.4 GB",
                      0) == 0);
    }
    CHECK_NOTHROW(synth_check_free_space(root / "fresh", 1 << 20));

    // The real-size preset refuses up front where the disk lacks room (no partial output).
    uint64_t need = synth_disk_bytes(synth_preset(SynthPreset::MIXTRAL_8X7B));
    CHECK(need > uint64_t(90e9));
    CHECK(need < uint64_t(96e9));
    if (fs::space(root).available < need) {
        o.preset = SynthPreset::MIXTRAL_8X7B;
        o.tokenizer.clear();
        o.out = root / "big";
        CHECK_THROWS_WITH(synth_model_write(o), Catch::Contains("not enough free disk space"));
        CHECK(!fs::exists(root / "big.partial"));
    }
    // Qwen3-30B-A3B's real shape: about 61 GB of bf16 weights.
    need = synth_disk_bytes(synth_preset(SynthPreset::QWEN3_30B_A3B));
    CHECK(need > uint64_t(60e9));
    CHECK(need < uint64_t(63e9));
    if (fs::space(root).available < need) {
        o.preset = SynthPreset::QWEN3_30B_A3B;
        o.tokenizer.clear();
        o.out = root / "big";
        CHECK_THROWS_WITH(synth_model_write(o), Catch::Contains("not enough free disk space"));
        CHECK(!fs::exists(root / "big.partial"));
    }
    // The stand-in tokenizer presets take no SentencePiece --tokenizer.
    o.preset = SynthPreset::OLMOE_MINI;
    o.tokenizer = root / "absent.model";
    o.out = root / "olmoe";
    CHECK_THROWS_WITH(synth_model_write(o), Catch::Contains("writes its own tokenizer.json"));
    fs::remove_all(root);
}

TEST_CASE("synth: presets", "[synth]") {
    ModelConfig real = model_config_parse(
        json::parse(read_file(shared_data_dir() / "model_configs" / "mixtral-8x7b-instruct-v0.1.config.json")), "real");
    ModelConfig p = synth_preset(SynthPreset::MIXTRAL_8X7B);
    CHECK(p.architecture == real.architecture);
    CHECK(p.dim == real.dim);
    CHECK(p.hidden_dim == real.hidden_dim);
    CHECK(p.n_layers == real.n_layers);
    CHECK(p.n_heads == real.n_heads);
    CHECK(p.n_kv_heads == real.n_kv_heads);
    CHECK(p.head_dim == real.head_dim);
    CHECK(p.vocab_size == real.vocab_size);
    CHECK(p.n_experts == real.n_experts);
    CHECK(p.n_experts_active == real.n_experts_active);
    CHECK(p.rope_theta == real.rope_theta);
    CHECK(p.rms_norm_eps == real.rms_norm_eps);
    CHECK(p.max_position_embeddings == real.max_position_embeddings);
    CHECK(p.tie_embeddings == real.tie_embeddings);
    CHECK(p.eos_token_ids == real.eos_token_ids);

    ModelConfig mini = synth_preset(SynthPreset::MIXTRAL_MINI);
    CHECK(mini.dim == 1024);
    CHECK(mini.hidden_dim == 3584);
    CHECK(mini.n_layers == 8);
    CHECK(mini.n_heads == 16);
    CHECK(mini.n_kv_heads == 4);
    CHECK(mini.n_experts == 8);
    CHECK(mini.n_experts_active == 2);
    uint64_t mini_bytes = synth_disk_bytes(mini);
    CHECK(mini_bytes > uint64_t(1.5e9));
    CHECK(mini_bytes < uint64_t(1.7e9));
    ModelConfig small = synth_preset(SynthPreset::SMALL);
    CHECK(small.dim == 256);
    CHECK(small.hidden_dim == 512);
    CHECK(small.n_layers == 4);
    CHECK(small.n_heads == 8);
    CHECK(small.n_kv_heads == 2);
    CHECK(small.n_experts == 8);
    CHECK(std::size(SYNTH_PRESETS) == 15);
    for (SynthPreset p : SYNTH_PRESETS) CHECK(synth_preset_parse(synth_preset_name(p)) == p);
    // Qwen3.6-35B-A3B's and Qwen3-Next-80B-A3B's shapes: 3 Gated DeltaNet layers in 4.
    const ModelConfig q36 = synth_preset(SynthPreset::QWEN36_35B_A3B);
    CHECK(q36.n_layers == 40);
    CHECK(q36.n_attention_layers() == 10);
    CHECK(q36.linear.conv_dim() == 8192);
    CHECK(q36.linear.value_dim() == 4096);
    CHECK(q36.n_experts == 256);
    CHECK(q36.shared_hidden_dim == 512);
    CHECK(q36.vocab_size == 248320);
    CHECK(q36.rope_dim() == 64);
    const ModelConfig next = synth_preset(SynthPreset::QWEN3_NEXT_80B_A3B);
    CHECK(next.n_layers == 48);
    CHECK(next.n_linear_layers() == 36);
    CHECK(next.n_experts == 512);
    CHECK(next.n_experts_active == 10);
    // Qwen3-30B-A3B's real shape.
    ModelConfig q3 = synth_preset(SynthPreset::QWEN3_30B_A3B);
    CHECK(q3.architecture == "Qwen3MoeForCausalLM");
    CHECK(q3.n_layers == 48);
    CHECK(q3.dim == 2048);
    CHECK(q3.n_heads == 32);
    CHECK(q3.n_kv_heads == 4);
    CHECK(q3.head_dim == 128);
    CHECK(q3.n_experts == 128);
    CHECK(q3.n_experts_active == 8);
    CHECK(q3.hidden_dim == 768);
    CHECK(q3.vocab_size == 151936);
    CHECK(q3.qk_norm == QkNorm::PER_HEAD);
    CHECK(q3.norm_topk_prob);
    // The minis keep their architecture's features.
    CHECK(synth_preset(SynthPreset::QWEN3_MOE_MINI).head_dim * synth_preset(SynthPreset::QWEN3_MOE_MINI).n_heads != 512);
    CHECK(synth_preset(SynthPreset::OLMOE_MINI).qk_norm == QkNorm::FULL);
    CHECK_FALSE(synth_preset(SynthPreset::OLMOE_MINI).norm_topk_prob);
    CHECK(synth_preset(SynthPreset::QWEN2_MOE_MINI).shared_hidden_dim > 0);
    CHECK(synth_preset(SynthPreset::QWEN2_MOE_MINI).qkv_bias);
}

TEST_CASE("synth: routing is not uniform and logits are not flat", "[synth]") {
    fs::path dir = test_model_dir("tiny", 1);
    ModelConfig c = model_config_load(dir);
    ModelWeights w = weights_load(c, dir);
    const int n_tokens = 4000;
    // Router input stand-in: the normalised embeddings of many tokens.
    for (int l = 0; l < c.n_layers; l++) {
        const LayerWeights& L = w.layers[size_t(l)];
        std::vector<int> count(size_t(c.n_experts), 0);
        for (int t = 0; t < n_tokens; t++) {
            std::vector<float> h = rmsnorm(static_cast<const bf16*>(w.embed.row(t)), L.ffn_norm, c.dim);
            std::vector<std::pair<float, int>> z;
            for (int e = 0; e < c.n_experts; e++) z.push_back({dot(static_cast<const bf16*>(L.router.row(e)), h), e});
            std::sort(z.rbegin(), z.rend());
            for (int k = 0; k < c.n_experts_active; k++) count[size_t(z[size_t(k)].second)]++;
        }
        int lo = *std::min_element(count.begin(), count.end());
        int hi = *std::max_element(count.begin(), count.end());
        INFO("layer " << l << " least popular " << lo << ", most popular " << hi);
        CHECK(lo > 0);
        CHECK(hi > 2 * lo);
    }
    std::set<int> argmaxes;
    double sum_std = 0;
    const int n_probe = 32;
    for (int t = 0; t < n_probe; t++) {
        std::vector<float> h = rmsnorm(static_cast<const bf16*>(w.embed.row(t * 997)), w.final_norm, c.dim);
        double s = 0, ss = 0;
        float best = -1e30f;
        int arg = -1;
        for (int v = 0; v < c.vocab_size; v++) {
            float z = dot(static_cast<const bf16*>(w.lm_head.row(v)), h);
            REQUIRE(std::isfinite(z));
            s += z;
            ss += double(z) * z;
            if (z > best) best = z, arg = v;
        }
        double mean = s / c.vocab_size;
        sum_std += std::sqrt(ss / c.vocab_size - mean * mean);
        argmaxes.insert(arg);
    }
    double mean_std = sum_std / n_probe;
    INFO("mean logit std " << mean_std << ", distinct argmax " << argmaxes.size());
    CHECK(mean_std > 1.5);
    CHECK(mean_std < 4.0);
    CHECK(argmaxes.size() > n_probe / 2);
}
