// Hand-made checkpoints for the tests: a safetensors writer of our own (F32,
// BF16 or F16, exact conversions only) and small Hugging Face model folders
// of any architecture the engine reads, from a config.json written by the
// test. Shares no code with the engine's readers, so a reader bug shows.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/runtime/session.h"

struct TestTensor {
    std::vector<int64_t> shape;
    std::vector<float> data;  // row-major
};
using TensorMap = std::map<std::string, TestTensor>;

enum class WriteType { F32, BF16, F16 };

// Raw bytes (safetensors' U8: gpt-oss's MXFP4 blocks and scales).
struct TestBytes {
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
};
using BytesMap = std::map<std::string, TestBytes>;

// Writes one safetensors file. Every value must be exact in `type` (a
// Catch failure otherwise); `bytes` are written as U8.
void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors, WriteType type,
                       const BytesMap& bytes = {});

// A model folder in <build>/test-models/ (written once, then reused; safe
// when several test processes ask at once): `config` as config.json, every
// tensor of the engine's tensor table for it in one bf16 model.safetensors
// (random values of a fixed seed, scaled like synth-model's: unit-RMS
// projections, norms near 1, q/k/v biases near 0, logits of standard
// deviation about 2.5), and the byte-level BPE tokenizer.json of
// tokenizer_json_model_dir with a ChatML chat template. `name` and a hash of
// `config` name the folder. A gpt-oss config's experts are written as its
// Hugging Face checkpoints hold them: fused, gate and up interleaved, as
// MXFP4 blocks and scales when config.json's quantization_config says mxfp4
// (the values quantized here, by this writer's own rounding), else as
// transposed bf16.
std::filesystem::path test_checkpoint_dir(const std::string& name, const nlohmann::json& config, unsigned seed = 1);

// A small config.json of a synth preset's architecture with the preset's
// features (norm_topk_prob, rope_theta, rms_norm_eps; GQA and head_dim
// above hidden_size / heads where the preset has them; q/k norms, q/k/v
// biases, the shared expert by architecture), scaled down so the reference
// runs in milliseconds: hidden 64, 2 layers, 4 heads of 16 (32 with an
// explicit head_dim), 16 experts of width 32, top-4, vocab 264 (the
// byte-level tokenizer's 264 ids), BOS 259, EOS 261.
nlohmann::json small_arch_config(const std::string& preset);

// The small configs the comparison tests run, each named: the three presets'
// small_arch_config, and two with dense layers among the sparse ones (Qwen3
// with mlp_only_layers [0] of 3 layers; Qwen2 with decoder_sparse_step 2 of
// 3 layers: only layer 1 sparse).
std::vector<std::pair<std::string, nlohmann::json>> small_arch_configs();
// Qwen3.5's (text_config of an image-text checkpoint) and Qwen3-Next's
// (fused in_proj_qkvz / in_proj_ba) hybrid layers at hidden size 64: three
// Gated DeltaNet layers, then gated attention; 16 experts of top-4 and a
// shared expert. all_arch_configs(): small_arch_configs() and these.
std::vector<std::pair<std::string, nlohmann::json>> hybrid_arch_configs();
// gpt-oss's layers at hidden size 64: a sliding-window layer (window 4)
// then a full one, sinks, biases, YaRN without truncation, 16 experts of
// top-4; one with MXFP4 experts (swiglu_limit 1, so the clamp bites), one
// with bf16 ones. all_arch_configs(): small_arch_configs(), the hybrid ones
// and these.
std::vector<std::pair<std::string, nlohmann::json>> gpt_oss_arch_configs();
std::vector<std::pair<std::string, nlohmann::json>> all_arch_configs();

// A session on the test_checkpoint_dir("arch", config) checkpoint of one of
// those configs: 2 threads, ctx 256, the CPU.
Session arch_session(const nlohmann::json& config);
