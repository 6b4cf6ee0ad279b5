// Tensor-by-tensor comparison of weight sets (see weights_compare.h).
#include "weights_compare.h"

#include <catch2/catch.hpp>
#include <cstring>

Flat flatten(const ModelConfig& c, const ModelWeights& w) {
    Flat f;
    const size_t d = size_t(c.dim);
    const size_t q = size_t(c.n_heads) * c.head_dim, kv = size_t(c.n_kv_heads) * c.head_dim;
    const bool full = c.qk_norm == QkNorm::FULL;
    f.matrices.push_back(w.embed);
    for (const LayerWeights& L : w.layers) {
        f.vectors.push_back({L.attn_norm, d});
        f.vectors.push_back({L.ffn_norm, d});
        // The optional vectors of Qwen and OLMoE layers, when present.
        for (const auto& [v, n] :
             {std::pair{L.q_bias, q}, std::pair{L.k_bias, kv}, std::pair{L.v_bias, kv},
              std::pair{L.q_norm, full ? q : size_t(c.head_dim)}, std::pair{L.k_norm, full ? kv : size_t(c.head_dim)}})
            if (v) f.vectors.push_back({v, n});
        // gpt-oss's.
        for (const auto& [v, n] : {std::pair{L.o_bias, d}, std::pair{L.sinks, size_t(c.n_heads)},
                                   std::pair{L.router_bias, size_t(c.n_experts)}})
            if (v) f.vectors.push_back({v, n});
        for (const WeightView* m : {&L.wq, &L.wk, &L.wv, &L.wo})
            if (!m->empty()) f.matrices.push_back(*m);
        // A Gated DeltaNet layer's.
        const LinearAttentionWeights& lin = L.linear;
        for (const WeightView* m : {&lin.wqkv, &lin.wz, &lin.wb, &lin.wa, &lin.wout})
            if (!m->empty()) f.matrices.push_back(*m);
        if (lin.conv) {
            const LinearAttentionShape& s = c.linear;
            f.vectors.push_back({lin.conv, size_t(s.conv_dim()) * s.conv_kernel});
            f.vectors.push_back({lin.dt_bias, size_t(s.n_v_heads)});
            f.vectors.push_back({lin.a, size_t(s.n_v_heads)});
            f.vectors.push_back({lin.norm, size_t(s.head_v_dim)});
        }
        if (!L.router.empty()) f.matrices.push_back(L.router);
        for (const ExpertWeights& E : L.experts) {
            for (const WeightView* m : {&E.w1, &E.w3, &E.w2}) f.matrices.push_back(*m);
            for (const auto& [v, n] : {std::pair{E.spec.b1, size_t(E.w1.rows)}, std::pair{E.spec.b3, size_t(E.w3.rows)},
                                       std::pair{E.spec.b2, size_t(E.w2.rows)}})
                if (v) f.vectors.push_back({v, n});
        }
        for (const WeightView* m : {&L.mlp.w1, &L.mlp.w3, &L.mlp.w2, &L.shared_gate})
            if (!m->empty()) f.matrices.push_back(*m);
    }
    f.vectors.push_back({w.final_norm, d});
    f.matrices.push_back(w.lm_head);
    return f;
}

// Same type, shape and bytes.
bool same_matrix(const WeightView& a, const WeightView& b) {
    return a.type == b.type && a.rows == b.rows && a.cols == b.cols && std::memcmp(a.data, b.data, a.bytes()) == 0;
}

void check_same_weights(const ModelConfig& c, const ModelWeights& a, const ModelWeights& b) {
    Flat fa = flatten(c, a), fb = flatten(c, b);
    REQUIRE(fa.matrices.size() == fb.matrices.size());
    for (size_t i = 0; i < fa.matrices.size(); i++) {
        INFO("matrix " << i);
        REQUIRE(!fa.matrices[i].empty());
        REQUIRE(!fb.matrices[i].empty());
        CHECK(same_matrix(fa.matrices[i], fb.matrices[i]));
    }
    for (size_t i = 0; i < fa.vectors.size(); i++) {
        INFO("vector " << i);
        CHECK(std::memcmp(fa.vectors[i].first, fb.vectors[i].first, fa.vectors[i].second * 4) == 0);
    }
}

int differing_tensors(const ModelConfig& c, const ModelWeights& a, const ModelWeights& b) {
    Flat fa = flatten(c, a), fb = flatten(c, b);
    REQUIRE(fa.matrices.size() == fb.matrices.size());
    int differ = 0;
    for (size_t i = 0; i < fa.matrices.size(); i++) differ += !same_matrix(fa.matrices[i], fb.matrices[i]);
    for (size_t i = 0; i < fa.vectors.size(); i++)
        differ += std::memcmp(fa.vectors[i].first, fb.vectors[i].first, fa.vectors[i].second * sizeof(float)) != 0;
    return differ;
}
