// One prefill on the CPU backend (see cpu_forward.h).
#include "cpu_forward.h"

#include <algorithm>
#include <memory>

#include "cpu_kernels/thread_pool.h"
#include "engine/devices/backend.h"
#include "engine/devices/expert_executor.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/token_mixer.h"

std::vector<float> cpu_prefill_logits(const ModelConfig& c, const ModelWeights& w, const std::vector<int>& tokens) {
    const int n = int(tokens.size());
    const int ctx = std::max(64, n);
    ThreadPool pool(2);
    auto state = make_sequence_state(c, 1, ctx, host_state_memory());
    SequenceState& cache = *state;
    CpuExpertExecutor executor(c, w, pool, n);
    std::unique_ptr<Backend> backend = make_cpu_backend(c, w, pool, ctx, n * std::max(1, c.n_experts_active));
    ForwardPass forward(c, *backend, cache, executor, n, n);
    Batch batch;
    for (int i = 0; i < n; i++) batch.add(tokens[size_t(i)], i, 0, true);
    const float* logits = forward.run(batch);
    return std::vector<float>(logits, logits + size_t(n) * size_t(c.vocab_size));
}
