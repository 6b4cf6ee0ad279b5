// One prefill of a token sequence on the CPU backend, for tests that compare
// two weight sets or sources by their logits.
#pragma once
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/weights.h"

// The full-vocabulary logits of every position of `tokens` (one sequence,
// one batch), 2 threads.
std::vector<float> cpu_prefill_logits(const ModelConfig& c, const ModelWeights& w, const std::vector<int>& tokens);
