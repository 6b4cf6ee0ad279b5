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
    ModelConfig c = synth_preset("tiny");
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
    const ModelConfig c = synth_preset("tiny");
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
