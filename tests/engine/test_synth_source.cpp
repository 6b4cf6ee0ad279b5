// --model synth:PRESET[:SEED] (engine/model/model_source.h): the in-memory random
// weights are the bytes `synth-model` writes for that preset and seed, so the
// engine gives the same logits and greedy tokens as on the written folder;
// malformed synthetic names and too little memory are one-line refusals; the
// CLI runs on a synthetic source and names it a benchmark aid. Tiny and small
// presets only, to stay quick.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/errors.h"
#include "chat/model_chat.h"
#include "cpu_forward.h"
#include "engine/devices/expert_executor.h"
#include "engine/model/model_source.h"
#include "engine/model/synth_model.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/session.h"
#include "engine/runtime/token_mixer.h"
#include "test_support.h"
#include "weights_compare.h"

namespace {

std::string parse_error(const std::string& text) {
    try {
        model_source_parse(text);
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("synth: in-memory weights are the bytes synth-model writes for the same preset and seed", "[synth]") {
    for (const char* preset : {"tiny", "small"}) {
        SECTION(preset) {
            const std::filesystem::path dir = test_model_dir(preset, 7);
            const ModelConfig folder_config = model_config_load(dir);
            const ModelWeights folder = weights_load(folder_config, dir);

            const ModelSource source = model_source_parse(std::string("synth:") + preset + ":7");
            REQUIRE(source.synthetic);
            const ModelConfig c = model_source_config(source);
            // The config the folder's config.json gives, field by field.
            CHECK(c.architecture == folder_config.architecture);
            CHECK(c.dim == folder_config.dim);
            CHECK(c.hidden_dim == folder_config.hidden_dim);
            CHECK(c.n_layers == folder_config.n_layers);
            CHECK(c.n_heads == folder_config.n_heads);
            CHECK(c.n_kv_heads == folder_config.n_kv_heads);
            CHECK(c.head_dim == folder_config.head_dim);
            CHECK(c.vocab_size == folder_config.vocab_size);
            CHECK(c.n_experts == folder_config.n_experts);
            CHECK(c.n_experts_active == folder_config.n_experts_active);
            CHECK(c.norm_topk_prob == folder_config.norm_topk_prob);
            CHECK(c.rope_theta == folder_config.rope_theta);
            CHECK(c.rms_norm_eps == folder_config.rms_norm_eps);
            CHECK(c.tie_embeddings == folder_config.tie_embeddings);
            CHECK(c.max_position_embeddings == folder_config.max_position_embeddings);
            CHECK(c.bos_token_id == folder_config.bos_token_id);
            CHECK(c.eos_token_ids == folder_config.eos_token_ids);

            // 3 threads: chunks of the embeddings (over a million values) are
            // made by different threads, in no fixed order.
            const ModelWeights memory = model_source_weights(source, c, 3);
            CHECK(memory.files == nullptr);
            // Every tensor in the huge-page arena, as the GGUF loader holds its matrices.
            CHECK(memory.owned_f32.empty());
            CHECK(memory.owned_bf16.empty());
            CHECK(memory.arena.mapped_bytes() >= synth_memory_bytes(c));
            check_same_weights(c, memory, folder);
            CHECK(differing_tensors(c, memory, folder) == 0);
            // Another seed gives other weights: the comparison can fail.
            const ModelWeights other =
                model_source_weights(model_source_parse(std::string("synth:") + preset + ":8"), c, 3);
            const Flat all = flatten(c, folder);
            CHECK(differing_tensors(c, other, folder) == int(all.matrices.size() + all.vectors.size()));
        }
    }
}

TEST_CASE("synth: synth:tiny:7 gives bitwise the logits and greedy tokens of the folder written with seed 7",
          "[synth]") {
    const std::filesystem::path dir = test_model_dir("tiny", 7);
    const ModelConfig c = model_config_load(dir);
    const std::vector<int> prompt = {1, 1014, 2016, 3100, 17, 5432, 29915, 900};
    const ModelSource source = model_source_parse("synth:tiny:7");
    const std::vector<float> want = cpu_prefill_logits(c, weights_load(c, dir), prompt);
    const std::vector<float> got = cpu_prefill_logits(c, model_source_weights(source, c, 2), prompt);
    REQUIRE(got.size() == want.size());
    REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);

    SessionOptions folder_options, synth_options;
    folder_options.threads = synth_options.threads = 2;
    folder_options.ctx = synth_options.ctx = 128;
    Session folder(load_model({dir, 2}), folder_options), synth(load_model({"synth:tiny:7", 2}), synth_options);
    CHECK(synth.model().model_id() == "synth:tiny:7");
    CHECK(synth.placement().note.warning == PlacementWarning::NONE);
    // The same tokenizer and chat template as the folder's.
    const std::vector<ChatMessage> chat = {{ChatRole::USER, "Hello there, how are you?"}};
    std::string synth_warning, folder_warning;
    const ModelChat synth_chat(synth.model(), &synth_warning), folder_chat(folder.model(), &folder_warning);
    CHECK(synth_warning.empty());
    REQUIRE(synth_chat.builtin().encode(synth.model().tokenizer(), chat) ==
            folder_chat.builtin().encode(folder.model().tokenizer(), chat));

    GenerateRequest request;
    request.prompt = prompt;
    request.sampling.temperature = 0;
    request.max_tokens = 16;
    request.ignore_eos = true;
    request.top_logprobs = 3;
    std::vector<TokenEvent> a, b;
    GenerateResult ra = folder.generate(request, [&](const TokenEvent& e) {
        a.push_back(e);
        return true;
    });
    GenerateResult rb = synth.generate(request, [&](const TokenEvent& e) {
        b.push_back(e);
        return true;
    });
    REQUIRE(rb.tokens.size() == 16);
    REQUIRE(rb.tokens == ra.tokens);
    REQUIRE(rb.text == ra.text);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); i++) {
        CHECK(std::memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)) == 0);
        CHECK(a[i].top_logprobs == b[i].top_logprobs);
    }
}

TEST_CASE("synth: malformed synthetic names are refused by name in one line", "[synth]") {
    for (const char* bad : {"synth:", "synth:nope", "synth:tiny:x", "synth:tiny:1:2", "synth:tiny:", "synth:tiny:-1",
                            "synth:tiny:99999999999999999999", "synth::3"}) {
        INFO(bad);
        const std::string m = parse_error(bad);
        REQUIRE(!m.empty());
        CHECK(m.find('\n') == std::string::npos);
        CHECK(m.find(std::string("'") + bad + "'") != std::string::npos);
        CHECK(m.find("synth:PRESET[:SEED]") != std::string::npos);
    }
    CHECK(parse_error("synth:nope").find("unknown preset 'nope'") != std::string::npos);
    CHECK(parse_error("synth:tiny:x").find("seed 'x'") != std::string::npos);
    CHECK(parse_error("synth:tiny:1:2").find("too many") != std::string::npos);

    ModelSource s = model_source_parse("synth:mixtral-mini");
    CHECK(s.synthetic);
    CHECK(s.preset == SynthPreset::MIXTRAL_MINI);
    CHECK(s.seed == 0);
    CHECK(model_source_id(s) == "synth:mixtral-mini:0");
    CHECK(model_source_note(s).find("benchmark aid") != std::string::npos);
    // Anything else is a folder, "./synth:..." included.
    for (const char* folder : {"./synth:tiny", "/models/Mixtral-8x7B-Instruct-v0.1", "synthetic"}) {
        ModelSource f = model_source_parse(folder);
        CHECK_FALSE(f.synthetic);
        CHECK(f.dir == folder);
        CHECK(model_source_note(f).empty());
    }
    CHECK(model_source_id(model_source_parse("/models/Mixtral-8x7B-Instruct-v0.1/")) == "Mixtral-8x7B-Instruct-v0.1");
}

TEST_CASE("synth: a preset that does not fit in the available memory is refused with the bytes", "[synth]") {
    const ModelSource big = model_source_parse("synth:mixtral-8x7b:1");
    const ModelConfig c = model_source_config(big);
    const uint64_t needed = synth_memory_bytes(c);
    // Mixtral-8x7B's 46.7 billion bf16 weights (the norms in fp32).
    CHECK(needed > uint64_t(93e9));
    CHECK(needed < uint64_t(94e9));
    const uint64_t available = uint64_t(20) << 30;
    std::string m;
    try {
        model_source_check_memory(big, c, available);
    } catch (const MoeError& e) {
        m = e.what();
    }
    INFO(m);
    REQUIRE(!m.empty());
    CHECK(m.find('\n') == std::string::npos);
    CHECK(m.find("synth:mixtral-8x7b:1") != std::string::npos);
    CHECK(m.find("preset mixtral-8x7b") != std::string::npos);
    CHECK(m.find(std::to_string(needed) + " bytes") != std::string::npos);
    CHECK(m.find(std::to_string(available) + " bytes") != std::string::npos);
    CHECK_NOTHROW(model_source_check_memory(big, c, needed));
    CHECK_NOTHROW(model_source_check_memory(big, c, 0));  // unknown: no check
    const ModelSource folder = model_source_parse(test_model_dir("tiny").string());
    CHECK_NOTHROW(model_source_check_memory(folder, model_source_config(folder), 1));
}

TEST_CASE("synth: the CLI generates and tokenizes from synth:tiny and refuses a bad name with exit 2", "[synth]") {
    const std::vector<std::string> args = {"--prompt", "Once upon a time", "--max-tokens", "8",
                                           "--greedy", "--ignore-eos",     "--threads",    "2"};
    auto generate = [&](const std::string& model) {
        std::vector<std::string> a = {"generate", "--model", model};
        a.insert(a.end(), args.begin(), args.end());
        return moe(a);
    };
    CommandResult synth = generate("synth:tiny");
    INFO(synth.err);
    REQUIRE(synth.exit_code == 0);
    CHECK(synth.err.find("synth:tiny:0: random weights") != std::string::npos);
    CHECK(synth.err.find("benchmark aid") != std::string::npos);
    CHECK(synth.err.find("generated 8 tokens") != std::string::npos);
    CommandResult folder = generate(test_model_dir("tiny", 0).string());
    REQUIRE(folder.exit_code == 0);
    CHECK(synth.out == folder.out);

    CommandResult tok = moe({"tokenize", "--model", "synth:small:3", "--text", "Hello world"});
    REQUIRE(tok.exit_code == 0);
    CHECK(tok.out == moe({"tokenize", "--model", test_model_dir("tiny").string(), "--text", "Hello world"}).out);

    CommandResult bad = generate("synth:nope");
    REQUIRE(bad.exit_code == 2);
    CHECK(bad.err.rfind("moe-server: error: ", 0) == 0);
    CHECK(bad.err.find("'synth:nope'") != std::string::npos);
    CHECK(bad.err.find('\n') == bad.err.size() - 1);
}
