// Model sources (see model_source.h): the one parser of --model strings and
// the dispatch of each part of a model to the folder loader or to the
// in-memory synthetic weights (engine/model/synth_model.h).
#include "engine/model/model_source.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>

#include "base/errors.h"
#include "base/files.h"
#include "engine/model/gguf_model.h"
#include "engine/model/host_memory.h"
#include "engine/model/synth_model.h"
#include "engine/text/gguf_tokenizer.h"
#include "engine/text/hf_tokenizer.h"

namespace fs = std::filesystem;

namespace {

constexpr std::string_view SYNTH_PREFIX = "synth:";
constexpr uint64_t SYNTH_SEED_MAX = uint64_t(1) << 62;  // as synth-model's --seed
constexpr const char* EMBEDDED_TOKENIZER = "embedded:mistral-v1.model";

// What a synthetic string must look like, for error messages.
std::string synth_usage() {
    return "expected synth:PRESET[:SEED], PRESET one of " + synth_preset_list() + ": random weights built in memory, a benchmark aid";
}

MoeError synth_error(std::string_view text, const std::string& what) {
    return MoeError("synthetic model '" + std::string(text) + "': " + what + " (" + synth_usage() + ")");
}

// 4.3 MB, 93.4 GB.
std::string bytes_text(uint64_t bytes) {
    char buf[64];
    if (bytes >= uint64_t(1e9))
        std::snprintf(buf, sizeof buf, "%.1f GB", double(bytes) / 1e9);
    else
        std::snprintf(buf, sizeof buf, "%.1f MB", double(bytes) / 1e6);
    return buf;
}

}  // namespace

ModelSource model_source_parse(std::string_view text) {
    ModelSource s;
    s.text = std::string(text);
    if (text.substr(0, SYNTH_PREFIX.size()) != SYNTH_PREFIX) {
        s.dir = s.text;
        s.gguf = gguf_model_path(s.dir);
        return s;
    }
    s.synthetic = true;
    std::string_view rest = text.substr(SYNTH_PREFIX.size());
    size_t colon = rest.find(':');
    const std::string_view name = rest.substr(0, colon);
    if (name.empty()) throw synth_error(text, "no preset");
    const std::optional<SynthPreset> preset = synth_preset_find(name);
    if (!preset) throw synth_error(text, "unknown preset '" + std::string(name) + "'");
    s.preset = *preset;
    if (colon == std::string_view::npos) return s;
    std::string_view seed = rest.substr(colon + 1);
    if (seed.find(':') != std::string_view::npos) throw synth_error(text, "too many ':' parts");
    auto [end, ec] = std::from_chars(seed.data(), seed.data() + seed.size(), s.seed);
    if (seed.empty() || ec != std::errc() || end != seed.data() + seed.size() || s.seed > SYNTH_SEED_MAX)
        throw synth_error(text, "seed '" + std::string(seed) + "' is not a whole number in [0, 2^62]");
    return s;
}

std::string model_source_id(const ModelSource& s) {
    if (s.synthetic) return std::string(SYNTH_PREFIX) + synth_preset_name(s.preset) + ":" + std::to_string(s.seed);
    fs::path p = fs::absolute(s.dir).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    return (s.gguf ? p.stem() : p.filename()).string();
}

std::string model_source_note(const ModelSource& s) {
    if (!s.synthetic) return "";
    return model_source_id(s) + ": random weights of synth-model preset " + synth_preset_name(s.preset) + ", seed " +
           std::to_string(s.seed) + " (" + bytes_text(synth_memory_bytes(synth_preset(s.preset))) +
           "), built in memory: a benchmark aid, not a real model (its text is gibberish)";
}

std::string model_source_where(const ModelSource& s) {
    return s.synthetic ? "random weights built in memory (a benchmark aid)" : s.dir.string();
}

ModelConfig model_source_config(const ModelSource& s) {
    if (s.synthetic) return synth_preset(s.preset);
    return s.gguf ? gguf_model_config(s.dir) : model_config_load(s.dir);
}

void model_source_check_memory(const ModelSource& s, const ModelConfig& config, uint64_t available_bytes) {
    if (!s.synthetic || available_bytes == 0) return;
    const uint64_t needed = synth_memory_bytes(config);
    if (needed <= available_bytes) return;
    throw MoeError(model_source_id(s) + ": preset " + synth_preset_name(s.preset) + " needs " + std::to_string(needed) + " bytes (" +
                   bytes_text(needed) + ") of memory for its random weights, but only " +
                   std::to_string(available_bytes) + " bytes (" + bytes_text(available_bytes) +
                   ") are available (MemAvailable in /proc/meminfo)");
}

ModelWeights model_source_weights(const ModelSource& s, const ModelConfig& config, int threads) {
    if (s.gguf) return gguf_model_weights(config, s.dir);
    if (!s.synthetic) return weights_load(config, s.dir);
    model_source_check_memory(s, config, host_memory_available());
    return synth_weights(config, s.seed, threads);
}

std::shared_ptr<const ModelWeights> model_source_shared_weights(const ModelSource& s, const ModelConfig& config,
                                                                int threads,
                                                                std::shared_ptr<const ModelWeights> loaded) {
    if (!loaded) return std::make_shared<const ModelWeights>(model_source_weights(s, config, threads));
    if (loaded->layers.size() != size_t(config.n_layers))
        throw MoeError("the weights given have " + std::to_string(loaded->layers.size()) + " layers, " +
                       model_source_id(s) + " has " + std::to_string(config.n_layers));
    return loaded;
}

Tokenizer model_source_tokenizer(const ModelSource& s, const ModelConfig& config) {
    // A folder: tokenizer.model when it has one (SentencePiece), else tokenizer.json.
    const bool hf_json =
        !s.synthetic && !s.gguf && !file_exists(s.dir / "tokenizer.model") && file_exists(s.dir / "tokenizer.json");
    if (s.synthetic && synth_uses_standin_tokenizer(config)) {
        // As the written folder's tokenizer_config.json: add_bos_token false.
        const HfSpecialTokens specials{
            "<|endoftext|>", config.architecture == "OlmoeForCausalLM" ? "<|endoftext|>" : "<|im_end|>", false};
        return hf_tokenizer_parse(synth_standin_tokenizer_json(), "synth-model's stand-in tokenizer.json", specials);
    }
    const std::string where = s.synthetic ? EMBEDDED_TOKENIZER
                              : s.gguf    ? s.dir.string()
                              : hf_json   ? (s.dir / "tokenizer.json").string()
                                          : (s.dir / "tokenizer.model").string();
    Tokenizer t = s.synthetic ? Tokenizer::from_bytes(synth_embedded_tokenizer(), where)
                  : s.gguf    ? tokenizer_from_gguf(GgufFile(s.dir).metadata(), where)
                  : hf_json   ? hf_tokenizer_load_dir(s.dir)
                              : Tokenizer::load(where);
    if (t.vocab_size() > config.vocab_size)
        throw MoeError(where + ": vocabulary of " + std::to_string(t.vocab_size()) +
                       " pieces exceeds the model's vocab_size " + std::to_string(config.vocab_size));
    // A vocab_size padded above the tokenizer (Qwen's: 151936 for 151669
    // tokens) is accepted: the ids above the tokenizer's are never sampled
    // nor accepted in a prompt (a Session uses the tokenizer's size).
    return t;
}

namespace {

// The tokenizer.ggml.* keys of the source's own vocabulary, as long as it is.
std::vector<GgufKeyValue> vocabulary_metadata(const ModelSource& s, const ModelConfig& config) {
    std::vector<GgufKeyValue> kv;
    if (s.gguf) {
        for (GgufKeyValue& v : GgufFile(s.dir).metadata().values())
            if (v.key.rfind("tokenizer.", 0) == 0) kv.push_back(std::move(v));
        return kv;
    }
    const int eos = config.eos_token_ids.at(0);
    if (s.synthetic && synth_uses_standin_tokenizer(config)) {
        const std::string source = "synth-model's stand-in tokenizer.json";
        kv = gguf_bpe_tokenizer_metadata(json_parse_bounded(synth_standin_tokenizer_json(), JSON_FILE_LIMITS, source),
                                         source, config.bos_token_id, eos);
        kv.push_back({"tokenizer.chat_template", synth_chat_template(config)});
        return kv;
    }
    if (s.synthetic) {
        kv = gguf_tokenizer_metadata(synth_embedded_tokenizer(), EMBEDDED_TOKENIZER, config.bos_token_id, eos);
        kv.push_back({"tokenizer.chat_template", SYNTH_MIXTRAL_CHAT_TEMPLATE});
        return kv;
    }
    const fs::path model = s.dir / "tokenizer.model", json_path = s.dir / "tokenizer.json";
    if (!file_exists(model) && file_exists(json_path))
        kv = gguf_bpe_tokenizer_metadata(file_read_json(json_path), json_path.string(), config.bos_token_id, eos);
    else
        kv = gguf_tokenizer_metadata(file_read_text(model), model.string(), config.bos_token_id, eos);
    const fs::path config_path = s.dir / "tokenizer_config.json";
    if (file_exists(config_path)) {
        std::string note;
        std::string jinja = chat_template_from_config(file_read_json(config_path), config_path.string(), &note);
        if (!jinja.empty()) kv.push_back({"tokenizer.chat_template", jinja});
    }
    return kv;
}

}  // namespace

std::vector<GgufKeyValue> model_source_text_metadata(const ModelSource& s, const ModelConfig& config) {
    std::vector<GgufKeyValue> kv = vocabulary_metadata(s, config);
    gguf_pad_vocabulary(kv, config.vocab_size);
    return kv;
}
