// Forward pass over a batch (see forward.h). Shapes in comments use
// n = entries in the batch.
#include "engine/forward.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "cpu_kernels/kernels.h"

void Batch::reserve(int n) {
    tokens.reserve(n);
    positions.reserve(n);
    seq_ids.reserve(n);
    want_logits.reserve(n);
}

void Batch::clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    want_logits.clear();
}

void Batch::add(int token, int position, int seq_id, bool logits) {
    tokens.push_back(token);
    positions.push_back(position);
    seq_ids.push_back(seq_id);
    want_logits.push_back(logits ? 1 : 0);
}

ForwardPass::ForwardPass(const ModelConfig& config, const ModelWeights& weights, KvCache& cache,
                         ExpertExecutor& executor, ThreadPool& pool, int max_batch, int max_logits)
    : config_(config), weights_(weights), cache_(cache), executor_(executor), pool_(pool), max_batch_(max_batch),
      max_logits_(max_logits) {
    const ModelConfig& c = config;
    q_dim_ = c.n_heads * c.head_dim;
    kv_dim_ = c.n_kv_heads * c.head_dim;
    n_route_ = c.is_moe() ? c.n_experts_active : 1;
    int n_experts = c.is_moe() ? c.n_experts : 1;
    size_t mb = size_t(max_batch);
    x_.resize(mb * c.dim);
    xb_.resize(mb * c.dim);
    q_.resize(mb * q_dim_);
    k_.resize(mb * kv_dim_);
    v_.resize(mb * kv_dim_);
    att_.resize(mb * q_dim_);
    out_.resize(mb * c.dim);
    router_.resize(mb * n_experts);
    route_expert_.resize(mb * n_route_);
    route_weight_.resize(mb * n_route_);
    route_slot_.resize(mb * n_route_);
    gathered_.resize(mb * n_route_ * c.dim);
    expert_out_.resize(mb * n_route_ * c.dim);
    expert_count_.resize(n_experts);
    expert_start_.resize(n_experts);
    tasks_.reserve(n_experts);
    att_scratch_.resize(size_t(pool.size()) * cache.ctx());
    logits_.resize(size_t(max_logits) * c.vocab_size);
    logit_rows_.resize(size_t(max_logits) * c.dim);
}

const float* ForwardPass::run(const Batch& batch, RoutingStats* stats) {
    const ModelConfig& c = config_;
    const int n = batch.size();
    assert(n > 0 && n <= max_batch_);
    const int dim = c.dim;

    // Every entry's KV row is made writable before layer 0: a copy-on-write
    // copies the whole block (all layers) once.
    for (int i = 0; i < n; i++) {
        assert(batch.positions[i] >= 0 && batch.positions[i] < cache_.ctx());
        cache_.prepare_write(batch.seq_ids[i], batch.positions[i]);
    }

    // x (n, dim) = embed[token]
    for (int i = 0; i < n; i++) {
        assert(batch.tokens[i] >= 0 && batch.tokens[i] < c.vocab_size);
        const bf16* row = weights_.embed + size_t(batch.tokens[i]) * dim;
        float* xi = x_.data() + size_t(i) * dim;
        for (int j = 0; j < dim; j++) xi[j] = bf16_to_f32(row[j]);
    }

    for (int l = 0; l < c.n_layers; l++) {
        const LayerWeights& lw = weights_.layers[l];
        for (int i = 0; i < n; i++)
            rmsnorm(xb_.data() + size_t(i) * dim, x_.data() + size_t(i) * dim, lw.attn_norm, dim, c.rms_norm_eps);
        attention(l, batch);
        // out (n, dim) = att (n, q_dim) @ Wo^T; residual add
        matmul_bf16(out_.data(), att_.data(), lw.wo, n, dim, q_dim_, pool_);
        for (size_t j = 0; j < size_t(n) * dim; j++) x_[j] += out_[j];

        for (int i = 0; i < n; i++)
            rmsnorm(xb_.data() + size_t(i) * dim, x_.data() + size_t(i) * dim, lw.ffn_norm, dim, c.rms_norm_eps);
        moe(l, n, stats);
        for (size_t j = 0; j < size_t(n) * dim; j++) x_[j] += out_[j];
    }

    // Final norm and lm_head only for the entries that want logits.
    int n_logits = 0;
    for (int i = 0; i < n; i++) {
        if (!batch.want_logits[i]) continue;
        assert(n_logits < max_logits_);
        rmsnorm(logit_rows_.data() + size_t(n_logits) * dim, x_.data() + size_t(i) * dim, weights_.final_norm, dim,
                c.rms_norm_eps);
        n_logits++;
    }
    if (n_logits > 0) matmul_bf16(logits_.data(), logit_rows_.data(), weights_.lm_head, n_logits, c.vocab_size, dim, pool_);
    return logits_.data();
}

void ForwardPass::attention(int layer, const Batch& batch) {
    const ModelConfig& c = config_;
    const LayerWeights& lw = weights_.layers[layer];
    const int n = batch.size();
    // q (n, q_dim), k, v (n, kv_dim) = xb @ W^T
    matmul_bf16(q_.data(), xb_.data(), lw.wq, n, q_dim_, c.dim, pool_);
    matmul_bf16(k_.data(), xb_.data(), lw.wk, n, kv_dim_, c.dim, pool_);
    matmul_bf16(v_.data(), xb_.data(), lw.wv, n, kv_dim_, c.dim, pool_);
    for (int i = 0; i < n; i++) {
        int pos = batch.positions[i], seq = batch.seq_ids[i];
        rope_rotate_half(q_.data() + size_t(i) * q_dim_, c.n_heads, c.head_dim, pos, c.rope_theta);
        rope_rotate_half(k_.data() + size_t(i) * kv_dim_, c.n_kv_heads, c.head_dim, pos, c.rope_theta);
        std::copy_n(k_.data() + size_t(i) * kv_dim_, kv_dim_, cache_.k(layer, seq, pos));
        std::copy_n(v_.data() + size_t(i) * kv_dim_, kv_dim_, cache_.v(layer, seq, pos));
    }
    // One work item per (entry, kv head), dealt round-robin (causal rows
    // differ in length): the query heads of a GQA group share the keys they read.
    const int group = c.n_heads / c.n_kv_heads;
    const long items = long(n) * c.n_kv_heads;
    const int ctx = cache_.ctx();
    const int n_threads = pool_.size();
    pool_.run([&](int thread) {
        float* scratch = att_scratch_.data() + size_t(thread) * ctx;
        for (long it = thread; it < items; it += n_threads) {
            int i = int(it / c.n_kv_heads), g = int(it % c.n_kv_heads);
            int pos = batch.positions[i], seq = batch.seq_ids[i];
            size_t head0 = size_t(g) * group * c.head_dim;
            long kv_col = long(g) * c.head_dim;
            attention_paged(att_.data() + size_t(i) * q_dim_ + head0, q_.data() + size_t(i) * q_dim_ + head0,
                            cache_.blocks(seq), cache_.k_offset(layer) + kv_col, cache_.v_offset(layer) + kv_col,
                            KV_BLOCK, pos + 1, group, 1, c.head_dim, kv_dim_, scratch);
        }
    });
}

void ForwardPass::moe(int layer, int n, RoutingStats* stats) {
    const ModelConfig& c = config_;
    const LayerWeights& lw = weights_.layers[layer];
    const int dim = c.dim;
    const int n_experts = int(expert_count_.size());

    // Routing: softmax over all experts, keep top-k, renormalise the k weights.
    if (c.is_moe()) {
        matmul_bf16(router_.data(), xb_.data(), lw.router, n, n_experts, dim, pool_);
        for (int i = 0; i < n; i++) {
            float* p = router_.data() + size_t(i) * n_experts;
            softmax(p, n_experts);
            int* chosen = route_expert_.data() + size_t(i) * n_route_;
            float* w = route_weight_.data() + size_t(i) * n_route_;
            top_k(chosen, p, n_experts, n_route_);
            float sum = 0.0f;
            for (int r = 0; r < n_route_; r++) sum += p[chosen[r]];
            for (int r = 0; r < n_route_; r++) w[r] = c.norm_topk_prob ? p[chosen[r]] / sum : p[chosen[r]];
        }
    } else {
        for (int i = 0; i < n; i++) {
            route_expert_[i] = 0;
            route_weight_[i] = 1.0f;
        }
    }

    // Group token rows by expert: counting sort, so each expert's rows are
    // contiguous and in batch order.
    std::fill(expert_count_.begin(), expert_count_.end(), 0);
    for (int j = 0; j < n * n_route_; j++) expert_count_[route_expert_[j]]++;
    int offset = 0;
    for (int e = 0; e < n_experts; e++) {
        expert_start_[e] = offset;
        offset += expert_count_[e];
    }
    std::fill(expert_count_.begin(), expert_count_.end(), 0);
    for (int j = 0; j < n * n_route_; j++) {
        int e = route_expert_[j];
        int slot = expert_start_[e] + expert_count_[e]++;
        route_slot_[j] = slot;
        std::copy_n(xb_.data() + size_t(j / n_route_) * dim, dim, gathered_.data() + size_t(slot) * dim);
    }
    tasks_.clear();
    for (int e = 0; e < n_experts; e++) {
        if (expert_count_[e] == 0) continue;
        tasks_.push_back({e, expert_count_[e], gathered_.data() + size_t(expert_start_[e]) * dim,
                          expert_out_.data() + size_t(expert_start_[e]) * dim});
        if (stats) stats->add(layer, e, uint64_t(expert_count_[e]));
    }
    executor_.run_layer(layer, tasks_);

    // Weighted sum in a fixed order (the token's routing order), so results
    // never depend on where or when an expert ran.
    for (int i = 0; i < n; i++) {
        float* o = out_.data() + size_t(i) * dim;
        std::fill(o, o + dim, 0.0f);
        for (int r = 0; r < n_route_; r++) {
            int j = i * n_route_ + r;
            const float* y = expert_out_.data() + size_t(route_slot_[j]) * dim;
            float w = route_weight_[j];
            for (int d = 0; d < dim; d++) o[d] += w * y[d];
        }
    }
}
