// GGUF models (engine/model/gguf_model.h) against the Hugging Face folder
// they came from: ../shared/data/reference/gguf/hf (random weights, bf16)
// and llama.cpp's own conversion of it (Q8_0.gguf, Q4_K_M.gguf). The test
// writes a bf16 GGUF of the folder in llama.cpp's layout itself, with the
// q/k row permutation spelled as llama.cpp's converter does it (reshape
// (n_head, 2, head_dim / 2, cols), swap the middle axes), independently of
// the loader's gguf_llama_row.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpu_forward.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/devices/backend.h"
#include "engine/devices/expert_executor.h"
#include "engine/formats/gguf.h"
#include "engine/model/fingerprint.h"
#include "engine/model/gguf_model.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/session.h"
#include "engine/runtime/token_mixer.h"
#include "test_support.h"
#include "weights_compare.h"

namespace fs = std::filesystem;

namespace {

fs::path reference_dir() {
    return shared_data_dir() / "reference" / "gguf";
}

// The rows of a q or k projection (rows, cols) of elem_bytes elements
// permuted as llama.cpp's converter permutes them: per head,
// reshape(2, head_dim / 2) then transpose, so row (half, i) moves to (i, half).
std::vector<char> llama_permute(const char* src, int64_t rows, size_t row_bytes, int head_dim) {
    std::vector<char> out(size_t(rows) * row_bytes);
    const int64_t half = head_dim / 2;
    for (int64_t h = 0; h < rows / head_dim; h++)
        for (int64_t part = 0; part < 2; part++)
            for (int64_t i = 0; i < half; i++) {
                const int64_t from = h * head_dim + part * half + i, to = h * head_dim + i * 2 + part;
                std::memcpy(out.data() + size_t(to) * row_bytes, src + size_t(from) * row_bytes, row_bytes);
            }
    return out;
}

// The folder's model as a bf16 GGUF in llama.cpp's layout: metadata keys,
// tensor names, q/k permuted, experts merged into 3-D tensors.
void write_llama_gguf(const fs::path& out, const ModelConfig& c, const ModelWeights& w) {
    std::vector<GgufKeyValue> meta = {
        {"general.architecture", "llama"},
        {"llama.embedding_length", uint32_t(c.dim)},
        {"llama.feed_forward_length", uint32_t(c.hidden_dim)},
        {"llama.block_count", uint32_t(c.n_layers)},
        {"llama.attention.head_count", uint32_t(c.n_heads)},
        {"llama.attention.head_count_kv", uint32_t(c.n_kv_heads)},
        {"llama.expert_count", uint32_t(c.n_experts)},
        {"llama.expert_used_count", uint32_t(c.n_experts_active)},
        {"llama.rope.freq_base", c.rope_theta},
        {"llama.attention.layer_norm_rms_epsilon", c.rms_norm_eps},
        {"llama.context_length", uint32_t(c.max_position_embeddings)},
        {"tokenizer.ggml.bos_token_id", uint32_t(c.bos_token_id)},
        {"tokenizer.ggml.eos_token_id", uint32_t(c.eos_token_ids.at(0))},
    };
    // The vocabulary as llama.cpp's converter wrote it for the same folder.
    GgufFile reference(reference_dir() / "Q8_0.gguf");
    for (GgufKeyValue& kv : reference.metadata().values())
        if (kv.key.rfind("tokenizer.", 0) == 0 && kv.key.find("_token_id") == std::string::npos) meta.push_back(kv);
    std::vector<std::vector<char>> storage;
    std::vector<TensorView> tensors;
    auto add = [&](const std::string& name, DType type, std::vector<int64_t> shape, std::vector<char> bytes) {
        storage.push_back(std::move(bytes));
        TensorView t;
        t.name = name;
        t.dtype = type;
        t.shape = std::move(shape);
        t.nbytes = storage.back().size();
        tensors.push_back(t);
    };
    auto bytes_of = [](const void* p, size_t n) {
        const char* b = static_cast<const char*>(p);
        return std::vector<char>(b, b + n);
    };
    auto matrix = [&](const std::string& name, const WeightView& m) {
        add(name, m.type, {m.rows, m.cols}, bytes_of(m.data, m.bytes()));
    };
    auto vector = [&](const std::string& name, const float* v) {
        add(name, DType::F32, {c.dim}, bytes_of(v, size_t(c.dim) * sizeof(float)));
    };
    matrix("token_embd.weight", w.embed);
    for (int l = 0; l < c.n_layers; l++) {
        const LayerWeights& L = w.layers[size_t(l)];
        const std::string p = "blk." + std::to_string(l) + ".";
        vector(p + "attn_norm.weight", L.attn_norm);
        add(p + "attn_q.weight", L.wq.type, {L.wq.rows, L.wq.cols},
            llama_permute(static_cast<const char*>(L.wq.data), L.wq.rows, L.wq.row_bytes, c.head_dim));
        add(p + "attn_k.weight", L.wk.type, {L.wk.rows, L.wk.cols},
            llama_permute(static_cast<const char*>(L.wk.data), L.wk.rows, L.wk.row_bytes, c.head_dim));
        matrix(p + "attn_v.weight", L.wv);
        matrix(p + "attn_output.weight", L.wo);
        vector(p + "ffn_norm.weight", L.ffn_norm);
        matrix(p + "ffn_gate_inp.weight", L.router);
        const char* kinds[] = {"gate", "up", "down"};
        for (int k = 0; k < 3; k++) {
            std::vector<char> all;
            const WeightView& first = k == 0 ? L.experts[0].w1 : k == 1 ? L.experts[0].w3 : L.experts[0].w2;
            for (const ExpertWeights& e : L.experts) {
                const WeightView& m = k == 0 ? e.w1 : k == 1 ? e.w3 : e.w2;
                std::vector<char> b = bytes_of(m.data, m.bytes());
                all.insert(all.end(), b.begin(), b.end());
            }
            add(p + "ffn_" + kinds[k] + "_exps.weight", first.type, {int64_t(c.n_experts), first.rows, first.cols},
                std::move(all));
        }
    }
    vector("output_norm.weight", w.final_norm);
    matrix("output.weight", w.lm_head);
    for (size_t i = 0; i < tensors.size(); i++) tensors[i].data = storage[i].data();
    gguf_write(out, meta, tensors);
}

// The reference folder loaded, and its bf16 GGUF in llama.cpp's layout
// written as tag/model-bf16.gguf.
struct FolderAndGguf {
    ModelConfig config;
    ModelWeights weights;
    fs::path file;

    explicit FolderAndGguf(const std::string& tag)
        : config(model_config_load(reference_dir() / "hf")),
          weights(weights_load(config, reference_dir() / "hf")),
          file(test_temp_dir(tag) / "model-bf16.gguf") {
        write_llama_gguf(file, config, weights);
    }
};

}  // namespace

TEST_CASE("gguf model: llama.cpp's layout gives the folder's config, weights and logits", "[gguf_model]") {
    const FolderAndGguf m("gguf_model_layout");
    const ModelConfig& c = m.config;
    const ModelWeights& w = m.weights;
    const fs::path& file = m.file;
    REQUIRE(gguf_model_path(file));

    const ModelConfig g = gguf_model_config(file);
    // Every field the model's shape and arithmetic follow (the fingerprint
    // profiles carry), and the special ids.
    CHECK(model_fingerprint_text(g) == model_fingerprint_text(c));
    CHECK(g.bos_token_id == c.bos_token_id);
    CHECK(g.eos_token_ids == c.eos_token_ids);

    const ModelWeights gw = gguf_model_weights(g, file);
    check_same_weights(c, w, gw);
    // Experts and dense matrices are read in place from the mapping.
    const TensorView* gate = gw.gguf->find("blk.1.ffn_gate_exps.weight");
    REQUIRE(gate);
    CHECK(gw.layers[1].experts[2].w1.data == static_cast<const char*>(gate->data) + 2 * gate->nbytes / 4);

    const std::vector<int> tokens = {1, 415, 5565, 302, 4843, 349, 264, 2475, 28723, 13};
    CHECK(cpu_prefill_logits(g, gw, tokens) == cpu_prefill_logits(c, w, tokens));
}

TEST_CASE("gguf model: a lone GGUF file serves like its folder", "[gguf_model]") {
    const FolderAndGguf m("gguf_model_engine");
    auto run = [](const fs::path& model) {
        SessionOptions o;
        o.threads = 2;
        o.ctx = 128;
        Session engine(load_model({model.string(), o.threads}), o);
        GenerateRequest req;
        req.prompt = engine.model().tokenizer().encode("The capital of France is");
        req.prompt.insert(req.prompt.begin(), engine.model().config().bos_token_id);
        req.sampling.temperature = 0;
        req.max_tokens = 12;
        req.ignore_eos = true;
        std::vector<int> out;
        engine.generate(req, [&](const TokenEvent& e) {
            out.push_back(e.token);
            return true;
        });
        return std::make_pair(engine.model().model_id(), out);
    };
    auto [gguf_id, gguf_tokens] = run(m.file);
    auto [hf_id, hf_tokens] = run(reference_dir() / "hf");
    CHECK(gguf_id == "model-bf16");
    CHECK(gguf_tokens.size() == 12);
    CHECK(gguf_tokens == hf_tokens);
}

TEST_CASE("gguf model: gguf_llama_row is the converter's permutation", "[gguf_model]") {
    const int head_dim = 8;
    std::vector<char> rows(3 * head_dim);
    for (size_t i = 0; i < rows.size(); i++) rows[i] = char(i);
    std::vector<char> permuted = llama_permute(rows.data(), 3 * head_dim, 1, head_dim);
    for (int64_t r = 0; r < 3 * head_dim; r++) CHECK(permuted[size_t(gguf_llama_row(r, head_dim))] == char(r));
}

TEST_CASE("gguf model: llama.cpp's Q8_0 and Q4_K_M files map onto the folder's model", "[gguf_model]") {
    const ModelConfig c = model_config_load(reference_dir() / "hf");
    for (const char* name : {"Q8_0.gguf", "Q4_K_M.gguf"}) {
        INFO(name);
        const fs::path file = reference_dir() / name;
        const ModelConfig g = gguf_model_config(file);
        CHECK(model_fingerprint_text(g) == model_fingerprint_text(c));
        const ModelWeights w = gguf_model_weights(g, file);
        const bool q8 = std::string(name) == "Q8_0.gguf";
        // Q8_0, Q4_K and Q6_K matrices are held with 8 rows interleaved, copied out of the mapping.
        CHECK(w.layers[0].experts[3].w1.type == (q8 ? DType::Q8_0_R8 : DType::Q4_K_R8));
        CHECK(w.layers[0].router.type == DType::BF16);  // f32 in the file, converted once
        CHECK(w.embed.type == (q8 ? DType::Q8_0_R8 : DType::Q4_K_R8));
        CHECK(w.lm_head.type == (q8 ? DType::Q8_0_R8 : DType::Q6_K_R8));
        const TensorView& e3 = w.gguf->tensor("blk.0.ffn_gate_exps.weight");
        const char* mapped = static_cast<const char*>(e3.data);
        const char* held = static_cast<const char*>(w.layers[0].experts[3].w1.data);
        CHECK((held < mapped || held >= mapped + e3.nbytes));
    }
}

TEST_CASE("gguf model: a file that is not a model of this shape gives one line naming it", "[gguf_model]") {
    const FolderAndGguf m("gguf_model_errors");
    const ModelConfig& c = m.config;
    const fs::path dir = m.file.parent_path();
    GgufFile source(m.file);

    // Rewrites the file with one metadata key or tensor changed.
    auto variant = [&](const std::string& tag, const std::function<void(std::vector<GgufKeyValue>&)>& meta,
                       const std::function<void(std::vector<TensorView>&)>& tensors) {
        std::vector<GgufKeyValue> m = source.metadata().values();
        std::vector<TensorView> t = source.tensors();
        meta(m);
        tensors(t);
        const fs::path out = dir / (tag + ".gguf");
        gguf_write(out, m, t);
        return out;
    };
    auto no_meta = [](std::vector<GgufKeyValue>&) {};
    auto no_tensors = [](std::vector<TensorView>&) {};

    fs::path arch = variant(
        "arch", [](auto& m) { m[0].value = GgufValue("deepseek2"); }, no_tensors);
    check_error_line(moe_error_of([&] { gguf_model_config(arch); }), arch,
                     "general.architecture: 'deepseek2' is not supported");
    // A known architecture whose keys are under another prefix: the first missing key is named.
    fs::path qwen = variant(
        "qwen", [](auto& m) { m[0].value = GgufValue("qwen3moe"); }, no_tensors);
    check_error_line(moe_error_of([&] { gguf_model_config(qwen); }), qwen, "qwen3moe.embedding_length: missing key");

    fs::path no_heads = variant(
        "heads",
        [](auto& m) {
            std::erase_if(m, [](const GgufKeyValue& kv) { return kv.key == "llama.attention.head_count"; });
        },
        no_tensors);
    check_error_line(moe_error_of([&] { gguf_model_config(no_heads); }), no_heads,
                     "llama.attention.head_count: missing key");

    fs::path missing = variant("missing", no_meta, [](auto& t) {
        std::erase_if(t, [](const TensorView& v) { return v.name == "blk.1.attn_k.weight"; });
    });
    check_error_line(moe_error_of([&] { gguf_model_weights(c, missing); }), missing,
                     "blk.1.attn_k.weight: tensor missing");

    fs::path experts = variant("experts", no_meta, [](auto& t) {
        for (TensorView& v : t)
            if (v.name == "blk.0.ffn_down_exps.weight") {
                v.shape = {v.shape[0] / 2, v.shape[1] * 2, v.shape[2]};
            }
    });
    check_error_line(moe_error_of([&] { gguf_model_weights(c, experts); }), experts,
                     "blk.0.ffn_down_exps.weight: expected shape [n_experts, 256, 512]");

    fs::path norm = variant("norm", no_meta, [](auto& t) {
        for (TensorView& v : t)
            if (v.name == "output_norm.weight") {
                v.shape = {v.shape[0] / 2};
                v.nbytes /= 2;
            }
    });
    check_error_line(moe_error_of([&] { gguf_model_weights(c, norm); }), norm,
                     "output_norm.weight: expected shape [256]");
}

namespace {

// `moe-server perplexity --json` of a model over the reference text (one
// window, BOS first: 897 predictions).
double perplexity_of(const fs::path& model, bool llama_cpp_protocol = false) {
    std::vector<std::string> args = {
        "perplexity", "--model", model.string(), "--text", (reference_dir() / "text.txt").string(),
        "--threads",  "2",       "--json"};
    if (llama_cpp_protocol) args.insert(args.end(), {"--ctx", "128", "--chunks"});
    CommandResult r = moe(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out).at("ppl").get<double>();
}

}  // namespace

TEST_CASE("gguf model: quantize q8_0 writes llama.cpp's Q8_0 file tensor for tensor", "[gguf_model]") {
    const fs::path out = test_temp_dir("gguf_quantize_q8") / "q8_0.gguf";
    CommandResult r =
        moe({"quantize", "--model", (reference_dir() / "hf").string(), "--type", "q8_0", "--out", out.string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    GgufFile ours(out), theirs(reference_dir() / "Q8_0.gguf");
    REQUIRE(ours.tensors().size() == theirs.tensors().size());
    for (const TensorView& t : theirs.tensors()) {
        INFO(t.name);
        const TensorView* o = ours.find(t.name);
        REQUIRE(o);
        CHECK(o->dtype == t.dtype);
        CHECK(o->shape == t.shape);
        REQUIRE(o->nbytes == t.nbytes);
        CHECK(std::memcmp(o->data, t.data, t.nbytes) == 0);
    }
    // The vocabulary is llama.cpp's too.
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
        INFO(key);
        CHECK(ours.metadata().get_value(key) == theirs.metadata().get_value(key));
    }
}

TEST_CASE("gguf model: perplexity from llama.cpp's files and our own quantizations tracks the folder's",
          "[gguf_model][slow]") {
    // Random weights make the distribution nearly flat (perplexity ~5e4 of
    // a 32000 vocabulary), so quantization moves it little: llama.cpp
    // measured +0.24 % for Q8_0 and +3.1 % for Q4_K_M against bf16 on its
    // own protocol (../shared/data/reference/gguf/README.md).
    const double hf = perplexity_of(reference_dir() / "hf");
    CHECK(std::fabs(hf / 54633.39 - 1) < 1e-3);  // the float64 reference's figure for this text
    CHECK(std::fabs(perplexity_of(reference_dir() / "Q8_0.gguf") / hf - 1) < 0.005);
    const double q4 = perplexity_of(reference_dir() / "Q4_K_M.gguf");
    CHECK(q4 / hf - 1 > 0.0);
    CHECK(q4 / hf - 1 < 0.06);

    const fs::path dir = test_temp_dir("gguf_quantize_mixes");
    for (const char* mix : {"f32", "q4_k_m", "q5_k_m", "q4_0"}) {
        INFO(mix);
        const fs::path out = dir / (std::string(mix) + ".gguf");
        CommandResult r =
            moe({"quantize", "--model", (reference_dir() / "hf").string(), "--type", mix, "--out", out.string()});
        INFO(r.err);
        REQUIRE(r.exit_code == 0);
        const double ppl = perplexity_of(out);
        CHECK(std::fabs(ppl / hf - 1) < 0.06);
        // f32 holds the folder's bf16 values exactly; only the order of the sums differs.
        if (std::string(mix) == "f32") CHECK(std::fabs(ppl / hf - 1) < 1e-5);
        if (std::string(mix) == "q4_k_m") CHECK(ppl / hf - 1 <= (q4 / hf - 1) * 1.25);  // no worse than llama.cpp's
    }
}

TEST_CASE("gguf model: perplexity on llama.cpp's protocol is its recorded figure", "[gguf_model]") {
    // llama-perplexity -c 128 -b 128 (../shared/data/reference/gguf/README.md):
    // 7 chunks of 128 tokens, BOS first, the second halves scored.
    CHECK(std::fabs(perplexity_of(reference_dir() / "hf", true) / 52647.55 - 1) < 5e-4);  // float64 reference
    CHECK(std::fabs(perplexity_of(reference_dir() / "Q8_0.gguf", true) / 52760.3274 - 1) < 5e-3);
    CHECK(std::fabs(perplexity_of(reference_dir() / "Q4_K_M.gguf", true) / 54285.1726 - 1) < 5e-3);
}

TEST_CASE("gguf model: quantize mixes give each matrix its type", "[gguf_model]") {
    const fs::path hf = reference_dir() / "hf";
    const fs::path dir = test_temp_dir("gguf_quantize_types");
    auto types = [&](const std::vector<std::string>& flags) {
        const fs::path out = dir / "m.gguf";
        std::vector<std::string> args = {"quantize", "--model", hf.string(), "--out", out.string()};
        args.insert(args.end(), flags.begin(), flags.end());
        CommandResult r = moe(args);
        INFO(r.err);
        REQUIRE(r.exit_code == 0);
        GgufFile f(out);
        std::map<std::string, DType> t;
        for (const TensorView& v : f.tensors()) t[v.name] = v.dtype;
        return t;
    };
    std::map<std::string, DType> k = types({"--type", "q4_k_m"});
    CHECK(k.at("token_embd.weight") == DType::Q4_K);
    CHECK(k.at("output.weight") == DType::Q6_K);
    CHECK(k.at("blk.0.ffn_gate_exps.weight") == DType::Q4_K);
    CHECK(k.at("blk.0.ffn_down_exps.weight") == DType::Q4_K);  // of 2 layers, only the last eighth widens
    CHECK(k.at("blk.1.ffn_down_exps.weight") == DType::Q6_K);
    CHECK(k.at("blk.1.attn_v.weight") == DType::Q6_K);
    CHECK(k.at("blk.0.ffn_gate_inp.weight") == DType::F32);
    CHECK(k.at("blk.0.attn_norm.weight") == DType::F32);
    std::map<std::string, DType> e = types({"--type", "q4_k_m", "--experts-only"});
    CHECK(e.at("token_embd.weight") == DType::BF16);
    CHECK(e.at("blk.1.attn_q.weight") == DType::BF16);
    CHECK(e.at("output.weight") == DType::BF16);
    CHECK(e.at("blk.1.ffn_up_exps.weight") == DType::Q4_K);
    std::map<std::string, DType> b = types({"--type", "bf16"});
    CHECK(b.at("blk.1.ffn_up_exps.weight") == DType::BF16);
    CHECK(b.at("output.weight") == DType::BF16);

    // --fast-scales: the same types, other bytes (the blocks' scales from
    // their range), and a model that scores near the folder's.
    const fs::path fast = dir / "fast.gguf", searched = dir / "searched.gguf";
    REQUIRE(moe({"quantize", "--model", hf.string(), "--type", "q4_k_m", "--out", searched.string()}).exit_code == 0);
    CommandResult r = moe({"quantize", "--model", hf.string(), "--type", "q4_k_m", "--fast-scales", "--out", fast.string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("(q4_k_m, fast scales)") != std::string::npos);
    CHECK(r.err.find("\r") == std::string::npos);  // no progress bar where stderr is no terminal
    GgufFile f(fast), g(searched);
    REQUIRE(f.tensors().size() == g.tensors().size());
    bool differs = false;
    for (const TensorView& t : g.tensors()) {
        const TensorView* o = f.find(t.name);
        REQUIRE(o);
        CHECK(o->dtype == k.at(t.name));
        REQUIRE(o->nbytes == t.nbytes);
        differs |= std::memcmp(o->data, t.data, t.nbytes) != 0;
    }
    CHECK(differs);
    CHECK(std::fabs(perplexity_of(fast) / perplexity_of(hf) - 1) < 0.06);
}

TEST_CASE("gguf model: quantize refuses bad arguments in one line", "[gguf_model]") {
    const fs::path hf = reference_dir() / "hf";
    const fs::path dir = test_temp_dir("gguf_quantize_errors");
    CommandResult bad = moe({"quantize", "--model", hf.string(), "--type", "q3_k", "--out", (dir / "x.gguf").string()});
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("--type: 'q3_k' is not one of") != std::string::npos);
    CommandResult folder = moe({"quantize", "--model", hf.string(), "--type", "q8_0", "--out", dir.string()});
    CHECK(folder.exit_code == 2);
    CHECK(folder.err.find(dir.string()) != std::string::npos);
    CommandResult missing = moe({"quantize", "--type", "q8_0", "--out", (dir / "x.gguf").string()});
    CHECK(missing.exit_code == 2);
    CHECK(!fs::exists(dir / "x.gguf"));
}

TEST_CASE("gguf model: greedy continuations are llama.cpp's on its own files", "[gguf_model]") {
    // llama-cli --temp 0, 16 tokens after BOS + "The capital of France is"
    // (../shared/data/reference/gguf/README.md); a raw completion continues
    // the prompt's text, so its first space is kept, as llama.cpp prints it.
    const std::vector<std::pair<std::string, std::string>> expected = {
        {"hf",
         " Antonschaft setTimeout filled medic import$), Democratic\xE6\x97\xA0MF activation "
         "suppl\x79\xC3\xA7\x61Identifier natur shore"},
        {"Q8_0.gguf",
         " Antonschaft setTimeout filled stamp CatalogueWARE platformhabil lista performance Engineering "
         "spun jego bigger determines"},
        {"Q4_K_M.gguf",
         " Anton was gowntemdhd Penn\xD1\x87\xD0\xBD\xD0\xBE\xD0\xB3\xD0\xBE\xE6\xBA\xAA Central "
         "Years\x6F\x77\x61\xC5\x82 influential\xEC\x9D\x80\x66\xC3\xB6\xE0\xB0\xB2 ser"},
    };
    for (const auto& [name, text] : expected) {
        INFO(name);
        CommandResult r =
            moe({"generate", "--model", (reference_dir() / name).string(), "--prompt", "The capital of France is",
                 "--max-tokens", "16", "--greedy", "--ignore-eos", "--threads", "2"});
        INFO(r.err);
        REQUIRE(r.exit_code == 0);
        CHECK(r.out == "The capital of France is" + text + "\n");
    }
}
