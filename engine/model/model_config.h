// ModelConfig: the one plain description of a model, parsed once from a
// Hugging Face config.json (+ generation_config.json). Architecture
// differences are fields, not subclasses. Must not touch tensors.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

// How q and k are normalised after their projections (before RoPE).
enum class QkNorm {
    NONE,
    PER_HEAD,  // Qwen3: q_norm / k_norm (head_dim,), each head's vector on its own
    FULL,      // OLMoE: q_norm (n_heads * head_dim,), k_norm (n_kv_heads * head_dim,), over the whole row
};

// What mixes a layer's positions (engine/runtime/token_mixer.h); the other
// half of a layer is its FFN.
enum class MixerKind {
    ATTENTION,  // causal GQA self-attention over the KV cache, RoPE, the q/k norm and bias variants above
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
    bool qkv_bias = false;          // q/k/v projections have biases (Qwen2-MoE)
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
    bool tie_embeddings = false;    // lm_head shares embed_tokens
    int max_position_embeddings = 0;
    int bos_token_id = 1;
    std::vector<int> eos_token_ids;  // any of these ends generation

    bool is_moe() const { return n_experts > 0; }
    // Layer l routes tokens to experts (a MoE model's layer not in dense_layers).
    bool layer_is_moe(int l) const;
    // Layers that route to experts: n_layers - dense_layers for a MoE model, 0 for a dense one.
    int n_moe_layers() const { return is_moe() ? n_layers - int(dense_layers.size()) : 0; }
    // Inner width of the MLP every token of layer l runs (the dense MLP of a
    // dense layer, or the shared expert); 0 when there is none. Mistral's
    // dense MLP is its expert 0 instead (it runs as a routed expert).
    int layer_mlp_hidden(int l) const;
    // The token mixer of layer l: attention in every layer of the
    // architectures read today.
    MixerKind layer_mixer(int) const { return MixerKind::ATTENTION; }
    // Layers whose mixer is attention (the KV cache holds theirs).
    int n_attention_layers() const;
};

// The architectures model_config_parse accepts, for messages and docs.
const char* model_config_architectures();

// Parses <dir>/config.json and, when present, <dir>/generation_config.json
// (whose bos/eos ids win; eos may be a list). Throws MoeError naming the file
// and field for a missing file, missing field, wrong type or bad value.
ModelConfig model_config_load(const std::filesystem::path& dir);

// Parses one config.json object; `source` names it in error messages.
ModelConfig model_config_parse(const nlohmann::json& j, std::string_view source);
