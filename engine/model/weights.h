// ModelWeights: a typed view of every weight matrix of a model (WeightView:
// element type, pointer, row size), looked up by the one tensor table
// (engine/model/tensor_table.h) with dtype and shape checked against the
// ModelConfig at load time. bf16 and block-quantized matrices point straight
// into the memory mapping; F16/F32 matrices are converted to bf16 once.
// Norm vectors are kept as fp32. (Synthetic
// weights, engine/model/synth_model.h, fill the same struct from memory they own.)
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "cpu_kernels/bf16.h"
#include "cpu_kernels/ffn.h"
#include "engine/formats/gguf.h"
#include "engine/formats/safetensors.h"
#include "engine/model/host_memory.h"
#include "engine/model/model_config.h"
#include "engine/model/tensor_table.h"

struct ExpertWeights {
    WeightView w1;  // (hidden_dim, dim) gate
    WeightView w3;  // (hidden_dim, dim) up
    WeightView w2;  // (dim, hidden_dim) down
    // The activation (ModelConfig::ffn_act) and the biases of the three
    // (gpt-oss's experts; fp32, null without), in the memory of whoever
    // holds these weights.
    FfnSpec spec;

    size_t bias_bytes() const {
        return sizeof(float) * size_t((spec.b1 ? w1.rows : 0) + (spec.b3 ? w3.rows : 0) + (spec.b2 ? w2.rows : 0));
    }
    size_t bytes() const { return w1.bytes() + w3.bytes() + w2.bytes() + bias_bytes(); }
    bool empty() const { return w1.empty(); }
};

// How a device slot (the emulated GPU's, CUDA's) holds an expert: its parts,
// w1, w3, w2 and then the biases it has, one after another, each from a
// multiple of EXPERT_SLOT_ALIGN bytes (a bias after an MXFP4 matrix of odd
// size stays aligned). One layout for every device and copy path.
inline constexpr size_t EXPERT_SLOT_ALIGN = 64;
struct ExpertPart {
    const void* data = nullptr;  // where the part is now
    size_t bytes = 0;
    size_t offset = 0;  // where it goes in a slot
};
struct ExpertParts {
    ExpertPart part[6];
    int n = 0;
    size_t slot_bytes = 0;  // the slot room they take, padding included
};
ExpertParts expert_parts(const ExpertWeights& e);
// `like`'s views (its types, shapes, activation) pointing into a slot at base.
ExpertWeights expert_in_slot(const ExpertWeights& like, void* base);

// A Gated DeltaNet layer's weights (ModelConfig::linear's shapes).
struct LinearAttentionWeights {
    WeightView wqkv;                 // (conv_dim, dim): q | k | v rows, each head-major
    WeightView wz;                   // (value_dim, dim): the output gate
    WeightView wb;                   // (n_v_heads, dim): beta = sigmoid(x . wb)
    WeightView wa;                   // (n_v_heads, dim): the decay's input
    const float* conv = nullptr;     // (conv_dim, conv_kernel): channel c's taps, oldest input first
    const float* dt_bias = nullptr;  // (n_v_heads,)
    const float* a = nullptr;        // (n_v_heads,): -exp(A_log), the decay rate (<= 0)
    const float* norm = nullptr;     // (head_v_dim,): the gated RMSNorm's weight
    WeightView wout;                 // (dim, value_dim)
};

struct LayerWeights {
    const float* attn_norm = nullptr;  // (dim,)
    // Attention (a layer whose mixer is ATTENTION):
    WeightView wq;                     // (n_heads * head_dim, dim); with attn_output_gate (2 n_heads head_dim, dim), [q_h | gate_h]
    WeightView wk;                     // (n_kv_heads * head_dim, dim)
    WeightView wv;                     // (n_kv_heads * head_dim, dim)
    WeightView wo;                     // (dim, n_heads * head_dim)
    const float* o_bias = nullptr;     // (dim,); null without o_bias
    const float* sinks = nullptr;      // (n_heads,); null without attn_sinks
    const float* q_bias = nullptr;     // (n_heads * head_dim,); null without qkv_bias
    const float* k_bias = nullptr;     // (n_kv_heads * head_dim,)
    const float* v_bias = nullptr;     // (n_kv_heads * head_dim,)
    const float* q_norm = nullptr;     // (head_dim,) or (n_heads * head_dim,); null without qk_norm
    const float* k_norm = nullptr;     // (head_dim,) or (n_kv_heads * head_dim,)
    LinearAttentionWeights linear;     // a GATED_DELTANET layer's mixer
    const float* ffn_norm = nullptr;   // (dim,)
    WeightView router;                 // (n_experts, dim); empty for a dense model or layer
    const float* router_bias = nullptr;  // (n_experts,); null without router_bias
    std::vector<ExpertWeights> experts;  // n_experts entries; one (the MLP) for a dense Mistral model;
                                         // none on a dense layer of a MoE model
    // The MLP every token runs (ModelConfig::layer_mlp_hidden): a dense
    // layer's, or the shared expert; empty when there is none. A dense weight
    // (it never misses): it lives with the attention weights on every backend.
    ExpertWeights mlp;
    WeightView shared_gate;  // (1, dim): the shared expert's output times sigmoid(x . gate); else empty
};

struct ModelWeights {
    WeightView embed;                  // (vocab_size, dim)
    std::vector<LayerWeights> layers;  // n_layers
    const float* final_norm = nullptr; // (dim,)
    WeightView lm_head;                // (vocab_size, dim); == embed when tied

    // What keeps the data alive: the files' mappings (null for synthetic
    // weights) and the memory of converted or generated tensors.
    std::unique_ptr<SafetensorsSet> files;
    std::unique_ptr<GgufFile> gguf;
    std::vector<std::unique_ptr<float[]>> owned_f32;        // norm vectors converted to fp32
    std::vector<std::unique_ptr<bf16[]>> owned_bf16;        // F16/F32 matrices converted to bf16
    HostArena arena;  // matrices held in a layout of their own (GGUF q/k rows reordered, Q4_K / Q6_K interleaved),
                      // and synthetic weights generated in memory
};

// The slot room of the largest expert of any layer (every expert of a layer
// has the same types).
size_t expert_slot_bytes(const ModelWeights& w);

// Loads and checks all tensors of the model in dir. Throws MoeError with
// "<file>: <tensor>: <what is wrong>" (missing tensor, dtype, shape, ...).
ModelWeights weights_load(const ModelConfig& config, const std::filesystem::path& dir);

// Sets every pointer of `w` by walking the tensor table (engine/model/tensor_table.h):
// data(entry) gives each tensor's memory: an F32 view of (1, n) for a (n,)
// vector (the norms), the matrix of any type for a matrix. Sizes w.layers and their experts; ties lm_head to
// embed when the config says so. The one place a role becomes a field, for
// the loader and the in-memory synthetic weights alike.
void weights_assign(ModelWeights& w, const ModelConfig& config,
                    const std::function<WeightView(const TensorEntry&)>& data);

// The checks and conversions of one tensor, for the loaders (weights_load,
// gguf_model_weights). weights_check_shape: MoeError "FILE: NAME: expected
// shape [..], found [..]". weights_matrix: a (rows, cols) matrix in place
// when it is bf16 (aligned) or block-quantized, else converted to bf16 owned
// by w. weights_vector: a (n,) vector converted to fp32 owned by w, as a
// (1, n) F32 view (a conv's (channels, 1, taps): channels rows of taps),
// its values as `values` says; MoeError for a quantized one.
// The element types of the expert matrices, lower case, distinct, in
// DType order, joined by "+": "bf16", "q8_0", "q4_k+q6_k". Keys the
// calibration cache (an expert's speed follows its type).
std::string weights_expert_dtypes(const ModelWeights& w);

const TensorView& weights_check_shape(const TensorView& t, const TensorEntry& entry);
WeightView weights_matrix(ModelWeights& w, const TensorView& t);
WeightView weights_vector(ModelWeights& w, const TensorView& t, TensorValues values = TensorValues::AS_IS);
