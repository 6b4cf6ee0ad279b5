// ModelConfig: the one plain description of a model, parsed once from a
// Hugging Face config.json (+ generation_config.json). Architecture
// differences are fields, not subclasses. Must not touch tensors.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

struct ModelConfig {
    std::string architecture;       // "MixtralForCausalLM" or "MistralForCausalLM"
    int dim = 0;                    // hidden_size
    int hidden_dim = 0;             // intermediate_size (per expert)
    int n_layers = 0;               // num_hidden_layers
    int n_heads = 0;                // num_attention_heads
    int n_kv_heads = 0;             // num_key_value_heads (GQA)
    int head_dim = 0;               // head_dim, default dim / n_heads
    int vocab_size = 0;
    int n_experts = 0;              // num_local_experts; 0 = dense MLP (Mistral)
    int n_experts_active = 0;       // num_experts_per_tok (top-k); 0 for dense
    bool norm_topk_prob = true;     // renormalise the k routing weights to sum 1 (Mixtral)
    float rope_theta = 10000.0f;
    float rms_norm_eps = 1e-5f;
    bool tie_embeddings = false;    // lm_head shares embed_tokens
    int max_position_embeddings = 0;
    int bos_token_id = 1;
    std::vector<int> eos_token_ids;  // any of these ends generation

    bool is_moe() const { return n_experts > 0; }
};

// Parses <dir>/config.json and, when present, <dir>/generation_config.json
// (whose bos/eos ids win; eos may be a list). Throws MoeError naming the file
// and field for a missing file, missing field, wrong type or bad value.
ModelConfig model_config_load(const std::filesystem::path& dir);

// Parses one config.json object; `source` names it in error messages.
ModelConfig model_config_parse(const nlohmann::json& j, std::string_view source);
