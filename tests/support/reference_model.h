// ReferenceModel: an independent, deliberately plain forward pass of a
// Hugging Face checkpoint in double precision, for the tests to check the
// engine against. Architectures (config.json "architectures"; without it,
// num_local_experts decides between the first two): MixtralForCausalLM,
// MistralForCausalLM (dense), Qwen3MoeForCausalLM, Qwen2MoeForCausalLM,
// OlmoeForCausalLM, following transformers' modeling code for each. It reads config.json and the
// safetensors files itself and shares no code with engine/ or cpu_kernels/:
// a bug there cannot hide here. It must stay simple rather than fast: no KV
// cache (full causal attention is recomputed for every call), weights held
// as double (8 bytes per parameter: tiny and small models only).
// Errors are std::runtime_error with a one-line message naming the file,
// tensor or field.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

// Where q/k RMSNorm applies: nowhere, on each head's head_dim vector
// (Qwen3: q_norm / k_norm of size head_dim), or on the whole projection
// before it is split into heads (OLMoE: sizes n_heads * head_dim and
// n_kv_heads * head_dim). Both before RoPE.
enum class ReferenceQkNorm { NONE, PER_HEAD, FULL };

// The fields of config.json the reference uses, with each architecture's
// defaults (those of its transformers config class) where a field is absent.
struct ReferenceConfig {
    std::string architecture;   // architectures[0]
    int dim = 0;                // hidden_size
    int hidden_dim = 0;         // intermediate_size: dense MLPs; also Mixtral's and OLMoE's experts
    int moe_hidden_dim = 0;     // each routed expert's size (Qwen: moe_intermediate_size)
    int shared_hidden_dim = 0;  // shared_expert_intermediate_size (Qwen2-MoE); 0 = no shared expert
    int n_layers = 0;           // num_hidden_layers
    int n_heads = 0;            // num_attention_heads
    int n_kv_heads = 0;         // num_key_value_heads (default n_heads)
    int head_dim = 0;           // head_dim (default dim / n_heads; OLMoE always dim / n_heads)
    int vocab_size = 0;
    int n_experts = 0;             // num_local_experts (Mixtral) or num_experts; 0 = dense
    int n_experts_active = 0;      // num_experts_per_tok
    bool norm_topk_prob = true;    // renormalise the top-k weights (Mixtral always; others from config)
    std::vector<bool> moe_layers;  // (n_layers,): layer l is sparse (decoder_sparse_step, mlp_only_layers)
    ReferenceQkNorm qk_norm = ReferenceQkNorm::NONE;
    bool qkv_bias = false;        // q/k/v projection biases (Qwen2-MoE qkv_bias; attention_bias)
    bool o_bias = false;          // o_proj bias (attention_bias of Qwen3-MoE and OLMoE)
    double clip_qkv = 0.0;        // OLMoE clip_qkv: |q|, |k|, |v| clamped to it; 0 = none
    double rope_theta = 0.0;      // default 1e6 (Mixtral) or 1e4 (the others)
    double rms_norm_eps = 0.0;    // default 1e-5 (Mixtral, OLMoE) or 1e-6 (the others)
    bool tie_embeddings = false;  // tie_word_embeddings
    int sliding_window = 0;       // Mistral / Mixtral: a query sees its last sliding_window positions; 0: all
    // Qwen3.5 (text_config of Qwen3_5MoeForConditionalGeneration) and
    // Qwen3-Next: Gated DeltaNet layers beside gated attention ones.
    std::string prefix = "model.";   // "model.language_model." for Qwen3.5's image-text checkpoints
    std::vector<bool> linear_layers;  // (n_layers,): a Gated DeltaNet layer (layer_types)
    bool fused_qkvz = false;          // Qwen3-Next: in_proj_qkvz and in_proj_ba, per key head
    int conv_kernel = 0, n_k_heads = 0, n_v_heads = 0, head_k_dim = 0, head_v_dim = 0;  // linear_*
    int rotary_dim = 0;               // head_dim * partial_rotary_factor (else head_dim)
    // rope_scaling (rope_type linear or yarn): the frequencies of each pair
    // (reference_rope_freq) and yarn's factor on cos and sin.
    std::string rope_type = "default";
    double rope_factor = 1.0, rope_beta_fast = 32.0, rope_beta_slow = 1.0, rope_attention_factor = 1.0;
    int rope_original_context = 0;
    bool rope_truncate = true;
    bool attn_gate = false;           // q_proj gives [q_h | gate_h]; attention output times sigmoid(gate)
    // gpt-oss: sliding_window on the layers layer_types calls
    // "sliding_attention" (sliding_layers; empty: every layer when
    // sliding_window is set), a sink logit per head in each softmax, a
    // router bias, experts with biases, gate and up interleaved in fused
    // tensors (MXFP4 blocks and scales or transposed floats), and the clamped
    // SwiGLU (swiglu_limit).
    std::vector<bool> sliding_layers;
    bool sinks = false;
    bool gpt_oss = false;
    double swiglu_limit = 0.0;  // > 0: the clamped SwiGLU of gpt-oss
    bool zero_centered = false;       // RMSNorm scale 1 + w (but the delta net's gated norm)
};

// One tensor of a safetensors file, converted to double.
struct ReferenceTensor {
    std::vector<int64_t> shape;
    std::vector<double> data;  // row-major
};

// Reads every tensor of one safetensors file (BF16, F16, F32) with plain
// stream reads, checking the header against the file size.
std::map<std::string, ReferenceTensor> reference_read_safetensors(const std::filesystem::path& file);

// Rotate-half RoPE of one head vector v (head_dim,) at position pos, in
// place: for i < head_dim/2, angle = pos * theta^(-2i/head_dim),
// (v[i], v[i+half]) -> (v[i] cos - v[i+half] sin, v[i+half] cos + v[i] sin).
void reference_rope(double* v, int head_dim, int pos, double theta);
// The frequency of each of rotary_dim / 2 pairs under the config's rope
// scaling (Hugging Face's _compute_default / linear / yarn parameters), and
// RoPE with them: cos and sin times mscale.
std::vector<double> reference_rope_freq(const ReferenceConfig& c);
void reference_rope(double* v, int head_dim, int pos, const std::vector<double>& freq, double mscale);

// Routing of one token in one MoE layer: the chosen experts, highest
// probability first (ties to the lower id), their weights (renormalised to
// sum 1 when norm_topk_prob, else the softmax probabilities themselves), the
// softmax over all experts they were chosen from, and the shared expert's
// sigmoid gate (0 without a shared expert).
struct ReferenceRoute {
    std::vector<int> experts;     // (n_experts_active,)
    std::vector<double> weights;  // (n_experts_active,)
    std::vector<double> probs;    // (n_experts,)
    double shared_gate = 0.0;
};
// [layer][token]; a dense layer's routes are empty (no experts).
using ReferenceRouting = std::vector<std::vector<ReferenceRoute>>;

class ReferenceModel {
public:
    // Reads <dir>/config.json and <dir>/model.safetensors, or the shards that
    // <dir>/model.safetensors.index.json lists; checks every tensor's shape.
    static ReferenceModel load(const std::filesystem::path& dir);

    // Logits (n_tokens, vocab_size) at every position of one sequence that
    // starts at position 0. Throws for an empty sequence or a token outside
    // the vocabulary. When routing is given, it receives the MoE decisions.
    std::vector<std::vector<double>> forward(const std::vector<int>& tokens) const;
    std::vector<std::vector<double>> forward(const std::vector<int>& tokens, ReferenceRouting* routing) const;

    // The n tokens greedy decoding appends to prompt (argmax, ties to the
    // lowest id), each step a full forward over the sequence so far.
    std::vector<int> greedy(const std::vector<int>& prompt, int n) const;

    int vocab_size() const { return config_.vocab_size; }
    const ReferenceConfig& config() const { return config_; }

private:
    struct Expert {
        std::vector<double> w1;  // (hidden_dim, dim) gate
        std::vector<double> w3;  // (hidden_dim, dim) up
        std::vector<double> w2;  // (dim, hidden_dim) down
        std::vector<double> b1, b3, b2;  // biases (gpt-oss); empty without
        int hidden_dim = 0;
        double limit = 0.0;  // > 0: gpt-oss's clamped SwiGLU
    };
    struct Layer {
        std::vector<double> attn_norm;  // (dim,)
        std::vector<double> wq;         // (n_heads * head_dim, dim)
        std::vector<double> wk;         // (n_kv_heads * head_dim, dim)
        std::vector<double> wv;         // (n_kv_heads * head_dim, dim)
        std::vector<double> wo;         // (dim, n_heads * head_dim)
        std::vector<double> bq, bk, bv;   // projection biases; empty without qkv_bias
        std::vector<double> bo;           // (dim,); empty without o_bias
        std::vector<double> q_norm;       // (head_dim,) or (n_heads * head_dim,); empty without
        std::vector<double> k_norm;       // (head_dim,) or (n_kv_heads * head_dim,); empty without
        std::vector<double> ffn_norm;     // (dim,)
        std::vector<double> gate;         // (n_experts, dim); empty when the layer is dense
        std::vector<double> gate_bias;    // (n_experts,); empty without (gpt-oss's router bias)
        std::vector<double> sinks;        // (n_heads,); empty without
        std::vector<Expert> experts;      // n_experts, or the one dense MLP
        std::vector<Expert> shared;       // the shared expert, when there is one
        std::vector<double> shared_gate;  // (dim,) shared_expert_gate; empty without
        // A Gated DeltaNet layer (the attention fields above are empty):
        std::vector<double> w_qkv;   // (2 n_k head_k + n_v head_v, dim): q | k | v
        std::vector<double> w_z;     // (n_v head_v, dim)
        std::vector<double> w_b;     // (n_v, dim)
        std::vector<double> w_a;     // (n_v, dim)
        std::vector<double> conv;    // (channels, conv_kernel)
        std::vector<double> dt_bias; // (n_v,)
        std::vector<double> a_log;   // (n_v,)
        std::vector<double> lin_norm;  // (head_v,)
        std::vector<double> w_out;   // (dim, n_v head_v)
    };
    // A Gated DeltaNet layer's output for every position, (n_tokens, dim), from its normed inputs h.
    std::vector<std::vector<double>> delta_net(const Layer& L, const std::vector<std::vector<double>>& h) const;

    // down (silu(gate h) * (up h)) of one expert or dense MLP; with biases
    // and gpt-oss's clamp when the expert has them.
    static std::vector<double> swiglu(const Expert& e, const std::vector<double>& h, int dim);
    // Hidden states after the final norm, (n_tokens, dim).
    std::vector<std::vector<double>> final_hidden(const std::vector<int>& tokens, ReferenceRouting* routing) const;
    // lm_head (or the tied embedding) @ h -> (vocab_size,)
    std::vector<double> output_logits(const std::vector<double>& h) const;

    ReferenceConfig config_;
    std::vector<double> embed_;  // (vocab_size, dim)
    std::vector<Layer> layers_;
    std::vector<double> norm_;     // (dim,)
    std::vector<double> lm_head_;  // (vocab_size, dim); empty when tied to embed_
};

// Sum over i of -log p(tokens[i+1] | tokens[..i]) under the reference: the
// quantity `perplexity` reports (as a mean).
double reference_nll_sum(const ReferenceModel& model, const std::vector<int>& tokens);
