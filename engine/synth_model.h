// synth-model: writes a random-weight model in exactly the Hugging Face
// layout of a Mixtral checkpoint (config.json, generation_config.json,
// model.safetensors or shards + model.safetensors.index.json, tokenizer.model,
// tokenizer_config.json with the Mixtral chat template). Weights are bf16,
// scaled by 1/sqrt(fan_in) so activations stay finite through every layer.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/model_config.h"

// Presets: tiny, small, mixtral-mini, mixtral-8x7b. Throws MoeError for an
// unknown name.
ModelConfig synth_preset(const std::string& name);
std::vector<std::string> synth_preset_names();

struct SynthOptions {
    std::string preset = "tiny";
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
