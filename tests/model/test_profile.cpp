// Tests of the popularity-profile file: round trip, every kind of refusal
// with its message (not JSON, wrong version, missing field, wrong
// dimensions, negative or non-integer count, inconsistent sums, fingerprint
// mismatch), the Fiddler import, and the model fingerprint computed from a
// ModelConfig.
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "base/errors.h"
#include "engine/model/fingerprint.h"
#include "engine/model/model_config.h"
#include "engine/model/synth_model.h"
#include "engine/model/tensor_table.h"
#include "profiles/profile.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

ModelFingerprint small_fingerprint() {
    return ModelFingerprint{"MixtralForCausalLM", 3, 4, 2, 0x0123456789abcdefull};
}

// Three prompts over a 3 x 4 grid, top-2: 10 prefill tokens, 5 generated,
// so 2 decode passes; each layer routes tokens x 2.
Profile small_profile() {
    Profile p = profile_empty(small_fingerprint());
    ProfileWorkload& w = p.workload;
    w.source = "prompts.json";
    w.prompt_format = "sharegpt";
    w.gen_tokens = 4;
    w.ctx = 256;
    w.prompts_available = 7;
    w.prompt_indices = {0, 3, 6};
    w.prompts_skipped = 1;
    w.prefill_tokens = 10;
    w.generated_tokens = 5;
    w.decode_tokens = 2;
    p.prefill = {5, 5, 6, 4, 0, 20, 0, 0, 7, 3, 1, 9};  // each row sums to 20
    p.decode = {1, 1, 1, 1, 4, 0, 0, 0, 0, 0, 2, 2};    // each row sums to 4
    profile_sum_phases(p);
    return p;
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

// The MoeError message of reading `text` from a file ("" when accepted).
std::string read_error(const std::string& text) {
    fs::path path = test_temp_dir("profile-bad") / "p.json";
    write_text(path, text);
    try {
        profile_read(path);
    } catch (const MoeError& e) {
        std::string msg = e.what();
        // Every refusal names the file first.
        REQUIRE(msg.rfind(path.string() + ": ", 0) == 0);
        return msg;
    }
    return "";
}

// The read_error of `good` after `change`.
std::string read_error_after(const json& good, const std::function<void(json&)>& change) {
    json j = good;
    change(j);
    return read_error(j.dump());
}

void require_has(const std::string& msg, const std::string& part) {
    INFO(msg);
    REQUIRE(msg.find(part) != std::string::npos);
}

std::string check_error(const Profile& p, const ModelFingerprint& f) {
    try {
        profile_check(p, f, "p.json");
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("profile round trip keeps every field", "[profile]") {
    const Profile p = small_profile();
    fs::path path = test_temp_dir("profile-rt") / "p.json";
    write_text(path, "old contents");
    profile_write(p, path);
    Profile q = profile_read(path);
    REQUIRE(q.model == p.model);
    REQUIRE_FALSE(q.from_fiddler);
    REQUIRE(q.prefill == p.prefill);
    REQUIRE(q.decode == p.decode);
    REQUIRE(q.counts == p.counts);
    REQUIRE(q.counts[5] == 20);
    const ProfileWorkload& a = p.workload;
    const ProfileWorkload& b = q.workload;
    REQUIRE(b.source == a.source);
    REQUIRE(b.prompt_format == a.prompt_format);
    REQUIRE(b.chat_template == a.chat_template);
    REQUIRE(b.sampling == a.sampling);
    REQUIRE(b.gen_tokens == a.gen_tokens);
    REQUIRE(b.ctx == a.ctx);
    REQUIRE(b.prompts_available == a.prompts_available);
    REQUIRE(b.prompt_indices == a.prompt_indices);
    REQUIRE(b.prompts_skipped == a.prompts_skipped);
    REQUIRE(b.prefill_tokens == a.prefill_tokens);
    REQUIRE(b.generated_tokens == a.generated_tokens);
    REQUIRE(b.decode_tokens == a.decode_tokens);
    REQUIRE(b.interrupted == a.interrupted);
    // The atomic write leaves no temporary file behind.
    int files = 0;
    for (const auto& entry : fs::directory_iterator(path.parent_path())) files += entry.is_regular_file();
    REQUIRE(files == 1);
    // The documented layout, one line per table row.
    const std::string text = read_file(path);
    REQUIRE(text.find("   [0,20,0,0],\n") != std::string::npos);
    json j = json::parse(text);
    REQUIRE(j == profile_to_json(p));
    REQUIRE(j["format"] == PROFILE_FORMAT);
    REQUIRE(j["version"] == 1);
    REQUIRE(j["model"]["hash"] == "0123456789abcdef");
    REQUIRE(j["counts"]["prefill"][1] == json::array({0, 20, 0, 0}));
    REQUIRE(j["workload"]["prompts"] == 3);
}

TEST_CASE("profile validator refuses each kind of bad file with a message that says which", "[profile]") {
    const json good = profile_to_json(small_profile());
    REQUIRE(read_error(good.dump()) == "");

    const auto with = [&](const std::function<void(json&)>& change) { return read_error_after(good, change); };
    require_has(read_error("{\"format\": "), "not valid JSON");
    require_has(read_error("[1, 2]"), "the top level must be a JSON object");
    require_has(read_error("{\"counts\": 1}"),
                "neither a moe-server profile (no \"format\") nor a Fiddler popularity file");
    require_has(with([](json& j) { j["format"] = "other"; }),
                "format: 'other', expected 'moe-server-expert-popularity'");
    require_has(with([](json& j) { j["version"] = 2; }), "version: 2 is not supported (this build reads version 1)");
    require_has(with([](json& j) { j["workload"].erase("prefill_tokens"); }), "workload.prefill_tokens: missing");
    require_has(with([](json& j) { j["model"].erase("hash"); }), "model.hash: missing");
    require_has(with([](json& j) { j["model"]["hash"] = "xyz"; }), "model.hash: 'xyz' is not 16 lower-case hex digits");
    require_has(with([](json& j) { j["model"]["n_layers"] = "3"; }),
                "model.n_layers: must be a non-negative integer, found a string");
    require_has(with([](json& j) { j["counts"]["prefill"].erase(2); }),
                "counts.prefill: has 2 layers, expected 3 (model.n_layers x model.n_experts)");
    require_has(with([](json& j) { j["counts"]["decode"][1].push_back(0); }),
                "counts.decode[1]: has 5 experts, expected 4 (model.n_layers x model.n_experts)");
    require_has(with([](json& j) { j["model"]["n_experts"] = 5; }), "counts.prefill[0]: has 4 experts, expected 5");
    require_has(with([](json& j) { j["counts"]["prefill"][1][2] = -3; }), "counts.prefill[1][2]: -3 is negative");
    require_has(with([](json& j) { j["counts"]["decode"][0][0] = 1.5; }), "counts.decode[0][0]: 1.5 is not an integer");
    require_has(with([](json& j) { j["counts"]["decode"][2][3] = "2"; }),
                "counts.decode[2][3]: must be a non-negative integer, found a string");
    require_has(with([](json& j) { j["counts"]["prefill"][2][0] = 8; }),
                "counts.prefill[2]: sums to 21, expected workload.prefill_tokens x top-k = 10 x 2 = 20");
    require_has(with([](json& j) { j["workload"]["decode_tokens"] = 3; }),
                "workload.decode_tokens: 3, expected generated_tokens - prompts = 5 - 3");
    require_has(with([](json& j) { j["workload"]["prompts"] = 4; }), "workload.prompts: 4 differs from the 3 entries");
    require_has(with([](json& j) { j["workload"]["prompt_indices"][1] = 7; }),
                "workload.prompt_indices[1]: 7 is not below prompts_available 7");
    require_has(with([](json& j) { j["model"]["n_experts_active"] = 9; }),
                "model.n_experts_active: 9 exceeds n_experts 4");

    fs::path missing = test_temp_dir("profile-missing") / "none.json";
    REQUIRE_THROWS_WITH(profile_read(missing), missing.string() + ": cannot open file (No such file or directory)");
}

TEST_CASE("profile of a model with dense layers: their rows sum to 0, MoE rows to tokens x top-k", "[profile]") {
    // Layer 1 of the 3 x 4 grid is dense: it routes nothing.
    Profile p = small_profile();
    p.model.dense_layers = {1};
    for (int e = 0; e < 4; e++) p.prefill[size_t(4 + e)] = p.decode[size_t(4 + e)] = 0;
    profile_sum_phases(p);
    const fs::path path = test_temp_dir("profile-dense") / "p.json";
    profile_write(p, path);
    const Profile q = profile_read(path);
    REQUIRE(q.model == p.model);
    REQUIRE(q.model.dense_layers == std::vector<int>{1});
    REQUIRE(q.model.moe_layers() == std::vector<int>{0, 2});
    REQUIRE(json::parse(read_file(path))["model"]["dense_layers"] == json::array({1}));
    // Without dense layers the field is not written (profiles read as before).
    REQUIRE_FALSE(profile_to_json(small_profile())["model"].contains("dense_layers"));
    REQUIRE(fingerprint_describe(p.model) ==
            "MixtralForCausalLM, 3 layers x 4 experts, top-2, dense layers 1, hash 0123456789abcdef");

    const json good = profile_to_json(p);
    const auto with = [&](const std::function<void(json&)>& change) { return read_error_after(good, change); };
    // A dense layer with counts is refused, naming the layer.
    require_has(with([](json& j) { j["counts"]["decode"][1][3] = 2; }),
                "counts.decode[1]: sums to 2, expected 0: layer 1 is dense (model.dense_layers), it routes nothing");
    // The MoE layers still sum to tokens x top-k.
    require_has(with([](json& j) { j["counts"]["prefill"][2][0] = 8; }),
                "counts.prefill[2]: sums to 21, expected workload.prefill_tokens x top-k = 10 x 2 = 20");
    // Without the field the dense row is an ordinary one: refused by its sum.
    require_has(with([](json& j) { j["model"].erase("dense_layers"); }),
                "counts.prefill[1]: sums to 0, expected workload.prefill_tokens x top-k = 10 x 2 = 20");
    require_has(with([](json& j) { j["model"]["dense_layers"] = 1; }),
                "model.dense_layers: must be an array of layer indices, found an integer");
    require_has(with([](json& j) { j["model"]["dense_layers"] = {3}; }),
                "model.dense_layers[0]: 3 is not below n_layers 3");
    require_has(with([](json& j) {
                    j["model"]["dense_layers"] = {1, 1};
                }),
                "model.dense_layers[1]: 1 does not ascend (after 1)");
    require_has(with([](json& j) { j["model"]["dense_layers"] = {-1}; }), "model.dense_layers[0]: -1 is negative");
    // The fingerprint check tells a model with dense layers from one without.
    Profile all_moe = small_profile();
    REQUIRE(check_error(all_moe, p.model).find("profile is for another model") != std::string::npos);

    // The fingerprint of a model with dense layers carries them; the hashed text is unchanged by the field.
    ModelConfig c = synth_preset(SynthPreset::QWEN3_MOE_MINI);
    REQUIRE(model_fingerprint(c).dense_layers.empty());
    c.dense_layers = {0, 2};
    REQUIRE(model_fingerprint(c).dense_layers == std::vector<int>{0, 2});
    REQUIRE(model_fingerprint(synth_preset(SynthPreset::TINY)).dense_layers.empty());
}

TEST_CASE("profile of another model is refused naming both fingerprints", "[profile]") {
    const Profile p = small_profile();
    REQUIRE(check_error(p, small_fingerprint()) == "");
    ModelFingerprint other = small_fingerprint();
    other.hash ^= 1;
    std::string msg = check_error(p, other);
    INFO(msg);
    REQUIRE(msg.rfind("p.json: profile is for another model", 0) == 0);
    REQUIRE(msg.find("profile MixtralForCausalLM, 3 layers x 4 experts, top-2, hash 0123456789abcdef") !=
            std::string::npos);
    REQUIRE(msg.find("model MixtralForCausalLM, 3 layers x 4 experts, top-2, hash 0123456789abcdee") !=
            std::string::npos);
    other = small_fingerprint();
    other.n_experts_active = 1;
    REQUIRE(check_error(p, other).find("top-1") != std::string::npos);
}

TEST_CASE("Fiddler popularity file is imported as total counts and checked by its dimensions", "[profile]") {
    fs::path dir = test_temp_dir("profile-fiddler");
    json fiddler = {{"total_input_tokens", 9}, {"expert_popularity", {{3, 5, 0, 10}, {1.0, 2, 7, 8}, {0, 0, 9, 9}}}};
    write_text(dir / "fiddler.json", fiddler.dump());
    Profile p = profile_read(dir / "fiddler.json");
    REQUIRE(p.from_fiddler);
    REQUIRE_FALSE(p.has_phases());
    REQUIRE(p.model.n_layers == 3);
    REQUIRE(p.model.n_experts == 4);
    REQUIRE(p.counts == std::vector<uint64_t>{3, 5, 0, 10, 1, 2, 7, 8, 0, 0, 9, 9});
    REQUIRE(p.workload.prompt_format == "fiddler");
    REQUIRE(p.workload.prefill_tokens == 9);

    // Only the dimensions can be checked: any 3 x 4 model accepts it.
    REQUIRE(check_error(p, small_fingerprint()) == "");
    ModelFingerprint wider = small_fingerprint();
    wider.n_experts = 8;
    REQUIRE(check_error(p, wider) == "p.json: Fiddler popularity table is 3 layers x 4 experts, the model has 3 x 8");
    // Not writable as our format: it has no fingerprint.
    REQUIRE_THROWS_AS(profile_write(p, dir / "out.json"), MoeError);

    auto bad = [&](json j, const std::string& part) {
        write_text(dir / "bad.json", j.dump());
        try {
            profile_read(dir / "bad.json");
            FAIL("accepted " << j.dump());
        } catch (const MoeError& e) {
            INFO(e.what());
            REQUIRE(std::string(e.what()).find(part) != std::string::npos);
        }
    };
    bad({{"total_input_tokens", 9}, {"expert_popularity", {{1, 2}, {3}}}},
        "expert_popularity[1]: has 1 experts, expected 2 (the size of layer 0)");
    bad({{"total_input_tokens", 9}, {"expert_popularity", {{1, -2}}}}, "expert_popularity[0][1]: -2 is negative");
    bad({{"total_input_tokens", 9}, {"expert_popularity", {{1, 2.5}}}},
        "expert_popularity[0][1]: 2.5 is not an integer");
    bad({{"total_input_tokens", 9}, {"expert_popularity", json::array()}},
        "expert_popularity: must be a non-empty array");
    bad({{"expert_popularity", {{1, 2}}}}, "total_input_tokens: missing");
}

TEST_CASE("model fingerprint follows the config and the tensor shapes", "[profile]") {
    const ModelConfig tiny = synth_preset(SynthPreset::TINY);
    const ModelFingerprint f = model_fingerprint(tiny);
    REQUIRE(f.architecture == "MixtralForCausalLM");
    REQUIRE(f.n_layers == tiny.n_layers);
    REQUIRE(f.n_experts == tiny.n_experts);
    REQUIRE(f.n_experts_active == tiny.n_experts_active);
    REQUIRE(model_fingerprint(synth_preset(SynthPreset::TINY)) == f);
    REQUIRE(model_fingerprint(synth_preset(SynthPreset::SMALL)).hash != f.hash);

    // One line per field, then one per tensor: embed, per layer 6 + router +
    // 3 per expert, final norm, lm_head.
    const auto tensors = tensor_table(tiny);
    REQUIRE(tensors.size() == size_t(1 + tiny.n_layers * (7 + 3 * tiny.n_experts) + 2));
    REQUIRE(model_fingerprint_text(tiny).find("model.layers.1.block_sparse_moe.experts.3.w2.weight [" +
                                              std::to_string(tiny.dim) + ", " + std::to_string(tiny.hidden_dim) +
                                              "]") != std::string::npos);

    // Every field that shapes routing or tensors changes the hash.
    auto changed = [&](auto&& change) {
        ModelConfig c = tiny;
        change(c);
        return model_fingerprint(c).hash != f.hash;
    };
    REQUIRE(changed([](ModelConfig& c) { c.hidden_dim += 1; }));
    REQUIRE(changed([](ModelConfig& c) { c.head_dim += 1; }));
    REQUIRE(changed([](ModelConfig& c) { c.rope_theta *= 2; }));
    REQUIRE(changed([](ModelConfig& c) { c.rms_norm_eps *= 2; }));
    REQUIRE(changed([](ModelConfig& c) { c.norm_topk_prob = !c.norm_topk_prob; }));
    REQUIRE(changed([](ModelConfig& c) { c.tie_embeddings = !c.tie_embeddings; }));
    REQUIRE(changed([](ModelConfig& c) { c.vocab_size += 1; }));
    // Not a routing matter: the token ids that end generation.
    REQUIRE_FALSE(changed([](ModelConfig& c) { c.eos_token_ids.push_back(7); }));

    // The real Mixtral-8x7B config: 32 layers x 8 experts, top-2.
    json mixtral =
        json::parse(read_file(shared_data_dir() / "model_configs" / "mixtral-8x7b-instruct-v0.1.config.json"));
    const ModelFingerprint m = model_fingerprint(model_config_parse(mixtral, "config.json"));
    REQUIRE(fingerprint_describe(m).rfind("MixtralForCausalLM, 32 layers x 8 experts, top-2, hash ", 0) == 0);
    REQUIRE(m.hash != f.hash);
}

TEST_CASE("model fingerprint hashes stay those that existing profiles carry", "[profile]") {
    // A profile stores this hash and is refused when the model's differs, so
    // a change to the hashed config text or to the tensor table's names,
    // shapes or order would orphan every profile already written. Change
    // these values only on purpose, together with the profile format.
    auto hash = [](const std::string& preset, bool dense, bool tied) {
        ModelConfig c = synth_preset(synth_preset_parse(preset));
        if (dense) {
            c.architecture = "MistralForCausalLM";
            c.n_experts = 0;
            c.n_experts_active = 0;
        }
        c.tie_embeddings = tied;
        return model_fingerprint(c).hash;
    };
    CHECK(hash("tiny", false, false) == 0xb7623f9bdd0961edull);
    CHECK(hash("small", false, false) == 0xccd1f39d4f50ec43ull);
    CHECK(hash("mixtral-mini", false, false) == 0x753954ee3699c117ull);
    CHECK(hash("mixtral-8x7b", false, false) == 0xfd5bb6ac9ca2f4daull);
    CHECK(hash("tiny", false, true) == 0x83c22e659f1489ddull);
    CHECK(hash("tiny", true, false) == 0x56af6de44581c868ull);
    CHECK(hash("tiny", true, true) == 0xd8ec9ef54b1275bcull);
}

TEST_CASE("model fingerprint tells the Qwen3-MoE, Qwen2-MoE and OLMoE layouts apart", "[profile]") {
    // The presets: four fingerprints, none a Mixtral one.
    std::set<uint64_t> hashes;
    for (const char* preset :
         {"tiny", "small", "mixtral-mini", "qwen3-moe-mini", "olmoe-mini", "qwen2-moe-mini", "qwen3-30b-a3b"}) {
        const ModelConfig c = synth_preset(synth_preset_parse(preset));
        const ModelFingerprint f = model_fingerprint(c);
        INFO(preset);
        REQUIRE(f.architecture == c.architecture);
        REQUIRE(fingerprint_describe(f).rfind(c.architecture + ", " + std::to_string(c.n_layers) + " layers x " +
                                                  std::to_string(c.n_experts) + " experts, top-" +
                                                  std::to_string(c.n_experts_active),
                                              0) == 0);
        REQUIRE(hashes.insert(f.hash).second);
    }
    const ModelConfig q3 = synth_preset(SynthPreset::QWEN3_30B_A3B);
    REQUIRE(model_fingerprint_text(q3).find("model.layers.47.mlp.experts.127.down_proj.weight [2048, 768]") !=
            std::string::npos);
    REQUIRE(model_fingerprint_text(q3).find("model.layers.0.self_attn.q_norm.weight [128]") != std::string::npos);

    // Each feature of the new layouts changes the hash on its own.
    const ModelConfig base = synth_preset(SynthPreset::QWEN3_MOE_MINI);
    const uint64_t h = model_fingerprint(base).hash;
    auto changed = [&](auto&& change) {
        ModelConfig c = base;
        change(c);
        return model_fingerprint(c).hash != h;
    };
    REQUIRE(changed([](ModelConfig& c) { c.architecture = "Qwen2MoeForCausalLM"; }));
    REQUIRE(changed([](ModelConfig& c) { c.qk_norm = QkNorm::NONE; }));
    REQUIRE(changed([](ModelConfig& c) { c.qk_norm = QkNorm::FULL; }));
    REQUIRE(changed([](ModelConfig& c) { c.qkv_bias = true; }));
    REQUIRE(changed([](ModelConfig& c) { c.shared_hidden_dim = 4 * c.hidden_dim; }));
    REQUIRE(changed([](ModelConfig& c) { c.dense_layers = {0}; }));
    REQUIRE(changed([](ModelConfig& c) { c.norm_topk_prob = !c.norm_topk_prob; }));
    REQUIRE(changed([](ModelConfig& c) { c.n_experts_active = 4; }));
}
