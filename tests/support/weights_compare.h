// Comparing two loaded weight sets of one config tensor by tensor (the
// loader's tests, the in-memory synthetic weights against a written folder).
// Reads ModelWeights only; loads nothing.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/weights.h"

// Every matrix (of any type) and fp32 vector (with its element count) of a
// loaded model, in table order.
struct Flat {
    std::vector<WeightView> matrices;
    std::vector<std::pair<const float*, size_t>> vectors;
};

Flat flatten(const ModelConfig& c, const ModelWeights& w);

// Catch2 checks that every tensor of a and b holds the same bytes.
void check_same_weights(const ModelConfig& c, const ModelWeights& a, const ModelWeights& b);

// How many tensors (matrices and vectors) of a and b differ in any byte.
int differing_tensors(const ModelConfig& c, const ModelWeights& a, const ModelWeights& b);
