// The CPU backend (see backend.h): host buffers and cpu_kernels on the
// thread pool. Its arithmetic and order are those of the CPU forward pass
// before the seam existed, so results and speed are unchanged. Expert rows
// are host memory, so moving them to and from the host does nothing.
//
// CpuExpertExecutor (expert_executor.h): every routed expert through expert_ffn.
#include <algorithm>
#include <cassert>
#include <memory>
#include <vector>

#include "cpu_kernels/kernels.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/devices/backend.h"
#include "engine/state/batch.h"
#include "engine/devices/expert_executor.h"
#include "gpu_kernels/gpu_math.h"

namespace {

class CpuBackend final : public Backend {
public:
    CpuBackend(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool, int ctx, int max_rows)
        : c_(config), weights_(weights), pool_(pool), q_dim_(config.n_heads * config.head_dim),
          kv_dim_(config.n_kv_heads * config.head_dim), att_scratch_(size_t(pool.size()) * ctx),
          rows_x_(size_t(max_rows) * config.dim), rows_y_(size_t(max_rows) * config.dim) {}

    const char* name() const override { return "cpu"; }
    const ModelWeights& weights() const override { return weights_; }
    StateMemory& state_memory() override { return host_state_memory(); }

    float* alloc(size_t n) override {
        buffers_.push_back(std::make_unique_for_overwrite<float[]>(n));
        return buffers_.back().get();
    }

    void begin(const Batch& batch, const SequenceState& state) override {
        batch_ = &batch;
        cache_ = state.kv();
        assert(int(att_scratch_.size()) >= pool_.size() * state.ctx());
    }

    void embed(float* x) override {
        const int dim = c_.dim;
        for (int i = 0; i < batch_->size(); i++) weight_row_f32(x + size_t(i) * dim, weights_.embed, batch_->tokens[i]);
    }

    void rmsnorm(float* out, const float* x, const float* weight, int rows, int dim, float eps) override {
        for (int i = 0; i < rows; i++) ::rmsnorm(out + size_t(i) * dim, x + size_t(i) * dim, weight, dim, eps);
    }

    void matmul(float* y, const float* x, const WeightView& w, int m) override { ::matmul(y, x, w, m, pool_); }

    void rope(float* x, int n_heads) override {
        const int width = n_heads * c_.head_dim;
        for (int i = 0; i < batch_->size(); i++)
            rope_rotate_half(x + size_t(i) * width, n_heads, c_.head_dim, batch_->positions[i], c_.rope_theta);
    }

    void kv_store(int layer, const float* k, const float* v) override {
        for (int i = 0; i < batch_->size(); i++) {
            float* base = cache_->row_base(batch_->seq_ids[i], batch_->positions[i]);
            std::copy_n(k + size_t(i) * kv_dim_, kv_dim_, base + cache_->k_offset(layer));
            std::copy_n(v + size_t(i) * kv_dim_, kv_dim_, base + cache_->v_offset(layer));
        }
    }

    // One work item per (entry, kv head), dealt round-robin (causal rows
    // differ in length): the query heads of a GQA group share the keys they read.
    void attention(int layer, float* out, const float* q) override {
        const Batch& batch = *batch_;
        const KvCache& cache = *cache_;
        const int group = c_.n_heads / c_.n_kv_heads;
        const long items = long(batch.size()) * c_.n_kv_heads;
        const int ctx = cache.ctx();
        const int n_threads = pool_.size();
        pool_.run([&](int thread) {
            float* scratch = att_scratch_.data() + size_t(thread) * ctx;
            for (long it = thread; it < items; it += n_threads) {
                int i = int(it / c_.n_kv_heads), g = int(it % c_.n_kv_heads);
                int pos = batch.positions[i], seq = batch.seq_ids[i];
                size_t head0 = size_t(g) * group * c_.head_dim;
                long kv_col = long(g) * c_.head_dim;
                attention_paged(out + size_t(i) * q_dim_ + head0, q + size_t(i) * q_dim_ + head0, cache.blocks(seq),
                                cache.k_offset(layer) + kv_col, cache.v_offset(layer) + kv_col, KV_BLOCK, pos + 1,
                                group, 1, c_.head_dim, kv_dim_, scratch);
            }
        });
    }

    void add(float* x, const float* y, size_t n) override {
        for (size_t j = 0; j < n; j++) x[j] += y[j];
    }

    void add_bias(float* x, const float* bias, int rows, int width) override {
        for (int i = 0; i < rows; i++) {
            float* row = x + size_t(i) * width;
            for (int j = 0; j < width; j++) row[j] += bias[j];
        }
    }

    void mlp(float* y, const float* x, const ExpertWeights& w, int m, float* scratch) override {
        expert_ffn(y, x, w.w1, w.w3, w.w2, m, scratch, pool_);
    }

    void sigmoid_scale(float* y, const float* gate, int rows, int dim) override {
        for (int i = 0; i < rows; i++) {
            const float s = gm_sigmoid(gate[i]);
            float* row = y + size_t(i) * dim;
            for (int d = 0; d < dim; d++) row[d] *= s;
        }
    }

    void route(int* experts, float* weights, float* logits, int rows, int n_experts, int k, bool renorm) override {
        for (int i = 0; i < rows; i++) {
            float* p = logits + size_t(i) * n_experts;
            softmax(p, n_experts);
            int* chosen = experts + size_t(i) * k;
            float* w = weights + size_t(i) * k;
            top_k(chosen, p, n_experts, k);
            float sum = 0.0f;
            for (int r = 0; r < k; r++) sum += p[chosen[r]];
            for (int r = 0; r < k; r++) w[r] = renorm ? p[chosen[r]] / sum : p[chosen[r]];
        }
    }

    void gather(float* out, const float* x, const int* src_row, int rows, int dim) override {
        for (int i = 0; i < rows; i++) std::copy_n(x + size_t(src_row[i]) * dim, dim, out + size_t(i) * dim);
    }

    void combine(float* out, const float* y, const int* slots, const float* weights, int rows, int k,
                 int dim) override {
        for (int i = 0; i < rows; i++) {
            float* o = out + size_t(i) * dim;
            std::fill(o, o + dim, 0.0f);
            for (int r = 0; r < k; r++) {
                const float* yr = y + size_t(slots[i * k + r]) * dim;
                float w = weights[i * k + r];
                for (int d = 0; d < dim; d++) o[d] += w * yr[d];
            }
        }
    }

    const float* to_host(const float* x, size_t) override { return x; }

    ExpertRows expert_rows() override { return {rows_x_.data(), rows_y_.data()}; }
    ExpertRows host_rows() override { return expert_rows(); }
    void rows_to_host(std::span<const ExpertTask>) override {}
    void rows_from_host(std::span<const ExpertTask>) override {}

private:
    const ModelConfig& c_;
    const ModelWeights& weights_;
    ThreadPool& pool_;
    int q_dim_, kv_dim_;
    const Batch* batch_ = nullptr;
    const KvCache* cache_ = nullptr;
    std::vector<float> att_scratch_;  // (threads, ctx)
    std::vector<float> rows_x_, rows_y_;  // (max_rows, dim) each
    std::vector<std::unique_ptr<float[]>> buffers_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool,
                                          int ctx, int max_rows) {
    return std::make_unique<CpuBackend>(config, weights, pool, ctx, max_rows);
}

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
