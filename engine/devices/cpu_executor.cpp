// CpuExpertExecutor: every routed expert through expert_ffn.
#include <cassert>

#include "cpu_kernels/kernels.h"
#include "engine/devices/expert_executor.h"

CpuExpertExecutor::CpuExpertExecutor(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool,
                                     int max_tokens)
    : config_(config), weights_(weights), pool_(pool), max_tokens_(max_tokens),
      scratch_(size_t(2) * max_tokens * config.hidden_dim) {}

void CpuExpertExecutor::run_layer(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                                  const NextLayerGuess&) {
    const LayerWeights& lw = weights_.layers[layer];
    const size_t dim = size_t(config_.dim);
    for (const ExpertTask& t : tasks) {
        assert(t.n_tokens > 0 && t.n_tokens <= max_tokens_);
        const ExpertWeights& e = lw.experts[t.expert];
        expert_ffn(rows.y + t.row * dim, rows.x + t.row * dim, e.w1, e.w3, e.w2, t.n_tokens, scratch_.data(), pool_);
    }
}
