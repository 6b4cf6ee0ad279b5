// Tests of config.json / generation_config.json parsing: the real Mixtral and
// Mistral-7B v0.3 configs from the shared data, defaults, and one error per
// kind of bad input (each a single line naming the file and the field).
#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "engine/model/model_config.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json mixtral_json() {
    return json::parse(read_file(shared_data_dir() / "model_configs" / "mixtral-8x7b-instruct-v0.1.config.json"));
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

// The message of the MoeError that parsing `j` throws ("" when none is thrown).
std::string parse_error(const json& j) {
    try {
        model_config_parse(j, "dir/config.json");
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

std::string load_error(const fs::path& dir) {
    try {
        model_config_load(dir);
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

void check_one_line(const std::string& message) {
    INFO(message);
    CHECK(!message.empty());
    CHECK(message.find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("config: the real Mixtral-8x7B config", "[config]") {
    ModelConfig c = model_config_parse(mixtral_json(), "mixtral.json");
    CHECK(c.architecture == "MixtralForCausalLM");
    CHECK(c.is_moe());
    CHECK(c.dim == 4096);
    CHECK(c.hidden_dim == 14336);
    CHECK(c.n_layers == 32);
    CHECK(c.n_heads == 32);
    CHECK(c.n_kv_heads == 8);
    CHECK(c.head_dim == 128);
    CHECK(c.vocab_size == 32000);
    CHECK(c.n_experts == 8);
    CHECK(c.n_experts_active == 2);
    CHECK(c.norm_topk_prob);
    CHECK(c.rope_theta == 1e6f);
    CHECK(c.rms_norm_eps == 1e-5f);
    CHECK(!c.tie_embeddings);
    CHECK(c.max_position_embeddings == 32768);
    CHECK(c.bos_token_id == 1);
    CHECK(c.eos_token_ids == std::vector<int>{2});
}

TEST_CASE("config: the real Mistral-7B v0.3 folder (dense)", "[config]") {
    ModelConfig c = model_config_load(shared_data_dir() / "tokenizers" / "mistral-7b-instruct-v0.3");
    CHECK(c.architecture == "MistralForCausalLM");
    CHECK(!c.is_moe());
    CHECK(c.n_experts == 0);
    CHECK(c.n_experts_active == 0);
    CHECK(c.dim == 4096);
    CHECK(c.hidden_dim == 14336);
    CHECK(c.n_heads == 32);
    CHECK(c.n_kv_heads == 8);
    CHECK(c.head_dim == 128);
    CHECK(c.vocab_size == 32768);
    CHECK(c.rope_theta == 1e6f);
    CHECK(c.bos_token_id == 1);
    CHECK(c.eos_token_ids == std::vector<int>{2});
}

TEST_CASE("config: defaults of optional fields", "[config]") {
    json j = mixtral_json();
    for (const char* f : {"num_key_value_heads", "rope_theta", "rms_norm_eps", "tie_word_embeddings",
                          "max_position_embeddings", "bos_token_id", "eos_token_id"})
        j.erase(f);
    j["head_dim"] = nullptr;
    ModelConfig c = model_config_parse(j, "config.json");
    CHECK(c.n_kv_heads == 32);
    CHECK(c.head_dim == 128);
    CHECK(c.rope_theta == 1e6f);
    CHECK(c.rms_norm_eps == 1e-5f);
    CHECK(!c.tie_embeddings);
    CHECK(c.max_position_embeddings == 131072);
    CHECK(c.bos_token_id == 1);
    CHECK(c.eos_token_ids == std::vector<int>{2});

    j["architectures"] = {"MistralForCausalLM"};
    ModelConfig d = model_config_parse(j, "config.json");
    CHECK(d.rope_theta == 10000.0f);
    CHECK(d.n_experts == 0);

    j["head_dim"] = 64;  // explicit head_dim need not be dim / heads
    j["tie_word_embeddings"] = true;
    ModelConfig e = model_config_parse(j, "config.json");
    CHECK(e.head_dim == 64);
    CHECK(e.tie_embeddings);
}

TEST_CASE("config: generation_config.json overrides bos/eos, eos may be a list", "[config]") {
    fs::path dir = test_temp_dir("config-gen");
    json j = mixtral_json();
    write_text(dir / "config.json", j.dump());
    CHECK(model_config_load(dir).eos_token_ids == std::vector<int>{2});

    write_text(dir / "generation_config.json", R"({"bos_token_id": 5, "eos_token_id": [2, 32, 7]})");
    ModelConfig c = model_config_load(dir);
    CHECK(c.bos_token_id == 5);
    CHECK(c.eos_token_ids == std::vector<int>{2, 32, 7});

    write_text(dir / "generation_config.json", R"({"eos_token_id": 9})");
    c = model_config_load(dir);
    CHECK(c.bos_token_id == 1);
    CHECK(c.eos_token_ids == std::vector<int>{9});

    // An eos list in config.json itself.
    j["eos_token_id"] = {2, 3};
    fs::remove(dir / "generation_config.json");
    write_text(dir / "config.json", j.dump());
    CHECK(model_config_load(dir).eos_token_ids == std::vector<int>{2, 3});
}

TEST_CASE("config: a missing required field is named", "[config]") {
    for (const char* f : {"architectures", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "vocab_size", "num_local_experts", "num_experts_per_tok"}) {
        json j = mixtral_json();
        j.erase(f);
        std::string m = parse_error(j);
        INFO(m);
        check_one_line(m);
        CHECK(m == std::string("dir/config.json: field '") + f + "' missing");
    }
    // A dense model does not need the expert fields.
    json j = mixtral_json();
    j["architectures"] = {"MistralForCausalLM"};
    j.erase("num_local_experts");
    j.erase("num_experts_per_tok");
    CHECK(parse_error(j).empty());
}

TEST_CASE("config: bad values and types are refused", "[config]") {
    struct Case {
        const char* field;
        json value;
        const char* expect;  // substring of the message
    };
    const Case cases[] = {
        {"hidden_size", "4096", "field 'hidden_size' must be an integer, found string"},
        {"hidden_size", 4096.5, "field 'hidden_size' must be an integer"},
        {"hidden_size", 0, "field 'hidden_size' must be positive, found 0"},
        {"intermediate_size", -1, "field 'intermediate_size' must be positive"},
        {"num_hidden_layers", 0, "field 'num_hidden_layers' must be positive"},
        {"num_attention_heads", 0, "field 'num_attention_heads' must be positive"},
        {"num_key_value_heads", 5, "field 'num_key_value_heads' = 5 does not divide num_attention_heads = 32"},
        {"num_key_value_heads", 0, "field 'num_key_value_heads' must be positive"},
        {"vocab_size", 0, "field 'vocab_size' must be positive"},
        {"num_local_experts", 0, "field 'num_local_experts' must be positive"},
        {"num_experts_per_tok", 9, "field 'num_experts_per_tok' = 9 exceeds num_local_experts = 8"},
        {"num_experts_per_tok", 0, "field 'num_experts_per_tok' must be positive"},
        {"head_dim", 127, "field 'head_dim' = 127 must be even"},
        {"head_dim", 0, "field 'head_dim' must be positive"},
        {"rope_theta", -1.0, "field 'rope_theta' must be positive"},
        {"rope_theta", "big", "field 'rope_theta' must be a number, found string"},
        {"rms_norm_eps", 0.0, "field 'rms_norm_eps' must be positive"},
        {"tie_word_embeddings", 1, "field 'tie_word_embeddings' must be true or false"},
        {"max_position_embeddings", 0, "field 'max_position_embeddings' must be positive"},
        {"hidden_size", int64_t(1) << 40, "field 'hidden_size' = 1099511627776 is out of range"},
        {"bos_token_id", 32000, "field 'bos_token_id' = 32000 is outside the vocabulary [0, 32000)"},
        {"eos_token_id", json::array({2, -1}), "field 'eos_token_id' = -1 is outside the vocabulary"},
        {"eos_token_id", json::array(), "field 'eos_token_id' is an empty list"},
        {"eos_token_id", "</s>", "field 'eos_token_id' must be an integer or a list of integers, found string"},
        {"architectures", "MixtralForCausalLM", "field 'architectures' must be a non-empty list of strings"},
    };
    for (const Case& k : cases) {
        json j = mixtral_json();
        j[k.field] = k.value;
        std::string m = parse_error(j);
        INFO(k.field << " = " << k.value.dump() << " -> " << m);
        check_one_line(m);
        CHECK(m.rfind("dir/config.json: ", 0) == 0);
        CHECK(m.find(k.expect) != std::string::npos);
    }
}

TEST_CASE("config: a sliding window shorter than max_position_embeddings makes every layer slide", "[config]") {
    // Mixtral-8x7B's own config says null; a window reaching the longest
    // context never slides, so it loads as none.
    for (const json& none : {json(nullptr), json(32768), json(65536)}) {
        json j = mixtral_json();
        j["sliding_window"] = none;
        INFO(none.dump());
        CHECK(parse_error(j).empty());
        const ModelConfig c = model_config_parse(j, "dir/config.json");
        CHECK(c.sliding_window == 0);
        CHECK(c.layer_mixer(0) == MixerKind::ATTENTION);
        CHECK(c.layer_window(0) == 0);
    }
    json absent = mixtral_json();
    absent.erase("sliding_window");
    CHECK(parse_error(absent).empty());
    // Mistral-7B v0.1's 4096 (below its 32768 positions) and a window of 1:
    // every layer sliding-window attention, as Hugging Face's Mistral runs it.
    for (const char* arch : {"MixtralForCausalLM", "MistralForCausalLM"}) {
        for (int window : {1, 4096}) {
            json j = mixtral_json();
            j["architectures"] = {arch};
            j["sliding_window"] = window;
            INFO(arch << " " << window);
            const ModelConfig c = model_config_parse(j, "dir/config.json");
            CHECK(c.sliding_window == window);
            CHECK(c.n_attention_layers() == c.n_layers);
            for (int l = 0; l < c.n_layers; l++) {
                CHECK(c.layer_mixer(l) == MixerKind::SLIDING_ATTENTION);
                CHECK(c.layer_window(l) == window);
            }
        }
    }
    json negative = mixtral_json();
    negative["sliding_window"] = -4;
    CHECK(parse_error(negative).find("field 'sliding_window' must be positive or null") != std::string::npos);
    json text = mixtral_json();
    text["sliding_window"] = "4096";
    CHECK(parse_error(text).find("field 'sliding_window' must be an integer") != std::string::npos);
}

TEST_CASE("config: an unknown architecture lists the supported ones", "[config]") {
    json j = mixtral_json();
    j["architectures"] = {"LlamaForCausalLM"};
    std::string m = parse_error(j);
    check_one_line(m);
    CHECK(m ==
          "dir/config.json: architecture 'LlamaForCausalLM' is not supported (supported: "
          "MixtralForCausalLM, MistralForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, OlmoeForCausalLM, "
          "Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM, GptOssForCausalLM)");
    CHECK(parse_error(json::array()).find("expected a JSON object") != std::string::npos);
}

TEST_CASE("config: file errors name the file", "[config]") {
    fs::path dir = test_temp_dir("config-files");
    std::string m = load_error(dir);
    check_one_line(m);
    CHECK(m == (dir / "config.json").string() + ": missing (not a model folder?)");

    write_text(dir / "config.json", "{\"hidden_size\": 4096,");
    m = load_error(dir);
    check_one_line(m);
    CHECK(m.rfind((dir / "config.json").string() + ": not valid JSON: parse error at line 1, column 22", 0) == 0);

    write_text(dir / "config.json", "[1, 2]");
    m = load_error(dir);
    CHECK(m == (dir / "config.json").string() + ": expected a JSON object, found array");

    json j = mixtral_json();
    j.erase("num_local_experts");
    write_text(dir / "config.json", j.dump());
    m = load_error(dir);
    check_one_line(m);
    CHECK(m == (dir / "config.json").string() + ": field 'num_local_experts' missing");

    write_text(dir / "config.json", mixtral_json().dump());
    write_text(dir / "generation_config.json", R"({"eos_token_id": [2, "x"]})");
    m = load_error(dir);
    check_one_line(m);
    CHECK(m == (dir / "generation_config.json").string() + ": field 'eos_token_id' must be an integer, found string");

    write_text(dir / "generation_config.json", R"({"eos_token_id": 40000})");
    m = load_error(dir);
    CHECK(m.rfind((dir / "generation_config.json").string() + ": field 'eos_token_id' = 40000 is outside", 0) == 0);

    write_text(dir / "generation_config.json", "not json");
    CHECK(load_error(dir).rfind((dir / "generation_config.json").string() + ": not valid JSON: ", 0) == 0);
}

namespace {

// Qwen3-30B-A3B's config.json (the released file's fields).
json qwen3_moe_json() {
    return json::parse(R"({
      "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
      "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
      "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
      "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
      "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
      "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
      "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
      "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
      "use_sliding_window": false, "vocab_size": 151936})");
}

// Qwen1.5-MoE-A2.7B's config.json.
json qwen2_moe_json() {
    return json::parse(R"({
      "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
      "decoder_sparse_step": 1, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048,
      "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 8192,
      "max_window_layers": 21, "model_type": "qwen2_moe", "moe_intermediate_size": 1408,
      "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
      "num_hidden_layers": 24, "num_key_value_heads": 16, "output_router_logits": false,
      "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
      "shared_expert_intermediate_size": 5632, "sliding_window": 32768, "tie_word_embeddings": false,
      "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// OLMoE-1B-7B-0924's config.json.
json olmoe_json() {
    return json::parse(R"({
      "architectures": ["OlmoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": null, "clip_qkv": null, "eos_token_id": 50279, "hidden_act": "silu",
      "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 1024,
      "max_position_embeddings": 4096, "model_type": "olmoe", "norm_topk_prob": false,
      "num_attention_heads": 16, "num_experts": 64, "num_experts_per_tok": 8, "num_hidden_layers": 16,
      "num_key_value_heads": 16, "output_router_logits": false, "pad_token_id": 1, "rms_norm_eps": 1e-05,
      "rope_scaling": null, "rope_theta": 10000.0, "router_aux_loss_coef": 0.01,
      "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 50304})");
}

}  // namespace

TEST_CASE("config: Qwen3-30B-A3B (per-head q/k norm, head_dim above dim / heads, moe_intermediate_size)", "[config]") {
    const ModelConfig c = model_config_parse(qwen3_moe_json(), "qwen3.json");
    CHECK(c.architecture == "Qwen3MoeForCausalLM");
    CHECK(c.dim == 2048);
    CHECK(c.head_dim == 128);
    CHECK(c.n_heads * c.head_dim == 4096);
    CHECK(c.hidden_dim == 768);
    CHECK(c.dense_hidden_dim == 6144);
    CHECK(c.n_experts == 128);
    CHECK(c.n_experts_active == 8);
    CHECK(c.norm_topk_prob);
    CHECK(c.qk_norm == QkNorm::PER_HEAD);
    CHECK_FALSE(c.qkv_bias);
    CHECK(c.shared_hidden_dim == 0);
    CHECK(c.dense_layers.empty());
    CHECK(c.rms_norm_eps == 1e-6f);
    CHECK(c.rope_theta == 1e6f);
    CHECK(c.bos_token_id == 151643);
    CHECK(c.eos_token_ids == std::vector<int>{151645});
    for (int l = 0; l < c.n_layers; l++) {
        CHECK(c.layer_is_moe(l));
        CHECK(c.layer_mlp_hidden(l) == 0);
    }
}

TEST_CASE("config: Qwen1.5-MoE (shared expert, q/k/v biases, top-k not renormalised)", "[config]") {
    const ModelConfig c = model_config_parse(qwen2_moe_json(), "qwen2.json");
    CHECK(c.architecture == "Qwen2MoeForCausalLM");
    CHECK(c.head_dim == 128);
    CHECK(c.hidden_dim == 1408);
    CHECK(c.shared_hidden_dim == 5632);
    CHECK(c.qkv_bias);
    CHECK(c.qk_norm == QkNorm::NONE);
    CHECK_FALSE(c.norm_topk_prob);
    CHECK(c.n_experts == 60);
    CHECK(c.n_experts_active == 4);
    CHECK(c.layer_mlp_hidden(0) == 5632);  // the shared expert of a MoE layer
}

TEST_CASE("config: OLMoE-1B-7B (full-width q/k norm, null bos, norm_topk_prob false)", "[config]") {
    const ModelConfig c = model_config_parse(olmoe_json(), "olmoe.json");
    CHECK(c.architecture == "OlmoeForCausalLM");
    CHECK(c.hidden_dim == 1024);
    CHECK(c.dense_hidden_dim == 1024);
    CHECK(c.qk_norm == QkNorm::FULL);
    CHECK_FALSE(c.norm_topk_prob);
    CHECK(c.n_experts == 64);
    CHECK(c.rms_norm_eps == 1e-5f);
    CHECK(c.eos_token_ids == std::vector<int>{50279});
    CHECK(c.bos_token_id == 50279);  // null: the EOS id stands in
    CHECK(c.layer_mlp_hidden(3) == 0);
}

TEST_CASE("config: Hugging Face defaults of the Qwen and OLMoE config classes", "[config]") {
    json q3 = {{"architectures", {"Qwen3MoeForCausalLM"}},
               {"hidden_size", 256},
               {"num_hidden_layers", 2},
               {"num_attention_heads", 4},
               {"vocab_size", 151936}};
    ModelConfig c = model_config_parse(q3, "q3.json");
    CHECK(c.hidden_dim == 768);
    CHECK(c.dense_hidden_dim == 6144);
    CHECK(c.n_experts == 128);
    CHECK(c.n_experts_active == 8);
    CHECK_FALSE(c.norm_topk_prob);  // Qwen3MoeConfig's default; the released models set true
    CHECK(c.head_dim == 64);        // dim / heads without head_dim
    CHECK(c.n_kv_heads == 4);
    CHECK(c.rope_theta == 10000.0f);
    CHECK(c.max_position_embeddings == 32768);
    CHECK(c.eos_token_ids == std::vector<int>{151643});

    json q2 = q3;
    q2["architectures"] = {"Qwen2MoeForCausalLM"};
    c = model_config_parse(q2, "q2.json");
    CHECK(c.hidden_dim == 1408);
    CHECK(c.shared_hidden_dim == 5632);
    CHECK(c.n_experts == 60);
    CHECK(c.n_experts_active == 4);

    json ol = q3;
    ol["architectures"] = {"OlmoeForCausalLM"};
    ol["vocab_size"] = 50304;
    c = model_config_parse(ol, "olmoe.json");
    CHECK(c.hidden_dim == 2048);
    CHECK(c.n_experts == 64);
    CHECK(c.eos_token_ids == std::vector<int>{50279});
    CHECK(c.max_position_embeddings == 4096);
}

TEST_CASE("config: mlp_only_layers and decoder_sparse_step make dense layers of intermediate_size", "[config]") {
    json j = qwen3_moe_json();
    j["num_hidden_layers"] = 6;
    j["mlp_only_layers"] = {0, 5};
    j["decoder_sparse_step"] = 2;  // layers 1, 3, 5 sparse by the step
    const ModelConfig c = model_config_parse(j, "qwen3.json");
    CHECK(c.dense_layers == std::vector<int>{0, 2, 4, 5});
    CHECK_FALSE(c.layer_is_moe(0));
    CHECK(c.layer_is_moe(1));
    CHECK(c.layer_is_moe(3));
    CHECK_FALSE(c.layer_is_moe(5));
    CHECK(c.layer_mlp_hidden(0) == 6144);
    CHECK(c.layer_mlp_hidden(1) == 0);
}

TEST_CASE("config: bad Qwen and OLMoE fields are refused naming the field", "[config]") {
    const auto refused = [](json j, const char* field, const char* what) {
        const std::string message = parse_error(j);
        INFO(message);
        check_one_line(message);
        CHECK(message.find("dir/config.json") != std::string::npos);
        CHECK(message.find(field) != std::string::npos);
        CHECK(message.find(what) != std::string::npos);
    };
    struct Case {
        json (*base)();
        const char* field;
        json value;
        const char* what;
    };
    const Case cases[] = {
        {qwen3_moe_json, "mlp_only_layers", {48}, "outside the layers"},
        {qwen3_moe_json, "mlp_only_layers", "0", "list"},
        {qwen3_moe_json, "decoder_sparse_step", 0, "positive"},
        {qwen3_moe_json, "moe_intermediate_size", 0, "positive"},
        {qwen3_moe_json, "num_experts_per_tok", 129, "exceeds"},
        {qwen3_moe_json, "attention_bias", true, "not supported"},
        {qwen3_moe_json, "use_sliding_window", true, "not supported"},
        {qwen3_moe_json, "rope_scaling", {{"type", "longrope"}, {"factor", 4.0}}, "default, linear and yarn"},
        {qwen3_moe_json, "rope_scaling", {{"rope_type", "yarn"}}, "factor' is missing"},
        {qwen3_moe_json, "rope_scaling", {{"rope_type", "yarn"}, {"factor", 0.5}}, "outside [1, 1024]"},
        {qwen3_moe_json, "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}, {"beta_fast", -1}}, "must be positive"},
        {qwen3_moe_json, "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}, {"mscale", 1}}, "not supported yet"},
        {qwen3_moe_json, "rope_scaling", "yarn", "must be an object"},
        {qwen3_moe_json, "norm_topk_prob", "yes", "true or false"},
        {qwen2_moe_json, "shared_expert_intermediate_size", 0, "positive"},
        {olmoe_json, "clip_qkv", 8.0, "not supported"},
        {olmoe_json, "num_experts", -1, "positive"},
        {olmoe_json, "eos_token_id", 50304, "outside the vocabulary"},
    };
    for (const Case& k : cases) {
        json j = k.base();
        j[k.field] = k.value;
        refused(j, k.field, k.what);
    }
}

namespace {

// Qwen3.5-35B-A3B's text_config fields (as its image-text config.json nests them).
json qwen35_json() {
    json t = {{"hidden_size", 2048},
              {"num_hidden_layers", 8},
              {"num_attention_heads", 16},
              {"num_key_value_heads", 2},
              {"head_dim", 256},
              {"linear_conv_kernel_dim", 4},
              {"linear_key_head_dim", 128},
              {"linear_value_head_dim", 128},
              {"linear_num_key_heads", 16},
              {"linear_num_value_heads", 32},
              {"num_experts", 256},
              {"num_experts_per_tok", 8},
              {"moe_intermediate_size", 512},
              {"shared_expert_intermediate_size", 512},
              {"norm_topk_prob", false},
              {"vocab_size", 248320},
              {"eos_token_id", 248044},
              {"rope_parameters",
               {{"rope_type", "default"},
                {"rope_theta", 10000000},
                {"partial_rotary_factor", 0.25},
                {"mrope_section", {11, 11, 10}},
                {"mrope_interleaved", true}}},
              {"mtp_num_hidden_layers", 1}};
    return {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
            {"model_type", "qwen3_5_moe"},
            {"text_config", t},
            {"vision_config", {{"depth", 27}}},
            {"tie_word_embeddings", false}};
}

}  // namespace

TEST_CASE("config: Qwen3.5's image-text config and Qwen3-Next's hybrid layers", "[config]") {
    const ModelConfig c = model_config_parse(qwen35_json(), "q35");
    CHECK(c.architecture == "Qwen3_5MoeForConditionalGeneration");
    CHECK(c.tensor_prefix == "model.language_model.");
    CHECK(c.has_vision_tower);
    CHECK(c.n_mtp_layers == 1);
    // Every fourth layer attention (full_attention_interval's default), the rest the delta net.
    REQUIRE(c.layer_mixers.size() == 8);
    for (int l = 0; l < 8; l++)
        CHECK(c.layer_mixer(l) == ((l + 1) % 4 == 0 ? MixerKind::ATTENTION : MixerKind::GATED_DELTANET));
    CHECK(c.n_attention_layers() == 2);
    CHECK(c.n_linear_layers() == 6);
    CHECK(c.linear.conv_dim() == 2 * 16 * 128 + 32 * 128);
    CHECK(c.linear.k_head_of(3) == 1);  // Hugging Face's order: value heads 2h and 2h+1 read key head h
    CHECK(c.rope_dim() == 64);
    CHECK(c.rope_theta == 1e7f);
    CHECK(c.attn_output_gate);
    CHECK(c.norms_zero_centered);
    CHECK(c.qk_norm == QkNorm::PER_HEAD);
    CHECK(c.norm_topk_prob);  // Qwen3.5's router renormalises whatever the flag says
    CHECK(c.shared_hidden_dim == 512);
    CHECK(c.dense_layers.empty());

    json next = qwen35_json()["text_config"];
    next["architectures"] = {"Qwen3NextForCausalLM"};
    next.erase("rope_parameters");
    next["rope_theta"] = 10000000;
    next["partial_rotary_factor"] = 0.25;
    next["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "linear_attention",
                           "linear_attention", "linear_attention", "linear_attention", "full_attention"};
    const ModelConfig n = model_config_parse(next, "next");
    CHECK(n.tensor_prefix == "model.");
    CHECK_FALSE(n.has_vision_tower);
    CHECK(n.layer_mixer(1) == MixerKind::ATTENTION);
    CHECK(n.layer_mixer(3) == MixerKind::GATED_DELTANET);
    CHECK_FALSE(n.norm_topk_prob);  // Qwen3-Next follows its flag
    CHECK(n.rope_dim() == 64);

    // What a hybrid config must get right, each named in one line.
    const std::vector<std::pair<std::function<void(json&)>, std::string>> bad = {
        {[](json& j) { j["layer_types"] = {"linear_attention"}; }, "field 'layer_types' must be a list of"},
        {[](json& j) { j["layer_types"][2] = "sliding_attention"; }, "holds \"sliding_attention\" at 2"},
        {[](json& j) { j["linear_num_value_heads"] = 20; }, "does not divide linear_num_value_heads = 20"},
        {[](json& j) { j["linear_key_head_dim"] = 0; }, "field 'linear_key_head_dim' must be positive"},
        {[](json& j) { j["linear_value_head_dim"] = 1024; }, "= 1024 is above the 512 supported"},
        {[](json& j) { j["partial_rotary_factor"] = 0.001; }, "does not give an even number of rotary dimensions"},
        {[](json& j) { j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4}}; }, "default, linear and yarn"},
        {[](json& j) { j["full_attention_interval"] = 0; }, "field 'full_attention_interval' must be positive"},
    };
    for (const auto& [edit, want] : bad) {
        json j = next;
        if (want.find("interval") != std::string::npos) j.erase("layer_types");
        edit(j);
        std::string m;
        try {
            model_config_parse(j, "next");
        } catch (const MoeError& e) {
            m = e.what();
        }
        INFO(m);
        CHECK(m.find(want) != std::string::npos);
        check_one_line(m);
    }
}

// Hugging Face's _compute_yarn_parameters, transcribed step by step in
// double (its own names), for the engine's rope_inv_freq to meet.
std::vector<double> hf_yarn_inv_freq(double base, int dim, double factor, double original, double beta_fast,
                                     double beta_slow, bool truncate) {
    const double pi = 3.14159265358979323846;
    auto find_correction_dim = [&](double num_rotations) {
        return (dim * std::log(original / (num_rotations * 2 * pi))) / (2 * std::log(base));
    };
    double low = find_correction_dim(beta_fast), high = find_correction_dim(beta_slow);
    if (truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    std::vector<double> inv_freq;
    for (int i = 0; i < dim / 2; i++) {
        const double pos_freq = std::pow(base, double(2 * i) / dim);
        const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrapolation_factor = 1 - ramp;
        inv_freq.push_back(interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor);
    }
    return inv_freq;
}

TEST_CASE("config: YaRN and linear RoPE scaling, frequencies as Hugging Face computes them", "[config]") {
    // gpt-oss's rope_scaling (truncate false) on a Qwen3-MoE config, and Qwen3's documented long-context one.
    json j = qwen3_moe_json();
    j["head_dim"] = 64;
    j["rope_theta"] = 150000;
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
                         {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"truncate", false}};
    ModelConfig c = model_config_parse(j, "gpt-oss rope");
    CHECK(c.rope_scaling.type == RopeScaling::Type::YARN);
    CHECK(c.rope_scaling.factor == 32.0f);
    CHECK(c.rope_scaling.original_context == 4096);
    CHECK_FALSE(c.rope_scaling.truncate);
    CHECK(rope_attention_factor(c) == Approx(0.1 * std::log(32.0) + 1.0));
    std::vector<double> got = rope_inv_freq(c), want = hf_yarn_inv_freq(150000, 64, 32, 4096, 32, 1, false);
    REQUIRE(got.size() == 32);
    for (size_t i = 0; i < got.size(); i++) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
    // The blend's ends (dims 8.09 and 17.40 here): the original frequency
    // below, a 32nd of it above, in between between.
    CHECK(got[0] == 1.0);
    CHECK(got[8] == Approx(std::pow(150000.0, -16.0 / 64)).epsilon(0.02));
    CHECK(got[31] == Approx(std::pow(150000.0, -62.0 / 64) / 32).epsilon(1e-12));
    CHECK(got[12] < std::pow(150000.0, -24.0 / 64));
    CHECK(got[12] > std::pow(150000.0, -24.0 / 64) / 32);

    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
    j["head_dim"] = 128;
    j["rope_theta"] = 1000000;
    c = model_config_parse(j, "qwen3 yarn");
    CHECK(c.rope_scaling.truncate);  // the default
    CHECK(c.rope_scaling.beta_fast == 32.0f);
    want = hf_yarn_inv_freq(1e6, 128, 4, 32768, 32, 1, true);
    got = rope_inv_freq(c);
    for (size_t i = 0; i < got.size(); i++) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));

    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    c = model_config_parse(j, "linear");
    CHECK(c.rope_scaling.type == RopeScaling::Type::LINEAR);
    CHECK(rope_attention_factor(c) == 1.0f);
    got = rope_inv_freq(c);
    for (int i = 0; i < 64; i++) CHECK(got[size_t(i)] == Approx(std::pow(1e6, -2.0 * i / 128) / 2).epsilon(1e-12));

    // Plain RoPE, however it is said.
    for (json plain : {json(nullptr), json{{"rope_type", "default"}}}) {
        j["rope_scaling"] = plain;
        c = model_config_parse(j, "plain");
        CHECK(c.rope_scaling.type == RopeScaling::Type::NONE);
        got = rope_inv_freq(c);
        for (int i = 0; i < 64; i++) CHECK(got[size_t(i)] == Approx(std::pow(1e6, -2.0 * i / 128)).epsilon(1e-12));
    }
}
