// The forward pass: one batch of (token, position, sequence) entries through
// every layer, Hugging Face Mixtral semantics (RMSNorm, rotate-half RoPE, GQA
// causal attention over the KV cache, softmax router + top-k renormalised,
// SwiGLU experts through an ExpertExecutor). Prefill, decode and beam search
// all use it. All buffers are allocated in the constructor: run() never
// allocates.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu_kernels/thread_pool.h"
#include "engine/expert_executor.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/weights.h"
#include "profiles/routing_stats.h"

// A batch is a list of entries; capacity is reserved once and reused.
struct Batch {
    std::vector<int> tokens;
    std::vector<int> positions;
    std::vector<int> seq_ids;             // KV-cache sequence of each entry
    std::vector<uint8_t> want_logits;     // compute logits for this entry

    void reserve(int n);
    void clear();
    void add(int token, int position, int seq_id, bool logits);
    int size() const { return int(tokens.size()); }
};

class ForwardPass {
public:
    // max_batch: the most entries one run() takes; max_logits: the most
    // entries with want_logits set.
    ForwardPass(const ModelConfig& config, const ModelWeights& weights, KvCache& cache, ExpertExecutor& executor,
                ThreadPool& pool, int max_batch, int max_logits);

    // Runs the batch, writes its keys/values into the cache, and returns the
    // logits (n_logits, vocab_size) of the entries with want_logits, in order.
    // Entries of one sequence must come in position order; an entry attends
    // to positions [0, position] of its sequence (writing a position makes
    // the sequence's own copy of a block it shares, see KvCache). Throws
    // MoeError when the cache has no free block. Routed-token counts are
    // added to stats when it is not null.
    const float* run(const Batch& batch, RoutingStats* stats = nullptr);

    int max_batch() const { return max_batch_; }

private:
    void attention(int layer, const Batch& batch);
    void moe(int layer, int n, RoutingStats* stats);

    const ModelConfig& config_;
    const ModelWeights& weights_;
    KvCache& cache_;
    ExpertExecutor& executor_;
    ThreadPool& pool_;
    int max_batch_, max_logits_;
    int q_dim_, kv_dim_, n_route_;  // n_route_: experts per token (1 for dense)

    std::vector<float> x_;         // (max_batch, dim) residual stream
    std::vector<float> xb_;        // (max_batch, dim) normed input
    std::vector<float> q_;         // (max_batch, q_dim)
    std::vector<float> k_;         // (max_batch, kv_dim)
    std::vector<float> v_;         // (max_batch, kv_dim)
    std::vector<float> att_;       // (max_batch, q_dim)
    std::vector<float> out_;       // (max_batch, dim)
    std::vector<float> router_;    // (max_batch, n_experts)
    std::vector<int> route_expert_;    // (max_batch, n_route) chosen experts
    std::vector<float> route_weight_;  // (max_batch, n_route) their weights
    std::vector<int> route_slot_;      // (max_batch, n_route) row in gathered buffers
    std::vector<float> gathered_;  // (max_batch * n_route, dim) expert inputs, grouped by expert
    std::vector<float> expert_out_;// (max_batch * n_route, dim)
    std::vector<int> expert_count_;// (n_experts)
    std::vector<int> expert_start_;// (n_experts)
    std::vector<ExpertTask> tasks_;
    std::vector<float> att_scratch_;  // (threads, ctx)
    std::vector<float> logits_;    // (max_logits, vocab)
    std::vector<float> logit_rows_;// (max_logits, dim)
};
