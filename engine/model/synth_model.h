// synth-model: writes a random-weight model in exactly the Hugging Face
// layout of its architecture (config.json, generation_config.json,
// model.safetensors or shards + model.safetensors.index.json, the tokenizer
// and tokenizer_config.json with the chat template): Mixtral presets with
// the Mixtral tokenizer.model; Qwen3-MoE, Qwen2-MoE and OLMoE presets with a
// stand-in byte-level BPE tokenizer.json (GPT-2's vocabulary plus Qwen's
// ChatML tokens) and Qwen3's / Qwen2.5's real chat templates. Or the same
// weights straight into memory. Weights are bf16, scaled by 1/sqrt(fan_in) so
// activations stay finite through every layer.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/weights.h"

// Presets: tiny, small, mixtral-mini, mixtral-8x7b (Mixtral); qwen3-moe-mini,
// qwen3-30b-a3b (Qwen3-MoE), olmoe-mini (OLMoE), qwen2-moe-mini (Qwen2-MoE,
// a shared expert); the hybrid ones (Gated DeltaNet in three layers of
// four, gated attention in the fourth, a shared expert): qwen35-moe-mini and
// qwen3.6-35b-a3b (Qwen3.5 / 3.6, the image-text checkpoint's text weights),
// qwen3-next-mini and qwen3-next-80b-a3b (Qwen3-Next, its fused
// projections); gpt-oss-mini, gpt-oss-20b and gpt-oss-120b (gpt-oss:
// sliding and full attention alternating, sinks, biases, YaRN, MXFP4
// experts of top-4, written as its Hugging Face files hold them). A name is
// parsed once where it comes in (the CLI's
// --preset, a synth:PRESET source, a test's model).
enum class SynthPreset : uint8_t {
    TINY, SMALL, MIXTRAL_MINI, MIXTRAL_8X7B, QWEN3_MOE_MINI, QWEN3_30B_A3B, OLMOE_MINI, QWEN2_MOE_MINI,
    QWEN35_MOE_MINI, QWEN36_35B_A3B, QWEN3_NEXT_MINI, QWEN3_NEXT_80B_A3B, GPT_OSS_MINI, GPT_OSS_20B, GPT_OSS_120B,
};
inline constexpr SynthPreset SYNTH_PRESETS[] = {
    SynthPreset::TINY,            SynthPreset::SMALL,          SynthPreset::MIXTRAL_MINI,
    SynthPreset::MIXTRAL_8X7B,    SynthPreset::QWEN3_MOE_MINI, SynthPreset::QWEN3_30B_A3B,
    SynthPreset::OLMOE_MINI,      SynthPreset::QWEN2_MOE_MINI, SynthPreset::QWEN35_MOE_MINI,
    SynthPreset::QWEN36_35B_A3B,  SynthPreset::QWEN3_NEXT_MINI, SynthPreset::QWEN3_NEXT_80B_A3B,
    SynthPreset::GPT_OSS_MINI,    SynthPreset::GPT_OSS_20B,     SynthPreset::GPT_OSS_120B,
};
const char* synth_preset_name(SynthPreset preset);  // "tiny", "mixtral-mini", ...
// "tiny, small, ...": every name, for usage lines and errors.
std::string synth_preset_list();
// The preset a name names; nullopt for any other.
std::optional<SynthPreset> synth_preset_find(std::string_view name);
// The same, throwing MoeError naming the name and the presets for any other.
SynthPreset synth_preset_parse(std::string_view name);
ModelConfig synth_preset(SynthPreset preset);

struct SynthOptions {
    SynthPreset preset = SynthPreset::TINY;
    std::filesystem::path out;
    uint64_t seed = 0;
    std::filesystem::path tokenizer;  // empty = the embedded Mixtral tokenizer
    size_t max_shard_bytes = size_t(1) << 30;  // shard when the weights exceed this
};

// Writes the model (into a temporary folder renamed into place at the end,
// so a crash never leaves a half-written model at `out`). Refuses with a
// MoeError when the disk lacks room or `out` exists and is not empty.
void synth_model_write(const SynthOptions& options);

// Bytes synth_model_write puts on disk for this config (weights, headers and
// the small files), used for the free-space check.
uint64_t synth_disk_bytes(const ModelConfig& config);

// Throws MoeError naming `out` when the file system that will hold it has
// fewer than `bytes` free (statvfs of the nearest existing ancestor).
void synth_check_free_space(const std::filesystem::path& out, uint64_t bytes);

// The Mixtral-8x7B-Instruct-v0.1 chat template written into
// tokenizer_config.json.
extern const char* const SYNTH_MIXTRAL_CHAT_TEMPLATE;

// The Mistral tokenizer compiled into the binary (engine/assets/
// mistral-v1.model): what synth_model_write writes without --tokenizer and
// what the in-memory weights use. MoeError when the binary lacks it.
std::string_view synth_embedded_tokenizer();

// The preset's tokenizer is the stand-in BPE (every non-Mixtral preset).
bool synth_uses_standin_tokenizer(const ModelConfig& config);
// The stand-in tokenizer.json: the GPT-2 vocabulary compiled into the binary
// (engine/assets/ggml-vocab-gpt-2.gguf, through gguf_bpe_tokenizer_json)
// with <|im_start|> (50257) and <|im_end|> (50258) as special added tokens;
// <|endoftext|> is GPT-2's 50256. Vocab size padded to 50304.
std::string synth_standin_tokenizer_json();
// The chat template a preset's tokenizer_config.json carries: Qwen3's real
// one (engine/assets/qwen3-chat-template.jinja) for Qwen3-MoE, Qwen2.5's for
// Qwen2-MoE, a plain ChatML one for OLMoE, Mixtral's for the rest.
std::string synth_chat_template(const ModelConfig& config);

// Bytes synth_weights holds in memory for this config (bf16 matrices, fp32
// norm vectors).
uint64_t synth_memory_bytes(const ModelConfig& config);

// The weights synth_model_write writes for this config and seed, bit for bit,
// generated in memory on `threads` threads with no file (the benchmark aid
// behind --model synth:PRESET[:SEED]). They live in the result's arena (one
// allocation per tensor, in 2 MiB pages as the GGUF loader's matrices: bf16
// matrices, fp32 norms); files stays null. Checks no memory budget
// (engine/model/model_source.h does).
ModelWeights synth_weights(const ModelConfig& config, uint64_t seed, int threads);
