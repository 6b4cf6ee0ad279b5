// ModelWeights: typed pointers to every tensor of a model, looked up by the
// one tensor table (engine/tensor_table.h: Hugging Face Mixtral/Mistral
// names) with dtype and shape checked against the ModelConfig at load time.
// bf16 matrices point straight into the memory mapping; F16/F32 checkpoints
// are converted to bf16 once. Norm vectors are kept as fp32.
#pragma once
#include <filesystem>
#include <memory>
#include <vector>

#include "cpu_kernels/bf16.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"

struct ExpertWeights {
    const bf16* w1 = nullptr;  // (hidden_dim, dim) gate
    const bf16* w3 = nullptr;  // (hidden_dim, dim) up
    const bf16* w2 = nullptr;  // (dim, hidden_dim) down
};

struct LayerWeights {
    const float* attn_norm = nullptr;  // (dim,)
    const bf16* wq = nullptr;          // (n_heads * head_dim, dim)
    const bf16* wk = nullptr;          // (n_kv_heads * head_dim, dim)
    const bf16* wv = nullptr;          // (n_kv_heads * head_dim, dim)
    const bf16* wo = nullptr;          // (dim, n_heads * head_dim)
    const float* ffn_norm = nullptr;   // (dim,)
    const bf16* router = nullptr;      // (n_experts, dim); nullptr for a dense model
    std::vector<ExpertWeights> experts;  // n_experts entries; one (the MLP) for a dense model
};

struct ModelWeights {
    const bf16* embed = nullptr;       // (vocab_size, dim)
    std::vector<LayerWeights> layers;  // n_layers
    const float* final_norm = nullptr; // (dim,)
    const bf16* lm_head = nullptr;     // (vocab_size, dim); == embed when tied

    std::unique_ptr<SafetensorsSet> files;                // keeps the mappings alive
    std::vector<std::unique_ptr<float[]>> owned_f32;     // converted norm vectors
    std::vector<std::unique_ptr<bf16[]>> owned_bf16;     // converted F16/F32 matrices
};

// Loads and checks all tensors of the model in dir. Throws MoeError with
// "<file>: <tensor>: <what is wrong>" (missing tensor, dtype, shape, ...).
ModelWeights weights_load(const ModelConfig& config, const std::filesystem::path& dir);

// Bytes of bf16 weights in one expert (w1 + w3 + w2).
size_t expert_bytes(const ModelConfig& config);
