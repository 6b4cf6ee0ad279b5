// ModelWeights: typed pointers to every tensor of a model, looked up by the
// one tensor table (engine/model/tensor_table.h: Hugging Face Mixtral/Mistral
// names) with dtype and shape checked against the ModelConfig at load time.
// bf16 matrices point straight into the memory mapping; F16/F32 checkpoints
// are converted to bf16 once. Norm vectors are kept as fp32. (Synthetic
// weights, engine/model/synth_model.h, fill the same struct from memory they own.)
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "cpu_kernels/bf16.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensor_table.h"

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

    std::unique_ptr<SafetensorsSet> files;                // keeps the mappings alive; null for synthetic weights
    std::vector<std::unique_ptr<float[]>> owned_f32;     // norm vectors (converted, or generated in memory)
    std::vector<std::unique_ptr<bf16[]>> owned_bf16;     // converted F16/F32 matrices, or generated in memory
};

// Loads and checks all tensors of the model in dir. Throws MoeError with
// "<file>: <tensor>: <what is wrong>" (missing tensor, dtype, shape, ...).
ModelWeights weights_load(const ModelConfig& config, const std::filesystem::path& dir);

// Sets every pointer of `w` by walking the tensor table (engine/model/tensor_table.h):
// data(entry) gives each tensor's memory, fp32 for a (n,) vector (the norms)
// and bf16 for a matrix. Sizes w.layers and their experts; ties lm_head to
// embed when the config says so. The one place a role becomes a field, for
// the loader and the in-memory synthetic weights alike.
void weights_assign(ModelWeights& w, const ModelConfig& config,
                    const std::function<const void*(const TensorEntry&)>& data);

// Bytes of bf16 weights in one expert (w1 + w3 + w2).
size_t expert_bytes(const ModelConfig& config);
