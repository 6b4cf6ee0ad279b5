// ExpertExecutor: the seam between the MoE layer and where experts run. The
// forward pass hands over, per layer, the list of routed experts with their
// gathered token rows; an executor computes each expert's SwiGLU output. The
// CPU executor runs them on the thread pool; placement-aware executors (an
// emulated device for tests, CUDA) implement the same interface, so the
// forward pass never changes when experts move.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "cpu_kernels/thread_pool.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

// One routed expert of a layer: its tokens are rows [row, row + n_tokens)
// of the layer's gathered rows (ExpertRows), grouped by expert.
struct ExpertTask {
    int expert = 0;
    int n_tokens = 0;
    int row = 0;
};

// A layer's gathered expert inputs x and outputs y, (rows, dim) each, in one
// memory (host, or a device's): task t reads x rows [t.row, t.row +
// t.n_tokens) and writes the same rows of y.
struct ExpertRows {
    float* x = nullptr;  // read by executors; written by the gather before them
    float* y = nullptr;
};

// The experts the forward pass predicts the next MoE layer will route to
// (ForwardPass::predict): each task's expert and token count (row unused,
// 0). layer -1: no prediction.
struct NextLayerGuess {
    int layer = -1;
    std::span<const ExpertTask> experts;
};

class ExpertExecutor {
public:
    virtual ~ExpertExecutor() = default;
    // Computes every task of one layer from rows; returns when all outputs
    // are written. next: the next MoE layer's predicted experts (when
    // wants_next_layer(), or when the forward pass measures its predictions;
    // else layer -1), e.g. for a device to prefetch.
    virtual void run_layer(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                           const NextLayerGuess& next) = 0;
    virtual const char* name() const = 0;
    // Whether run_layer uses the next layer's prediction: the forward pass
    // then predicts every MoE layer's experts one layer ahead.
    virtual bool wants_next_layer() const { return false; }
};

// Runs every expert on the CPU, one after another, each spread over the pool
// (weights streamed straight from the memory map).
class CpuExpertExecutor final : public ExpertExecutor {
public:
    // max_tokens: the most tokens one expert may receive in one call.
    CpuExpertExecutor(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool, int max_tokens);
    // rows in host memory.
    void run_layer(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                   const NextLayerGuess& next) override;
    const char* name() const override { return "cpu"; }

    // Tasks of at most this many tokens may run side by side, one expert a
    // thread (run_layer).
    static constexpr int SOLO_MAX_TOKENS = 64;

private:
    const ModelConfig& config_;
    const ModelWeights& weights_;
    ThreadPool& pool_;
    int max_tokens_;
    std::vector<float> scratch_;  // 2 * max_tokens * hidden_dim
    // Side by side: a pool of one per thread, each thread's scratch (2 *
    // SOLO_MAX_TOKENS * hidden_dim) and the small tasks, biggest first.
    std::vector<std::unique_ptr<ThreadPool>> solo_;
    std::vector<float> solo_scratch_;
    std::vector<int> small_;
};
