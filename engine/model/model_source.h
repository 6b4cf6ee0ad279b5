// Model sources: what a --model string names, decided here and nowhere else,
// and the config, weights and tokenizer of either kind (its chat template is
// chat/model_chat.h's).
//
// * "synth:PRESET[:SEED]" (SEED defaults to 0) is a synthetic source: the
//   random weights `synth-model --preset PRESET --seed SEED` writes, bit for
//   bit, built in memory with no file, with the Mistral tokenizer compiled
//   into the binary and Mistral's chat template. It is a benchmark aid (a
//   model's real shape, e.g. Mixtral-8x7B's, on a machine whose disk cannot
//   hold it), never a real model: its text is gibberish.
// * A regular file whose name ends in ".gguf" is a whole model in one GGUF
//   file (engine/model/gguf_model.h): config, weights, tokenizer and chat
//   template all from it.
// * Anything else is a model folder, read by the real loader exactly as
//   before (config.json, safetensors, tokenizer.model, tokenizer_config.json).
//   A folder whose name starts with "synth:" is reached as ./synth:...
//
// Must not decide anything about devices, placement or generation.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "engine/formats/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/synth_model.h"
#include "engine/model/weights.h"
#include "engine/text/tokenizer.h"

struct ModelSource {
    std::string text;           // the --model string as given
    bool synthetic = false;     // synth:PRESET[:SEED]
    bool gguf = false;          // one GGUF file
    std::filesystem::path dir;  // a folder: the folder; a GGUF model: the file
    SynthPreset preset = SynthPreset::TINY;  // synthetic: the synth-model preset
    uint64_t seed = 0;          // synthetic: the synth-model seed
};

// Parses a --model string. MoeError, one line naming the string, for a
// synthetic one that is malformed: no preset ("synth:"), an unknown preset,
// a seed that is not a whole number in [0, 2^62], or extra ":" parts.
ModelSource model_source_parse(std::string_view text);

// The model's name in the API and the benchmarks: the folder's name, the
// GGUF file's name without ".gguf", or "synth:PRESET:SEED" (the seed always
// spelled out).
std::string model_source_id(const ModelSource& source);

// One line naming a synthetic source as a benchmark aid, with its preset,
// seed and memory; empty for a folder.
std::string model_source_note(const ModelSource& source);

// Where the model comes from, for a load line: the folder, or "random weights
// built in memory (a benchmark aid)".
std::string model_source_where(const ModelSource& source);

// The folder's config.json (+ generation_config.json), the GGUF file's
// metadata, or the preset's.
ModelConfig model_source_config(const ModelSource& source);

// Throws MoeError naming the source, its preset, the bytes its in-memory
// weights need and the bytes available, when a synthetic source needs more
// than `available_bytes` (0 = unknown: no check). Nothing for a folder (its
// weights are memory-mapped).
void model_source_check_memory(const ModelSource& source, const ModelConfig& config, uint64_t available_bytes);

// The folder's weights (weights_load), or the synthetic ones generated on
// `threads` threads after model_source_check_memory against MemAvailable.
ModelWeights model_source_weights(const ModelSource& source, const ModelConfig& config, int threads);

// The same, shared: `loaded` when given (weights loaded earlier for this
// source, read by several engines or benchmarks one after another: `bench
// suite`), else model_source_weights now. MoeError when `loaded` has another
// layer count than config.
std::shared_ptr<const ModelWeights> model_source_shared_weights(const ModelSource& source, const ModelConfig& config,
                                                                int threads,
                                                                std::shared_ptr<const ModelWeights> loaded = nullptr);

// The folder's tokenizer.model (else its tokenizer.json), the GGUF file's
// vocabulary, or the embedded Mistral tokenizer. MoeError naming the
// tokenizer when its vocabulary exceeds the model's vocab_size. A vocab_size
// larger than the tokenizer's (padded, as Qwen's config.json is) loads: the
// engine never samples the ids above the tokenizer's and refuses them in a
// prompt.
Tokenizer model_source_tokenizer(const ModelSource& source, const ModelConfig& config);

// The tokenizer and chat template as GGUF metadata (tokenizer.ggml.* and
// tokenizer.chat_template), for writing the model as one GGUF file: a GGUF
// file's own keys, a folder's tokenizer.model (or its tokenizer.json as a
// gpt2 vocabulary) and tokenizer_config.json chat_template, or a synthetic
// preset's: the embedded tokenizer and Mixtral's template, or the stand-in
// BPE and its preset's template. A vocabulary shorter than the model's
// vocab_size is padded with llama.cpp's "[PAD<id>]" tokens (gguf_pad_vocabulary),
// which a reader of the file then holds as tokens like any other.
std::vector<GgufKeyValue> model_source_text_metadata(const ModelSource& source, const ModelConfig& config);
