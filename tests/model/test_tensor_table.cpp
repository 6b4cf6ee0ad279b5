// Tests of the tensor table (engine/model/tensor_table.h): Mixtral and dense
// Mistral names, shapes, roles and (layer, expert) indices in load order,
// and lm_head left out when the embeddings are tied.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "engine/model/synth_model.h"
#include "engine/model/tensor_table.h"

namespace {

ModelConfig dense_config(bool tied) {
    ModelConfig c = synth_preset(SynthPreset::TINY);
    c.architecture = "MistralForCausalLM";
    c.n_experts = 0;
    c.n_experts_active = 0;
    c.tie_embeddings = tied;
    return c;
}

// Each (role, layer, expert) appears once and every name is unique.
void require_unique(const std::vector<TensorEntry>& table) {
    std::set<std::tuple<TensorRole, int, int>> keys;
    std::set<std::string> names;
    for (const TensorEntry& t : table) {
        INFO(t.name);
        REQUIRE(keys.insert({t.role, t.layer, t.expert}).second);
        REQUIRE(names.insert(t.name).second);
    }
}

}  // namespace

TEST_CASE("tensor table: Mixtral tensors in load order with roles and indices", "[tensor_table]") {
    const ModelConfig c = synth_preset(SynthPreset::TINY);
    const int64_t dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
    const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
    const std::vector<TensorEntry> table = tensor_table(c);
    const size_t per_layer = 7 + 3 * size_t(c.n_experts);
    REQUIRE(table.size() == 1 + size_t(c.n_layers) * per_layer + 2);
    require_unique(table);

    CHECK(table.front().name == "model.embed_tokens.weight");
    CHECK(table.front().role == TensorRole::EMBED);
    CHECK(table.front().shape == std::vector<int64_t>{vocab, dim});
    CHECK(table[table.size() - 2].name == "model.norm.weight");
    CHECK(table[table.size() - 2].role == TensorRole::FINAL_NORM);
    CHECK(table.back().name == "lm_head.weight");
    CHECK(table.back().role == TensorRole::LM_HEAD);
    CHECK(table.back().shape == std::vector<int64_t>{vocab, dim});

    // Layer 1, in load order.
    const TensorEntry* l1 = &table[1 + per_layer];
    const std::vector<std::tuple<std::string, TensorRole, std::vector<int64_t>>> head = {
        {"input_layernorm.weight", TensorRole::ATTN_NORM, {dim}},
        {"self_attn.q_proj.weight", TensorRole::WQ, {q_dim, dim}},
        {"self_attn.k_proj.weight", TensorRole::WK, {kv_dim, dim}},
        {"self_attn.v_proj.weight", TensorRole::WV, {kv_dim, dim}},
        {"self_attn.o_proj.weight", TensorRole::WO, {dim, q_dim}},
        {"post_attention_layernorm.weight", TensorRole::FFN_NORM, {dim}},
        {"block_sparse_moe.gate.weight", TensorRole::ROUTER, {int64_t(c.n_experts), dim}},
        {"block_sparse_moe.experts.0.w1.weight", TensorRole::EXPERT_W1, {hidden, dim}},
        {"block_sparse_moe.experts.0.w3.weight", TensorRole::EXPERT_W3, {hidden, dim}},
        {"block_sparse_moe.experts.0.w2.weight", TensorRole::EXPERT_W2, {dim, hidden}},
        {"block_sparse_moe.experts.1.w1.weight", TensorRole::EXPERT_W1, {hidden, dim}},
    };
    for (size_t i = 0; i < head.size(); i++) {
        const auto& [suffix, role, shape] = head[i];
        INFO(suffix);
        CHECK(l1[i].name == "model.layers.1." + suffix);
        CHECK(l1[i].role == role);
        CHECK(l1[i].shape == shape);
        CHECK(l1[i].layer == 1);
        CHECK(l1[i].expert == (i < 7 ? -1 : i < 10 ? 0 : 1));
    }
    CHECK(l1[per_layer - 1].name == "model.layers.1.block_sparse_moe.experts.3.w2.weight");
    CHECK(l1[per_layer - 1].expert == c.n_experts - 1);
}

TEST_CASE("tensor table: dense Mistral MLP is expert 0, tied embeddings have no lm_head", "[tensor_table]") {
    for (bool tied : {false, true}) {
        INFO("tied " << tied);
        const ModelConfig c = dense_config(tied);
        const std::vector<TensorEntry> table = tensor_table(c);
        REQUIRE(table.size() == 1 + size_t(c.n_layers) * 9 + (tied ? 1 : 2));
        require_unique(table);
        std::map<TensorRole, int> count;
        for (const TensorEntry& t : table) count[t.role]++;
        CHECK(count[TensorRole::ROUTER] == 0);
        CHECK(count[TensorRole::LM_HEAD] == (tied ? 0 : 1));
        const std::map<TensorRole, std::string> mlp = {{TensorRole::EXPERT_W1, "mlp.gate_proj.weight"},
                                                       {TensorRole::EXPERT_W3, "mlp.up_proj.weight"},
                                                       {TensorRole::EXPERT_W2, "mlp.down_proj.weight"}};
        for (const TensorEntry& t : table) {
            auto it = mlp.find(t.role);
            if (it == mlp.end()) continue;
            INFO(t.name);
            CHECK(t.expert == 0);
            CHECK(t.name == "model.layers." + std::to_string(t.layer) + "." + it->second);
        }
        CHECK(count[TensorRole::EXPERT_W2] == c.n_layers);
    }
}

namespace {

// name -> (shape, role, layer, expert) of a table.
std::map<std::string, TensorEntry> by_name(const std::vector<TensorEntry>& table) {
    std::map<std::string, TensorEntry> m;
    for (const TensorEntry& t : table) m.emplace(t.name, t);
    return m;
}

void check_entry(const std::map<std::string, TensorEntry>& m, const std::string& name, std::vector<int64_t> shape,
                 TensorRole role, int layer, int expert = -1) {
    INFO(name);
    auto it = m.find(name);
    REQUIRE(it != m.end());
    CHECK(it->second.shape == shape);
    CHECK(it->second.role == role);
    CHECK(it->second.layer == layer);
    CHECK(it->second.expert == expert);
}

}  // namespace

TEST_CASE("tensor table: Qwen3-MoE names, per-head q/k norms, mlp.experts, explicit head_dim", "[tensor_table]") {
    const ModelConfig c = synth_preset(SynthPreset::QWEN3_MOE_MINI);
    const std::vector<TensorEntry> table = tensor_table(c);
    require_unique(table);
    // embed; per layer 2 norms, q k v o, q/k norms, router, 3 per expert; final norm, lm_head.
    REQUIRE(table.size() == 1 + size_t(c.n_layers) * (9 + 3 * size_t(c.n_experts)) + 2);
    const auto m = by_name(table);
    const int64_t q = int64_t(c.n_heads) * c.head_dim, kv = int64_t(c.n_kv_heads) * c.head_dim;
    REQUIRE(q != c.dim);
    check_entry(m, "model.layers.3.self_attn.q_proj.weight", {q, c.dim}, TensorRole::WQ, 3);
    check_entry(m, "model.layers.3.self_attn.o_proj.weight", {c.dim, q}, TensorRole::WO, 3);
    check_entry(m, "model.layers.3.self_attn.q_norm.weight", {c.head_dim}, TensorRole::Q_NORM, 3);
    check_entry(m, "model.layers.3.self_attn.k_norm.weight", {c.head_dim}, TensorRole::K_NORM, 3);
    check_entry(m, "model.layers.3.mlp.gate.weight", {c.n_experts, c.dim}, TensorRole::ROUTER, 3);
    check_entry(m, "model.layers.3.mlp.experts.127.gate_proj.weight", {c.hidden_dim, c.dim}, TensorRole::EXPERT_W1, 3,
                127);
    check_entry(m, "model.layers.3.mlp.experts.127.up_proj.weight", {c.hidden_dim, c.dim}, TensorRole::EXPERT_W3, 3,
                127);
    check_entry(m, "model.layers.3.mlp.experts.0.down_proj.weight", {c.dim, c.hidden_dim}, TensorRole::EXPERT_W2, 3, 0);
    check_entry(m, "model.layers.0.self_attn.k_proj.weight", {kv, c.dim}, TensorRole::WK, 0);
    CHECK(m.count("model.layers.0.self_attn.q_proj.bias") == 0);
    CHECK(m.count("model.layers.0.mlp.shared_expert_gate.weight") == 0);
}

TEST_CASE("tensor table: OLMoE full-width q/k norms", "[tensor_table]") {
    const ModelConfig c = synth_preset(SynthPreset::OLMOE_MINI);
    const auto m = by_name(tensor_table(c));
    const int64_t q = int64_t(c.n_heads) * c.head_dim, kv = int64_t(c.n_kv_heads) * c.head_dim;
    check_entry(m, "model.layers.1.self_attn.q_norm.weight", {q}, TensorRole::Q_NORM, 1);
    check_entry(m, "model.layers.1.self_attn.k_norm.weight", {kv}, TensorRole::K_NORM, 1);
    check_entry(m, "model.layers.1.mlp.experts.63.down_proj.weight", {c.dim, c.hidden_dim}, TensorRole::EXPERT_W2, 1,
                63);
}

TEST_CASE("tensor table: Qwen2-MoE q/k/v biases, the shared expert and its gate", "[tensor_table]") {
    const ModelConfig c = synth_preset(SynthPreset::QWEN2_MOE_MINI);
    const std::vector<TensorEntry> table = tensor_table(c);
    require_unique(table);
    const auto m = by_name(table);
    const int64_t q = int64_t(c.n_heads) * c.head_dim, kv = int64_t(c.n_kv_heads) * c.head_dim;
    const int64_t shared = c.shared_hidden_dim;
    check_entry(m, "model.layers.2.self_attn.q_proj.bias", {q}, TensorRole::Q_BIAS, 2);
    check_entry(m, "model.layers.2.self_attn.k_proj.bias", {kv}, TensorRole::K_BIAS, 2);
    check_entry(m, "model.layers.2.self_attn.v_proj.bias", {kv}, TensorRole::V_BIAS, 2);
    CHECK(m.count("model.layers.2.self_attn.o_proj.bias") == 0);
    check_entry(m, "model.layers.2.mlp.shared_expert.gate_proj.weight", {shared, c.dim}, TensorRole::MLP_W1, 2);
    check_entry(m, "model.layers.2.mlp.shared_expert.up_proj.weight", {shared, c.dim}, TensorRole::MLP_W3, 2);
    check_entry(m, "model.layers.2.mlp.shared_expert.down_proj.weight", {c.dim, shared}, TensorRole::MLP_W2, 2);
    check_entry(m, "model.layers.2.mlp.shared_expert_gate.weight", {1, c.dim}, TensorRole::SHARED_GATE, 2);
    check_entry(m, "model.layers.2.mlp.experts.59.gate_proj.weight", {c.hidden_dim, c.dim}, TensorRole::EXPERT_W1, 2,
                59);
    CHECK(m.count("model.layers.2.mlp.experts.60.gate_proj.weight") == 0);
}

TEST_CASE("tensor table: a dense layer of a MoE model has mlp.*_proj of intermediate_size and no router",
          "[tensor_table]") {
    ModelConfig c = synth_preset(SynthPreset::QWEN3_MOE_MINI);
    c.dense_layers = {0, 5};
    c.dense_hidden_dim = 1536;
    const std::vector<TensorEntry> table = tensor_table(c);
    require_unique(table);
    const auto m = by_name(table);
    check_entry(m, "model.layers.0.mlp.gate_proj.weight", {1536, c.dim}, TensorRole::MLP_W1, 0);
    check_entry(m, "model.layers.5.mlp.down_proj.weight", {c.dim, 1536}, TensorRole::MLP_W2, 5);
    CHECK(m.count("model.layers.0.mlp.gate.weight") == 0);
    CHECK(m.count("model.layers.0.mlp.experts.0.gate_proj.weight") == 0);
    CHECK(m.count("model.layers.1.mlp.gate.weight") == 1);
    CHECK(m.count("model.layers.1.mlp.gate_proj.weight") == 0);
}
