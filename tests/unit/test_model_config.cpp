// Tests of config.json / generation_config.json parsing: the real Mixtral and
// Mistral-7B v0.3 configs from the shared data, defaults, and one error per
// kind of bad input (each a single line naming the file and the field).
#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model/model_config.h"
#include "profiles/errors.h"
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

TEST_CASE("config: an unknown architecture lists the supported ones", "[config]") {
    json j = mixtral_json();
    j["architectures"] = {"LlamaForCausalLM"};
    std::string m = parse_error(j);
    check_one_line(m);
    CHECK(m ==
          "dir/config.json: architecture 'LlamaForCausalLM' is not supported (supported: "
          "MixtralForCausalLM, MistralForCausalLM)");
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
    CHECK(m == (dir / "config.json").string() + ": not valid JSON");

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
    CHECK(load_error(dir) == (dir / "generation_config.json").string() + ": not valid JSON");
}
