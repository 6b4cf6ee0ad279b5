// Tensor-by-tensor comparison of weight sets (see weights_compare.h).
#include "weights_compare.h"

#include <catch2/catch.hpp>
#include <cstring>

Flat flatten(const ModelConfig& c, const ModelWeights& w) {
    Flat f;
    size_t d = size_t(c.dim), h = size_t(c.hidden_dim), v = size_t(c.vocab_size);
    size_t q = size_t(c.n_heads * c.head_dim), kv = size_t(c.n_kv_heads * c.head_dim);
    f.matrices.push_back({w.embed, v * d});
    for (const LayerWeights& L : w.layers) {
        f.vectors.push_back({L.attn_norm, d});
        f.vectors.push_back({L.ffn_norm, d});
        f.matrices.push_back({L.wq, q * d});
        f.matrices.push_back({L.wk, kv * d});
        f.matrices.push_back({L.wv, kv * d});
        f.matrices.push_back({L.wo, d * q});
        if (L.router) f.matrices.push_back({L.router, size_t(c.n_experts) * d});
        for (const ExpertWeights& E : L.experts) {
            f.matrices.push_back({E.w1, h * d});
            f.matrices.push_back({E.w3, h * d});
            f.matrices.push_back({E.w2, d * h});
        }
    }
    f.vectors.push_back({w.final_norm, d});
    f.matrices.push_back({w.lm_head, v * d});
    return f;
}

void check_same_weights(const ModelConfig& c, const ModelWeights& a, const ModelWeights& b) {
    Flat fa = flatten(c, a), fb = flatten(c, b);
    REQUIRE(fa.matrices.size() == fb.matrices.size());
    for (size_t i = 0; i < fa.matrices.size(); i++) {
        INFO("matrix " << i);
        REQUIRE(fa.matrices[i].first != nullptr);
        REQUIRE(fb.matrices[i].first != nullptr);
        CHECK(std::memcmp(fa.matrices[i].first, fb.matrices[i].first, fa.matrices[i].second * 2) == 0);
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
    for (size_t i = 0; i < fa.matrices.size(); i++)
        differ += std::memcmp(fa.matrices[i].first, fb.matrices[i].first, fa.matrices[i].second * sizeof(bf16)) != 0;
    for (size_t i = 0; i < fa.vectors.size(); i++)
        differ += std::memcmp(fa.vectors[i].first, fb.vectors[i].first, fa.vectors[i].second * sizeof(float)) != 0;
    return differ;
}
