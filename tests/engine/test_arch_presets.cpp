// The Qwen3-MoE, OLMoE and Qwen2-MoE synth-model presets end to end: each
// preset's folder (the real Hugging Face layout) loads back as the config and
// the bytes of its in-memory weights; its tokenizer and chat template load;
// the forward pass gives finite logits on the CPU backend and, with an
// emulated GPU holding some experts (on the CPU's own kernel path, as
// --emulate-gpu runs it), bitwise the same ones; a bf16 GGUF of
// each (qwen3moe, olmoe, qwen2moe: names, metadata, no q/k permutation, the
// tokenizer as a gpt2 vocabulary) gives bitwise the folder's logits and
// tokens; a tensor missing or mis-shaped is named. The comparisons against the independent reference
// model are in test_reference_model.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "base/errors.h"
#include "chat/model_chat.h"
#include "checkpoint_writer.h"
#include "cpu_forward.h"
#include "cpu_kernels/isa.h"
#include "engine/devices/emulated_device.h"
#include "engine/devices/expert_executor.h"
#include "engine/devices/hybrid_executor.h"
#include "engine/model/cost.h"
#include "engine/model/gguf_model.h"
#include "engine/model/model_source.h"
#include "engine/model/synth_model.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/session.h"
#include "engine/runtime/token_mixer.h"
#include "engine/text/gguf_tokenizer.h"
#include "placement/residency.h"
#include "test_support.h"
#include "weights_compare.h"

namespace fs = std::filesystem;

namespace {

const char* const PRESETS[] = {"qwen3-moe-mini", "olmoe-mini", "qwen2-moe-mini"};
// And the hybrid ones (Gated DeltaNet beside gated attention): no GGUF of them yet.
const char* const ALL_PRESETS[] = {"qwen3-moe-mini", "olmoe-mini", "qwen2-moe-mini", "qwen35-moe-mini",
                                   "qwen3-next-mini", "gpt-oss-mini"};

// Catch2 checks that every field the new architectures add or read agrees.
void check_same_config(const ModelConfig& got, const ModelConfig& want) {
    CHECK(got.architecture == want.architecture);
    CHECK(got.dim == want.dim);
    CHECK(got.hidden_dim == want.hidden_dim);
    CHECK(got.dense_hidden_dim == want.dense_hidden_dim);
    CHECK(got.head_dim == want.head_dim);
    CHECK(got.n_heads == want.n_heads);
    CHECK(got.n_kv_heads == want.n_kv_heads);
    CHECK(got.n_experts == want.n_experts);
    CHECK(got.n_experts_active == want.n_experts_active);
    CHECK(got.norm_topk_prob == want.norm_topk_prob);
    CHECK(got.qk_norm == want.qk_norm);
    CHECK(got.qkv_bias == want.qkv_bias);
    CHECK(got.shared_hidden_dim == want.shared_hidden_dim);
    CHECK(got.dense_layers == want.dense_layers);
    CHECK(got.rope_theta == want.rope_theta);
    CHECK(got.rms_norm_eps == want.rms_norm_eps);
    CHECK(got.vocab_size == want.vocab_size);
    CHECK(got.bos_token_id == want.bos_token_id);
    CHECK(got.eos_token_ids == want.eos_token_ids);
    CHECK(got.rope_dim() == want.rope_dim());
    CHECK(got.rope_scaling.type == want.rope_scaling.type);
    CHECK(got.rope_scaling.factor == want.rope_scaling.factor);
    CHECK(got.rope_scaling.original_context == want.rope_scaling.original_context);
    CHECK(got.rope_scaling.beta_fast == want.rope_scaling.beta_fast);
    CHECK(got.rope_scaling.beta_slow == want.rope_scaling.beta_slow);
    CHECK(got.rope_scaling.attention_factor == want.rope_scaling.attention_factor);
    CHECK(got.rope_scaling.truncate == want.rope_scaling.truncate);
    CHECK(got.attn_output_gate == want.attn_output_gate);
    CHECK(got.norms_zero_centered == want.norms_zero_centered);
    CHECK(got.layer_mixers == want.layer_mixers);
    CHECK(got.linear.conv_kernel == want.linear.conv_kernel);
    CHECK(got.linear.n_k_heads == want.linear.n_k_heads);
    CHECK(got.linear.n_v_heads == want.linear.n_v_heads);
    CHECK(got.linear.head_k_dim == want.linear.head_k_dim);
    CHECK(got.linear.head_v_dim == want.linear.head_v_dim);
    CHECK(got.tensor_prefix == want.tensor_prefix);
    CHECK(got.o_bias == want.o_bias);
    CHECK(got.attn_sinks == want.attn_sinks);
    CHECK(got.router_bias == want.router_bias);
    CHECK(got.expert_bias == want.expert_bias);
    CHECK(got.ffn_act.kind == want.ffn_act.kind);
    CHECK(got.ffn_act.limit == want.ffn_act.limit);
    CHECK(got.sliding_window == want.sliding_window);
    CHECK(got.max_position_embeddings == want.max_position_embeddings);
}

// Removes a file when it goes out of scope.
struct RemovedAtEnd {
    explicit RemovedAtEnd(fs::path p) : path(std::move(p)) {}
    ~RemovedAtEnd() {
        std::error_code ec;
        fs::remove(path, ec);
    }
    fs::path path;
};

std::string load_error(const ModelConfig& c, const fs::path& dir) {
    try {
        weights_load(c, dir);
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("arch presets: each folder loads back as its preset's config and in-memory weights", "[arch]") {
    for (const char* preset : ALL_PRESETS) {
        SECTION(preset) {
            const ScratchModel model(preset, 3);
            const fs::path& dir = model.dir();
            const nlohmann::json config_json = nlohmann::json::parse(read_file(dir / "config.json"));
            const ModelConfig want = synth_preset(synth_preset_parse(preset));
            const ModelConfig c = model_config_load(dir);
            CHECK(config_json["architectures"][0] == want.architecture);
            check_same_config(c, want);

            const ModelWeights folder = weights_load(c, dir);
            const ModelWeights memory =
                model_source_weights(model_source_parse(std::string("synth:") + preset + ":3"), c, 2);
            check_same_weights(c, memory, folder);
            CHECK(differing_tensors(c, memory, folder) == 0);
        }
    }
}

TEST_CASE("arch presets: finite logits, and bitwise the same with an emulated GPU holding a quarter of the experts",
          "[arch][slow]") {
    for (const char* preset : ALL_PRESETS) {
        SECTION(preset) {
            const ModelConfig c = synth_preset(synth_preset_parse(preset));
            const ModelWeights w = synth_weights(c, 5, 2);
            const std::vector<int> prompt = {50256, 15496, 11, 703, 389, 345, 30, 50257, 198};
            const std::vector<float> logits = cpu_prefill_logits(c, w, prompt);
            size_t finite = 0;
            for (float x : logits) finite += std::isfinite(x) ? 1 : 0;
            CHECK(finite == logits.size());
            // Not constant: the last position's logits spread.
            const float* last = logits.data() + (prompt.size() - 1) * size_t(c.vocab_size);
            const auto [lo, hi] = std::minmax_element(last, last + c.vocab_size);
            CHECK(*hi - *lo > 1.0f);

            SessionOptions cpu, hybrid;
            cpu.threads = hybrid.threads = 2;
            cpu.ctx = hybrid.ctx = 128;
            hybrid.device.emulate_gpu_expert_share = 0.25;
            const std::shared_ptr<const Model> m = load_model({std::string("synth:") + preset + ":5", 2});
            Session a(m, cpu), b(m, hybrid);
            GenerateRequest request;
            request.prompt = prompt;
            request.sampling.temperature = 0;
            request.max_tokens = 8;
            request.ignore_eos = true;
            request.top_logprobs = 2;
            std::vector<TokenEvent> ea, eb;
            const GenerateResult ra = a.generate(request, [&](const TokenEvent& e) {
                ea.push_back(e);
                return true;
            });
            const GenerateResult rb = b.generate(request, [&](const TokenEvent& e) {
                eb.push_back(e);
                return true;
            });
            REQUIRE(ra.tokens.size() == 8);
            CHECK(rb.tokens == ra.tokens);
            REQUIRE(ea.size() == eb.size());
            for (size_t i = 0; i < ea.size(); i++)
                CHECK(std::memcmp(&ea[i].logprob, &eb[i].logprob, sizeof(float)) == 0);
        }
    }
}

TEST_CASE("arch presets: the stand-in tokenizer and the chat templates of the presets", "[arch]") {
    for (const char* preset : ALL_PRESETS) {
        SECTION(preset) {
            const ScratchModel model(preset, 3);
            SessionOptions o;
            o.threads = 2;
            o.ctx = 128;
            Session e(load_model({model.dir(), o.threads}), o);
            const Tokenizer& t = e.model().tokenizer();
            CHECK(t.vocab_size() == 50265);
            // GPT-2's ids for "Hello world" (byte-level BPE).
            CHECK(t.encode("Hello world", false) == std::vector<int>{15496, 995});
            // Qwen's thinking and tool markers are one plain added token each.
            CHECK(t.encode("<think>x</think><tool_call>", false) == std::vector<int>{50259, 87, 50260, 50261});
            CHECK_FALSE(t.is_control(50259));
            // The preset's Jinja template (Qwen3's, Qwen3.5's, Qwen2.5's, or ChatML), rendered and tokenized.
            std::string warning;
            const ModelChat model_chat(e.model(), &warning);
            CHECK(model_chat.has_jinja());
            ChatInput chat;
            chat.messages = {{ChatRole::USER, "Hi"}};
            chat.messages_json = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi"}}});
            const std::string text = model_chat.text(chat);
            INFO(text);
            CHECK(text.find("<|im_start|>user\nHi<|im_end|>\n") != std::string::npos);
            // Qwen3.5's template opens the reply's thinking; enable_thinking
            // false closes it empty.
            const bool qwen35 = std::string_view(preset) == "qwen35-moe-mini";
            const std::string opening = qwen35 ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n";
            CHECK(text.size() >= opening.size());
            CHECK(text.substr(text.size() - std::min(text.size(), opening.size())) == opening);
            if (qwen35) {
                ChatInput plain = chat;
                plain.extras["enable_thinking"] = false;
                const std::string closed = model_chat.text(plain);
                CHECK(closed.substr(closed.size() - std::min<size_t>(closed.size(), 42))
                          .find("<|im_start|>assistant\n<think>\n\n</think>\n\n") != std::string::npos);
            }
            const std::vector<int> ids = model_chat.prompt(t, chat).ids;
            CHECK(std::count(ids.begin(), ids.end(), 50257) >= 2);                 // <|im_start|> as one special id
            CHECK(std::count(ids.begin(), ids.end(), 50258) >= 1);                 // <|im_end|>
            CHECK(std::count(ids.begin(), ids.end(), 50259) == (qwen35 ? 1 : 0));  // <think>
        }
    }
}

TEST_CASE("arch presets: a missing or mis-shaped tensor of the new roles is named", "[arch]") {
    const ScratchModel model("qwen2-moe-mini", 3);
    const fs::path& src = model.dir();
    const ModelConfig c = model_config_load(src);
    // The same folder read with a config that expects other shapes.
    ModelConfig wider = c;
    wider.shared_hidden_dim += 8;
    std::string message = load_error(wider, src);
    INFO(message);
    CHECK(message.find("model.layers.0.mlp.shared_expert.gate_proj.weight: expected shape") != std::string::npos);
    ModelConfig per_head = c;
    per_head.qk_norm = QkNorm::PER_HEAD;
    message = load_error(per_head, src);
    CHECK(message.find("model.layers.0.self_attn.q_norm.weight: tensor missing") != std::string::npos);
}

// The source is the preset's in-memory weights (the first test case shows
// they are its folder's, byte for byte), so that only the GGUF is on disk.
TEST_CASE("arch presets: a bf16 GGUF of each gives the preset's config, logits and tokenizer", "[arch]") {
    for (const char* preset : PRESETS) {
        SECTION(preset) {
            const ModelSource source = model_source_parse(std::string("synth:") + preset + ":3");
            const ModelConfig c = model_source_config(source);
            const ModelWeights w = model_source_weights(source, c, 2);
            const fs::path out = test_temp_dir(std::string("arch-gguf-") + preset) / "model.gguf";
            const RemovedAtEnd remove_out(out);  // one preset's GGUF on disk at a time
            GgufWriteOptions o;
            o.name = preset;
            o.extra_metadata = model_source_text_metadata(source, c);
            o.threads = 2;
            gguf_model_write(out, c, w, o);

            const GgufFile file(out);
            const std::string arch(file.metadata().get_string("general.architecture"));
            CHECK(arch == (c.architecture == "Qwen3MoeForCausalLM"   ? "qwen3moe"
                           : c.architecture == "Qwen2MoeForCausalLM" ? "qwen2moe"
                                                                     : "olmoe"));
            const ModelConfig g = gguf_model_config(file);
            check_same_config(g, c);
            const ModelWeights gw = gguf_model_weights(g, out);
            check_same_weights(c, gw, w);

            const std::vector<int> prompt = {50256, 15496, 11, 703, 389, 345, 30};
            const std::vector<float> want = cpu_prefill_logits(c, w, prompt);
            const std::vector<float> got = cpu_prefill_logits(g, gw, prompt);
            REQUIRE(got.size() == want.size());
            CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);

            const Tokenizer preset_tokenizer = model_source_tokenizer(source, c);
            const Tokenizer gguf_tokenizer = tokenizer_from_gguf(file.metadata(), out.string());
            // The vocabulary padded to the embedding's rows, as llama.cpp's converter pads it.
            REQUIRE(gguf_tokenizer.vocab_size() == c.vocab_size);
            REQUIRE(preset_tokenizer.vocab_size() < c.vocab_size);
            CHECK(gguf_tokenizer.id_to_piece(c.vocab_size - 1) == "[PAD" + std::to_string(c.vocab_size - 1) + "]");
            const std::string text = "Hello world, <|im_start|>it's 2026!\n  tabs\tand ünïcödé";
            CHECK(gguf_tokenizer.encode(text, false, SpecialTokens::PARSE) ==
                  preset_tokenizer.encode(text, false, SpecialTokens::PARSE));
            CHECK(file.metadata().get_string("tokenizer.chat_template") == synth_chat_template(c));
        }
    }
}

TEST_CASE("arch presets: YaRN RoPE scaling goes into a GGUF as llama.cpp writes it and back", "[arch]") {
    const ModelSource source = model_source_parse("synth:qwen3-moe-mini:3");
    ModelConfig c = model_source_config(source);
    c.rope_scaling = {RopeScaling::Type::YARN, 8.0f, 16, 4.0f, 1.0f, 1.25f, true};
    const ModelWeights w = model_source_weights(source, c, 2);
    const fs::path out = test_temp_dir("arch-gguf-yarn") / "model.gguf";
    const RemovedAtEnd remove_out(out);
    GgufWriteOptions o;
    o.name = "yarn";
    o.extra_metadata = model_source_text_metadata(source, c);
    o.threads = 2;
    gguf_model_write(out, c, w, o);
    const GgufFile file(out);
    const GgufMetadata& m = file.metadata();
    CHECK(m.get_string("qwen3moe.rope.scaling.type") == "yarn");
    CHECK(m.get_float("qwen3moe.rope.scaling.factor") == 8.0);
    CHECK(m.get_int<int>("qwen3moe.rope.scaling.original_context_length") == 16);
    CHECK(m.get_float("qwen3moe.rope.scaling.yarn_beta_fast") == 4.0);
    CHECK(m.get_float("qwen3moe.rope.scaling.yarn_attn_factor") == 1.25);
    const ModelConfig g = gguf_model_config(file);
    check_same_config(g, c);
    // The same rotation, so the same logits; and not those of plain RoPE.
    const std::vector<int> prompt = {50256, 15496, 11, 703, 389, 345, 30, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50};
    const std::vector<float> want = cpu_prefill_logits(c, w, prompt);
    const std::vector<float> got = cpu_prefill_logits(g, gguf_model_weights(g, out), prompt);
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    ModelConfig plain = c;
    plain.rope_scaling = {};
    CHECK(cpu_prefill_logits(plain, w, prompt) != want);
}

TEST_CASE("arch presets: the shared expert counts as dense bytes, read every step, never as a routed expert",
          "[arch]") {
    const ModelConfig c = synth_preset(SynthPreset::QWEN2_MOE_MINI);
    ModelConfig without = c;
    without.shared_hidden_dim = 0;
    // Per layer: gate, up and down (shared x dim each) and the (1, dim) gate, bf16.
    const double shared = double(c.n_layers) * (3.0 * c.shared_hidden_dim * c.dim + c.dim) * 2.0;
    CHECK(cost_dense_bytes(c) - cost_dense_bytes(without) == shared);
    CHECK(cost_decode_token(c).bytes - cost_decode_token(without).bytes == shared);
    CHECK(cost_decode_step(c, 4, 10.0).bytes - cost_decode_step(without, 4, 10.0).bytes == shared);
    CHECK(cost_prefill(c, 16).bytes - cost_prefill(without, 16).bytes == shared);
    // A routed expert is the experts' width alone.
    CHECK(cost_expert(c, 0).bytes == 3.0 * c.hidden_dim * c.dim * 2.0);
    // The loaded weights' format sees the shared expert as a dense matrix.
    const ModelWeights w = synth_weights(c, 1, 2);
    CHECK(weight_format(w).dense == 2.0);
    CHECK(weight_format(w).expert == 2.0);
}

TEST_CASE("arch presets: dense layers among MoE layers run their MLP on the backend and route nothing", "[arch]") {
    ModelConfig c = synth_preset(SynthPreset::QWEN3_MOE_MINI);
    c.n_layers = 3;
    c.dense_layers = {0, 2};  // as mlp_only_layers [0, 2]
    c.dense_hidden_dim = 384;
    const ModelWeights w = synth_weights(c, 9, 2);
    REQUIRE(w.layers[0].experts.empty());
    REQUIRE(w.layers[0].router.empty());
    REQUIRE(w.layers[0].mlp.w1.rows == 384);
    REQUIRE(w.layers[0].shared_gate.empty());
    REQUIRE(w.layers[1].experts.size() == 128);
    REQUIRE(w.layers[1].mlp.empty());

    ThreadPool pool(2);
    auto state = make_sequence_state(c, 1, 64, host_state_memory());
    SequenceState& cache = *state;
    CpuExpertExecutor executor(c, w, pool, 64);
    std::unique_ptr<Backend> backend = make_cpu_backend(c, w, pool, 64, 64 * c.n_experts_active);
    ForwardPass forward(c, *backend, cache, executor, 64, 64);
    Batch batch;
    const std::vector<int> prompt = {50256, 15496, 11, 703, 389};
    for (int i = 0; i < int(prompt.size()); i++) batch.add(prompt[i], i, 0, true);
    RoutingStats stats(c.n_layers, c.n_experts);
    const float* logits = forward.run(batch, &stats);
    for (size_t i = 0; i < prompt.size() * size_t(c.vocab_size); i++) REQUIRE(std::isfinite(logits[i]));
    // Only the MoE layer routes: tokens x top-k there, nothing in the dense layers.
    uint64_t per_layer[3] = {0, 0, 0};
    for (int l = 0; l < c.n_layers; l++)
        for (int e = 0; e < c.n_experts; e++) per_layer[l] += stats.get(l, e);
    CHECK(per_layer[0] == 0);
    CHECK(per_layer[1] == prompt.size() * size_t(c.n_experts_active));
    CHECK(per_layer[2] == 0);
    // The dense layers' MLP matters: without it the logits change.
    ModelWeights no_mlp = synth_weights(c, 9, 2);
    no_mlp.layers[2].mlp.w2 = no_mlp.layers[0].mlp.w2;  // another down projection in layer 2
    std::unique_ptr<Backend> backend2 = make_cpu_backend(c, no_mlp, pool, 64, 64 * c.n_experts_active);
    auto state2 = make_sequence_state(c, 1, 64, host_state_memory());
    SequenceState& cache2 = *state2;
    CpuExpertExecutor executor2(c, no_mlp, pool, 64);
    ForwardPass forward2(c, *backend2, cache2, executor2, 64, 64);
    const std::vector<float> first(logits, logits + c.vocab_size);
    const float* other = forward2.run(batch);
    CHECK(std::memcmp(first.data(), other, first.size() * sizeof(float)) != 0);
}

TEST_CASE(
    "arch presets: with dense layers, an emulated device holding and copying experts gives bitwise the CPU's "
    "logits",
    "[arch]") {
    ModelConfig c = synth_preset(SynthPreset::QWEN3_MOE_MINI);
    c.n_layers = 4;
    c.dense_layers = {0, 3};
    c.dense_hidden_dim = 384;
    const ModelWeights w = synth_weights(c, 4, 2);
    const int max_batch = 32;
    const std::vector<int> prompt = {50256, 15496, 11, 703, 389, 345, 30, 50257};
    auto run = [&](const Residency* residency) {
        ThreadPool pool(2);
        auto state = make_sequence_state(c, 1, 64, host_state_memory());
        SequenceState& cache = *state;
        CpuExpertExecutor cpu(c, w, pool, max_batch);
        std::unique_ptr<EmulatedDevice> device;
        const double expert_bytes = cost_expert(c, 0).bytes;
        // Copying is free and the CPU slow: every non-resident expert is copied.
        LatencyModel model;
        model.cpu = {0, 1000, 1000};
        model.device = {0, 0.001, 0.0001};
        model.copy = {0.001, 1e12};
        model.has_device = true;
        const Residency none(c.n_layers, c.n_experts);
        std::unique_ptr<CachedPlacement> placement = make_cached_placement(
            c, residency ? model : LatencyModel{}, expert_bytes, residency ? *residency : none, {}, {});
        // The device on the CPU's own kernel path, as --emulate-gpu runs it, so
        // bitwise (test_hybrid_execution.cpp runs it on another path).
        if (residency)
            device = std::make_unique<EmulatedDevice>(
                c, w, device_slots(c, *placement), double(placement->n_slots() + DEFAULT_STAGING_SLOTS) * expert_bytes,
                max_batch, pool.size(), isa_active());
        std::unique_ptr<Backend> backend = make_cpu_backend(c, w, pool, cache.ctx(), max_batch * c.n_experts_active);
        HybridExpertExecutor hybrid(c, *backend, cpu, device.get(), std::move(placement));
        ForwardPass forward(c, *backend, cache, hybrid, max_batch, max_batch);
        Batch batch;
        for (int i = 0; i < int(prompt.size()); i++) batch.add(prompt[i], i, 0, true);
        const float* l = forward.run(batch);
        std::vector<float> out(l, l + prompt.size() * size_t(c.vocab_size));
        const uint64_t copied = device ? device->copied_bytes() : 0;
        return std::pair{out, copied};
    };
    // The static plan of the device setup: experts of MoE layers only.
    Residency residency(c.n_layers, c.n_experts);
    for (int e = 0; e < c.n_experts; e += 3) residency.set(1, e, true);
    for (int e = 0; e < c.n_experts; e += 5) residency.set(2, e, true);
    const auto [want, none] = run(nullptr);
    const auto [got, copied] = run(&residency);
    CHECK(copied > 0);
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
}

TEST_CASE("hybrid architectures: GGUF qwen35moe and qwen3next as llama.cpp lays them out, read back", "[arch][gguf]") {
    // quantize writes llama.cpp's names and keys; qwen35moe's value heads go
    // in its tiled order (file head h holds Hugging Face head (h % n_k) r + h / n_k),
    // qwen3next's b and a stay fused per key head. Read back, the model gives
    // the folder's logits: bitwise for qwen3next; for qwen35moe within the
    // rounding of out_proj's sums taken in the heads' new order.
    for (const auto& [name, config] : hybrid_arch_configs()) {
        SECTION(name) {
            const fs::path dir = test_checkpoint_dir("arch", config);
            const ModelConfig c = model_config_load(dir);
            const ModelWeights w = weights_load(c, dir);
            const bool next = c.architecture == "Qwen3NextForCausalLM";
            const fs::path out = test_temp_dir("hybrid-gguf") / "model.gguf";
            const RemovedAtEnd remove_out(out);
            GgufWriteOptions o;
            o.name = name;
            o.threads = 2;
            gguf_model_write(out, c, w, o);

            const GgufFile file(out);
            const GgufMetadata& m = file.metadata();
            const std::string arch(m.get_string("general.architecture"));
            CHECK(arch == (next ? "qwen3next" : "qwen35moe"));
            const std::string p = arch + ".";
            CHECK(m.get_int<int>(p + "ssm.conv_kernel") == 4);
            CHECK(m.get_int<int>(p + "ssm.state_size") == 16);
            CHECK(m.get_int<int>(p + "ssm.group_count") == 2);
            CHECK(m.get_int<int>(p + "ssm.time_step_rank") == 4);
            CHECK(m.get_int<int>(p + "ssm.inner_size") == 64);
            CHECK(m.get_int<int>(p + "rope.dimension_count") == 8);
            CHECK(m.get_int<int>(p + "expert_shared_feed_forward_length") == 32);
            CHECK(m.contains(p + "attention.recurrent_layers"));
            CHECK(m.contains(p + "rope.dimension_sections") == !next);
            for (const char* t : {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_conv1d.weight",
                                  "blk.0.ssm_dt.bias", "blk.0.ssm_a", "blk.0.ssm_norm.weight", "blk.0.ssm_out.weight",
                                  "blk.0.post_attention_norm.weight", "blk.3.attn_q.weight", "blk.3.attn_q_norm.weight",
                                  "blk.3.ffn_gate_inp_shexp.weight", "blk.3.ffn_gate_exps.weight"}) {
                INFO(t);
                CHECK(file.find(t) != nullptr);
            }
            CHECK((file.find("blk.0.ssm_ba.weight") != nullptr) == next);
            CHECK((file.find("blk.0.ssm_beta.weight") != nullptr) == !next);
            CHECK(file.find("blk.3.ssm_a") == nullptr);  // attention layers have no delta net
            // ssm_a holds -exp(A_log); qwen35moe's in the tiled order.
            const TensorView& a = file.tensor("blk.0.ssm_a");
            const float* fa = static_cast<const float*>(a.data);
            for (int h = 0; h < 4; h++) {
                const int hf = next ? h : (h % 2) * 2 + h / 2;
                CHECK(fa[h] == w.layers[0].linear.a[hf]);
            }

            const ModelConfig g = gguf_model_config(file);
            CHECK(g.n_layers == c.n_layers);
            CHECK(g.layer_mixers == c.layer_mixers);
            CHECK(g.rope_dim() == c.rope_dim());
            CHECK(g.linear.conv_dim() == c.linear.conv_dim());
            CHECK(g.linear.fused_ba == next);
            CHECK_FALSE(g.linear.fused_qkvz);
            CHECK(g.linear.v_head_order ==
                  (next ? LinearAttentionShape::VHeadOrder::GROUPED : LinearAttentionShape::VHeadOrder::TILED));
            CHECK(g.shared_hidden_dim == c.shared_hidden_dim);
            CHECK(g.norm_topk_prob);
            const ModelWeights gw = gguf_model_weights(g, out);
            const std::vector<int> prompt = {1, 100, 17, 200, 33, 5, 250, 64};
            const std::vector<float> want = cpu_prefill_logits(c, w, prompt);
            const std::vector<float> got = cpu_prefill_logits(g, gw, prompt);
            REQUIRE(got.size() == want.size());
            if (next) {
                CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
            } else {
                float worst = 0, top = 0;
                for (size_t i = 0; i < got.size(); i++) {
                    worst = std::max(worst, std::fabs(got[i] - want[i]));
                    top = std::max(top, std::fabs(want[i]));
                }
                INFO("max |gguf - folder| = " << worst);
                CHECK(worst <= 1e-4f * (1.0f + top));
            }
        }
    }
}

TEST_CASE("gpt-oss: GGUF as llama.cpp lays it out, read back", "[arch][gguf]") {
    // llama.cpp's gpt-oss names: post_attention_norm, attn_sinks, biases on
    // attn_output and ffn_gate_inp, the experts' biases merged like their
    // matrices; MXFP4 experts stay MXFP4 whatever the mix. Read back, the
    // model gives the folder's logits bitwise, once the folder's YaRN blend
    // is rounded outward as llama.cpp always does (the GGUF's reading).
    for (const auto& [name, config] : gpt_oss_arch_configs()) {
        SECTION(name) {
            const fs::path dir = test_checkpoint_dir("arch", config);
            ModelConfig c = model_config_load(dir);
            const ModelWeights w = weights_load(c, dir);
            const bool mxfp4 = w.layers[0].experts[0].w1.type == DType::MXFP4;
            CHECK(mxfp4 == config.contains("quantization_config"));
            // Costs, the planner and the device slots count MXFP4's real bytes
            // (17 a block of 32) and the biases (2 hidden + dim floats an expert).
            const double per_weight = (mxfp4 ? 17.0 / 32.0 : 2.0) + 4.0 * (2 * 64 + 64) / (3.0 * 64 * 64);
            CHECK(weight_format(w).expert == Approx(per_weight));
            CHECK(expert_slot_bytes(w) == (mxfp4 ? 3 * 2176 : 3 * 8192) + 3 * 256);
            const fs::path out = test_temp_dir("gpt-oss-gguf") / "model.gguf";
            const RemovedAtEnd remove_out(out);
            GgufWriteOptions o;
            o.name = name;
            o.threads = 2;
            o.mix = QuantMix::BF16;
            gguf_model_write(out, c, w, o);

            const GgufFile file(out);
            const GgufMetadata& m = file.metadata();
            CHECK(m.get_string("general.architecture") == "gpt-oss");
            CHECK(m.get_int<int>("gpt-oss.attention.sliding_window") == 4);
            CHECK(m.get_int<int>("gpt-oss.expert_feed_forward_length") == 64);
            CHECK(m.get_string("gpt-oss.rope.scaling.type") == "yarn");
            for (const char* t : {"blk.0.attn_sinks.weight", "blk.0.attn_output.bias", "blk.0.attn_q.bias",
                                  "blk.0.post_attention_norm.weight", "blk.0.ffn_gate_inp.bias",
                                  "blk.0.ffn_gate_exps.bias", "blk.0.ffn_up_exps.bias", "blk.0.ffn_down_exps.bias"}) {
                INFO(t);
                CHECK(file.find(t) != nullptr);
            }
            CHECK(file.tensor("blk.1.ffn_up_exps.bias").shape == std::vector<int64_t>{16, 64});
            CHECK(file.tensor("blk.1.ffn_down_exps.weight").dtype == (mxfp4 ? DType::MXFP4 : DType::BF16));

            const ModelConfig g = gguf_model_config(file);
            CHECK(g.architecture == "GptOssForCausalLM");
            CHECK(g.layer_mixers == c.layer_mixers);
            CHECK(g.sliding_window == c.sliding_window);
            CHECK((g.attn_sinks && g.o_bias && g.router_bias && g.expert_bias));
            CHECK(g.rope_scaling.truncate);
            CHECK(g.ffn_act.limit == c.ffn_act.limit);  // 1 for the MXFP4 one: llama.cpp's swiglu_clamp_exp
            CHECK(m.contains("gpt-oss.swiglu_clamp_exp") == (c.ffn_act.limit != 7.0f));
            const ModelWeights gw = gguf_model_weights(g, out);
            c.rope_scaling.truncate = true;
            const std::vector<int> prompt = {1, 100, 17, 200, 33, 5, 250, 64};
            const std::vector<float> want = cpu_prefill_logits(c, w, prompt);
            const std::vector<float> got = cpu_prefill_logits(g, gw, prompt);
            REQUIRE(got.size() == want.size());
            CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
        }
    }
}
