// ModelConfig: the one plain description of a model, parsed once from a
// Hugging Face config.json (+ generation_config.json). Architecture
// differences are fields, not subclasses. Must not touch tensors.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cpu_kernels/ffn.h"

// How q and k are normalised after their projections (before RoPE).
enum class QkNorm {
    NONE,
    PER_HEAD,  // Qwen3: q_norm / k_norm (head_dim,), each head's vector on its own
    FULL,      // OLMoE: q_norm (n_heads * head_dim,), k_norm (n_kv_heads * head_dim,), over the whole row
};

// What mixes a layer's positions (engine/runtime/token_mixer.h); the other
// half of a layer is its FFN.
enum class MixerKind {
    ATTENTION,  // causal GQA self-attention over the KV cache, RoPE, the q/k norm, bias and output-gate variants
    // ATTENTION over the last sliding_window positions only (Mistral-7B
    // v0.1; gpt-oss's sliding layers, every other one from layer 0). Its keys and values are in the KV
    // cache beside the other attention layers' (all positions kept).
    SLIDING_ATTENTION,
    // Gated DeltaNet linear attention (Qwen3.5, Qwen3-Next): a causal
    // depthwise conv over q/k/v, the gated delta rule on a fixed-size state
    // per head, a gated RMSNorm; it keeps a recurrent state, not a KV cache.
    GATED_DELTANET,
};

// The shapes of a Gated DeltaNet layer (linear_* fields of config.json).
struct LinearAttentionShape {
    int conv_kernel = 0;  // linear_conv_kernel_dim (K): the conv reads the K - 1 inputs before
    int n_k_heads = 0;    // linear_num_key_heads
    int n_v_heads = 0;    // linear_num_value_heads (a multiple of n_k_heads)
    int head_k_dim = 0;   // linear_key_head_dim
    int head_v_dim = 0;   // linear_value_head_dim
    // Which key head value head h reads: h / (n_v_heads / n_k_heads) in
    // Hugging Face's order (GROUPED), h % n_k_heads in the order llama.cpp's
    // qwen35moe GGUFs store (TILED).
    enum class VHeadOrder : uint8_t { GROUPED, TILED } v_head_order = VHeadOrder::GROUPED;

    int key_dim() const { return n_k_heads * head_k_dim; }
    int value_dim() const { return n_v_heads * head_v_dim; }
    int conv_dim() const { return 2 * key_dim() + value_dim(); }  // q, k and v go through the conv
    // How the checkpoint stores the projections: Qwen3-Next's Hugging Face
    // files fuse q, k, v, z per key head (in_proj_qkvz) and b, a per key
    // head (in_proj_ba); llama.cpp's qwen3next GGUFs keep b, a fused (ssm_ba).
    bool fused_qkvz = false;
    bool fused_ba = false;

    int k_head_of(int v_head) const {
        return v_head_order == VHeadOrder::GROUPED ? v_head / (n_v_heads / n_k_heads) : v_head % n_k_heads;
    }
};

// RoPE frequency scaling: config.json's rope_scaling / rope_parameters
// (rope_type), GGUF's rope.scaling.*. LINEAR divides every frequency by
// factor; YARN blends, per frequency, the original one (fast rotations, above
// beta_fast turns over the original context) with the one divided by factor
// (below beta_slow turns), linearly between, and multiplies cos and sin by
// attention_factor (default 0.1 ln(factor) + 1), as Hugging Face's
// _compute_yarn_parameters does (truncate: the blend's ends rounded outward
// to whole dimensions, as llama.cpp always does).
struct RopeScaling {
    enum class Type : uint8_t { NONE, LINEAR, YARN };
    Type type = Type::NONE;
    float factor = 1.0f;
    int original_context = 0;  // original_max_position_embeddings
    float beta_fast = 32.0f, beta_slow = 1.0f;
    float attention_factor = 1.0f;
    bool truncate = true;
};

struct ModelConfig {
    std::string architecture;       // one of model_config_architectures()
    int dim = 0;                    // hidden_size
    int hidden_dim = 0;             // a routed expert's inner width: moe_intermediate_size (Qwen), else
                                    // intermediate_size (Mixtral, OLMoE; Mistral's dense MLP)
    int n_layers = 0;               // num_hidden_layers
    int n_heads = 0;                // num_attention_heads
    int n_kv_heads = 0;             // num_key_value_heads (GQA)
    int head_dim = 0;               // head_dim, default dim / n_heads
    int vocab_size = 0;
    int n_experts = 0;              // num_local_experts; 0 = dense MLP (Mistral)
    int n_experts_active = 0;       // num_experts_per_tok (top-k); 0 for dense
    bool norm_topk_prob = true;     // renormalise the k routing weights to sum 1 (Mixtral, Qwen3)
    QkNorm qk_norm = QkNorm::NONE;  // q/k RMSNorm (Qwen3 per head, OLMoE full width)
    bool qkv_bias = false;          // q/k/v projections have biases (Qwen2-MoE, gpt-oss)
    bool o_bias = false;            // o_proj has a bias (gpt-oss)
    // A learned logit per query head joins its softmax's denominator and
    // adds no value (gpt-oss's attention sinks).
    bool attn_sinks = false;
    bool router_bias = false;       // the router's logits have a bias (gpt-oss)
    bool expert_bias = false;       // each routed expert's gate, up and down projections have biases (gpt-oss)
    FfnActivation ffn_act;          // the routed experts' gate activation (gpt-oss: the clamped SwiGLU)
    // The MLP every token runs beside the routed experts (Qwen2-MoE's shared
    // expert, gated by sigmoid(x . shared_expert_gate)); 0 = none.
    int shared_hidden_dim = 0;  // shared_expert_intermediate_size
    // Layers of a MoE model whose MLP is dense (no router, no experts), of
    // inner width dense_hidden_dim (intermediate_size): Qwen's mlp_only_layers
    // and the layers decoder_sparse_step skips. Sorted, distinct.
    std::vector<int> dense_layers;
    int dense_hidden_dim = 0;  // intermediate_size of a dense layer (Qwen); = hidden_dim otherwise
    float rope_theta = 10000.0f;
    float rms_norm_eps = 1e-5f;
    // The checkpoint's RMSNorm weights are zero-centred: the scale is 1 + w
    // (Qwen3.5, Qwen3-Next; all but the delta net's gated norm). The loader
    // adds the 1, so the engine's norms always scale by their weight.
    bool norms_zero_centered = false;
    bool tie_embeddings = false;    // lm_head shares embed_tokens
    RopeScaling rope_scaling;
    // Rotary dimensions of a head (the first rotary_dim of head_dim, rotate
    // half within them): head_dim * partial_rotary_factor; 0 = head_dim
    // (rope_dim() says which).
    int rotary_dim = 0;
    // Attention's q projection gives each head its query and a gate
    // ([q_h | gate_h], 2 * head_dim rows a head); the attention output is
    // multiplied by sigmoid(gate) before o_proj (Qwen3.5, Qwen3-Next).
    bool attn_output_gate = false;
    // The mixer of each layer (n_layers entries); empty: attention in every
    // layer. Qwen3.5 / Qwen3-Next: layer_types, or every
    // full_attention_interval-th layer attention and the rest GATED_DELTANET.
    std::vector<MixerKind> layer_mixers;
    LinearAttentionShape linear;  // the GATED_DELTANET layers' shapes
    int sliding_window = 0;       // SLIDING_ATTENTION layers: the positions a query sees, its own included
    // Multi-token-prediction layers in the checkpoint (mtp.*): read past,
    // never run.
    int n_mtp_layers = 0;
    // Where the decoder's tensors are named: "model." (model.layers.N...), or
    // "model.language_model." (Qwen3.5's image-text checkpoints, whose
    // model.visual.* tower is not read).
    std::string tensor_prefix = "model.";
    bool has_vision_tower = false;  // the checkpoint carries a vision tower moe-server does not read
    int max_position_embeddings = 0;
    int bos_token_id = 1;
    std::vector<int> eos_token_ids;  // any of these ends generation

    bool is_moe() const { return n_experts > 0; }
    int rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
    // Layer l routes tokens to experts (a MoE model's layer not in dense_layers).
    bool layer_is_moe(int l) const;
    // Layers that route to experts: n_layers - dense_layers for a MoE model, 0 for a dense one.
    int n_moe_layers() const { return is_moe() ? n_layers - int(dense_layers.size()) : 0; }
    // Inner width of the MLP every token of layer l runs (the dense MLP of a
    // dense layer, or the shared expert); 0 when there is none. Mistral's
    // dense MLP is its expert 0 instead (it runs as a routed expert).
    int layer_mlp_hidden(int l) const;
    // The token mixer of layer l.
    MixerKind layer_mixer(int l) const {
        return layer_mixers.empty() ? MixerKind::ATTENTION : layer_mixers[size_t(l)];
    }
    // The positions a query of layer l sees back from its own (its own
    // included); 0: all of them.
    int layer_window(int l) const { return layer_mixer(l) == MixerKind::SLIDING_ATTENTION ? sliding_window : 0; }
    static bool is_attention(MixerKind k) { return k == MixerKind::ATTENTION || k == MixerKind::SLIDING_ATTENTION; }
    // Layers whose mixer is attention of either kind (the KV cache holds theirs), and those of the delta net.
    int n_attention_layers() const;
    int n_linear_layers() const { return n_layers - n_attention_layers(); }
};

// The inverse frequency of each rotary pair of a head (rope_dim() / 2
// entries, in double: pos * freq reaches 1e5 rad at long contexts), after
// rope_scaling; and the factor cos and sin are multiplied by. Every backend
// rotates with these.
std::vector<double> rope_inv_freq(const ModelConfig& c);
float rope_attention_factor(const ModelConfig& c);

// The architectures model_config_parse accepts, for messages and docs.
const char* model_config_architectures();

// Parses <dir>/config.json and, when present, <dir>/generation_config.json
// (whose bos/eos ids win; eos may be a list). Throws MoeError naming the file
// and field for a missing file, missing field, wrong type or bad value.
ModelConfig model_config_load(const std::filesystem::path& dir);

// Parses one config.json object; `source` names it in error messages.
ModelConfig model_config_parse(const nlohmann::json& j, std::string_view source);
