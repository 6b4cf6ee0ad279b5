// The CPU backend (see backend.h): host buffers and cpu_kernels on the
// thread pool. Its arithmetic and order are those of the CPU forward pass
// before the seam existed, so results and speed are unchanged. Expert rows
// are host memory, so moving them to and from the host does nothing.
//
// CpuExpertExecutor (expert_executor.h): every routed expert through expert_ffn.
#include <algorithm>
#include <atomic>
#include <cassert>
#include <memory>
#include <vector>

#include "cpu_kernels/kernels.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/devices/backend.h"
#include "engine/state/batch.h"
#include "engine/devices/expert_executor.h"
#include "engine/state/recurrent_state.h"
#include "gpu_kernels/gpu_math.h"

namespace {

// Consecutive positions of one sequence from which attention goes through
// attention_run's blocks.
constexpr int ATTN_RUN_MIN = 2;

// Rows a thread takes at a time in route, gather and combine: a decode
// step's few rows stay on the calling thread.
constexpr long ROWS_ALIGN = 16;

class CpuBackend final : public Backend {
public:
    CpuBackend(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool, int ctx, int max_rows)
        : c_(config), weights_(weights), pool_(pool), q_dim_(config.n_heads * config.head_dim),
          kv_dim_(config.n_kv_heads * config.head_dim), rope_freq_(rope_inv_freq(config)),
          rope_mscale_(rope_attention_factor(config)), att_scratch_(size_t(pool.size()) * (config.n_heads / std::max(1, config.n_kv_heads)) * ctx),
          rows_x_(size_t(max_rows) * config.dim), rows_y_(size_t(max_rows) * config.dim),
          decay_(size_t(max_rows) * config.linear.n_v_heads), beta_(size_t(max_rows) * config.linear.n_v_heads) {
        singles_.reserve(size_t(max_rows));
    }

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
        recurrent_ = state.recurrent();
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
            rope_rotate_half(x + size_t(i) * width, n_heads, c_.head_dim, batch_->positions[i], rope_freq_.data(),
                             rope_mscale_, c_.rope_dim());
    }

    void split_heads(float* a, float* b, const float* x, int rows, int n_heads, int head_dim) override {
        const size_t hd = size_t(head_dim);
        for (size_t r = 0; r < size_t(rows) * n_heads; r++) {
            std::copy_n(x + 2 * r * hd, hd, a + r * hd);
            std::copy_n(x + (2 * r + 1) * hd, hd, b + r * hd);
        }
    }

    void sigmoid_mul(float* x, const float* gate, size_t n) override {
        for (size_t j = 0; j < n; j++) x[j] *= gm_sigmoid(gate[j]);
    }

    // Run by run (consecutive entries of one sequence, in position order):
    // the conv over the channels, q and k to unit length, each value head's
    // decay and beta, then the delta rule of the whole run per value head
    // (gated_delta_rule: chunked from DELTA_CHUNK_MIN tokens, so a prompt
    // goes through GEMM blocks) and its gated norm, heads spread over the pool.
    void delta_net(int layer, float* o, float* qkv, const float* z, const float* b, const float* a,
                   const LinearAttentionWeights& w) override {
        const int n = batch_->size();
        for (int i0 = 0, i1 = 0; i0 < n; i0 = i1) {
            for (i1 = i0 + 1; i1 < n && batch_->seq_ids[i1] == batch_->seq_ids[i0];) i1++;
            delta_net_run(layer, i0, i1, o, qkv, z, b, a, w);
        }
    }

    void delta_net_run(int layer, int i0, int i1, float* o, float* qkv, const float* z, const float* b,
                       const float* a, const LinearAttentionWeights& w) {
        const LinearAttentionShape& s = c_.linear;
        const int conv_dim = s.conv_dim(), key_dim = s.key_dim(), value_dim = s.value_dim(), nv = s.n_v_heads;
        const int dk = s.head_k_dim, dv = s.head_v_dim, K = s.conv_kernel;
        const float q_scale = 1.0f / std::sqrt(float(dk));
        const int seq = batch_->seq_ids[i0];
        assert(recurrent_);
        float* window = recurrent_->conv(layer, seq);
        pool_.parallel_for(conv_dim, 16, [&](long c0, long c1) {
            for (int i = i0; i < i1; i++) {
                float* x = qkv + size_t(i) * conv_dim;
                for (long c = c0; c < c1; c++) x[c] = gm_conv_channel(window, x[c], w.conv, int(c), conv_dim, K);
            }
        });
        // q and k of each key head to unit length (eps 1e-6), q scaled by
        // 1/sqrt(dk); the log decay g and beta of each value head.
        pool_.parallel_for(i1 - i0, 1, [&](long r0, long r1) {
            for (long i = i0 + r0; i < i0 + r1; i++) {
                float* x = qkv + size_t(i) * conv_dim;
                for (int h = 0; h < 2 * s.n_k_heads; h++)
                    gm_l2_normalize(x + size_t(h) * dk, dk, h < s.n_k_heads ? q_scale : 1.0f);
                for (int h = 0; h < nv; h++) {
                    const size_t e = size_t(i) * nv + h;
                    decay_[e] = w.a[h] * gm_softplus(a[e] + w.dt_bias[h]);
                    beta_[e] = gm_sigmoid(b[e]);
                }
            }
        });
        float* S = recurrent_->matrices(layer, seq);
        const float* x = qkv + size_t(i0) * conv_dim;
        pool_.parallel_for(nv, 1, [&](long h0, long h1) {
            for (long h = h0; h < h1; h++) {
                const int kh = s.k_head_of(int(h));
                float* oh = o + size_t(i0) * value_dim + size_t(h) * dv;
                gated_delta_rule(S + size_t(h) * dk * dv, oh, value_dim, x + size_t(kh) * dk,
                                 x + key_dim + size_t(kh) * dk, conv_dim, x + 2 * key_dim + size_t(h) * dv, conv_dim,
                                 decay_.data() + size_t(i0) * nv + h, beta_.data() + size_t(i0) * nv + h, nv, i1 - i0,
                                 dk, dv);
                for (int i = 0; i < i1 - i0; i++)
                    gm_rmsnorm_gated(oh + size_t(i) * value_dim, z + size_t(i0 + i) * value_dim + size_t(h) * dv,
                                     w.norm, dv, c_.rms_norm_eps);
            }
        });
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
    // A run of consecutive positions of one sequence (a prompt, a turn)
    // goes through attention_run's blocks; single entries (decode steps,
    // beams) one by one, threads over (entry, kv head).
    void attention(int layer, float* out, const float* q, const AttnMask& mask) override {
        const Batch& batch = *batch_;
        const KvCache& cache = *cache_;
        const int n = batch.size();
        const int group = c_.n_heads / c_.n_kv_heads;
        singles_.clear();
        for (int i0 = 0, i1 = 0; i0 < n; i0 = i1) {
            const int seq = batch.seq_ids[i0];
            for (i1 = i0 + 1; i1 < n && batch.seq_ids[i1] == seq && batch.positions[i1] == batch.positions[i1 - 1] + 1;)
                i1++;
            if (i1 - i0 < ATTN_RUN_MIN) {
                for (int i = i0; i < i1; i++) singles_.push_back(i);
                continue;
            }
            attention_run(out + size_t(i0) * q_dim_, q_dim_, q + size_t(i0) * q_dim_, q_dim_, cache.blocks(seq),
                          cache.k_offset(layer), cache.v_offset(layer), KV_BLOCK, batch.positions[i0], i1 - i0,
                          c_.n_heads, c_.n_kv_heads, c_.head_dim, kv_dim_, pool_, mask);
        }
        if (singles_.empty()) return;
        const long items = long(singles_.size()) * c_.n_kv_heads;
        const int ctx = cache.ctx();
        const int n_threads = pool_.size();
        pool_.run([&](int thread) {
            float* scratch = att_scratch_.data() + size_t(thread) * group * ctx;
            for (long it = thread; it < items; it += n_threads) {
                int i = singles_[size_t(it / c_.n_kv_heads)], g = int(it % c_.n_kv_heads);
                int pos = batch.positions[i], seq = batch.seq_ids[i];
                size_t head0 = size_t(g) * group * c_.head_dim;
                long kv_col = long(g) * c_.head_dim;
                attention_paged(out + size_t(i) * q_dim_ + head0, q + size_t(i) * q_dim_ + head0, cache.blocks(seq),
                                cache.k_offset(layer) + kv_col, cache.v_offset(layer) + kv_col, KV_BLOCK, pos + 1,
                                group, 1, c_.head_dim, kv_dim_, scratch,
                                AttnMask{mask.window, mask.sinks ? mask.sinks + head0 / c_.head_dim : nullptr});
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
        expert_ffn(y, x, w.w1, w.w3, w.w2, m, scratch, pool_, w.spec);
    }

    void sigmoid_scale(float* y, const float* gate, int rows, int dim) override {
        for (int i = 0; i < rows; i++) {
            const float s = gm_sigmoid(gate[i]);
            float* row = y + size_t(i) * dim;
            for (int d = 0; d < dim; d++) row[d] *= s;
        }
    }

    void route(int* experts, float* weights, float* logits, int rows, int n_experts, int k, bool renorm) override {
        pool_.parallel_for(rows, ROWS_ALIGN, [&](long i0, long i1) {
            for (long i = i0; i < i1; i++) {
                float* p = logits + size_t(i) * n_experts;
                softmax(p, n_experts);
                int* chosen = experts + size_t(i) * k;
                float* w = weights + size_t(i) * k;
                top_k(chosen, p, n_experts, k);
                float sum = 0.0f;
                for (int r = 0; r < k; r++) sum += p[chosen[r]];
                for (int r = 0; r < k; r++) w[r] = renorm ? p[chosen[r]] / sum : p[chosen[r]];
            }
        });
    }

    // gather and combine move a prefill's rows (every token times top-k) over
    // the pool: serial, they took a tenth of a small MoE's prefill (route a
    // fiftieth).
    void gather(float* out, const float* x, const int* src_row, int rows, int dim) override {
        pool_.parallel_for(rows, ROWS_ALIGN, [&](long i0, long i1) {
            for (long i = i0; i < i1; i++) std::copy_n(x + size_t(src_row[i]) * dim, dim, out + size_t(i) * dim);
        });
    }

    void combine(float* out, const float* y, const int* slots, const float* weights, int rows, int k,
                 int dim) override {
        pool_.parallel_for(rows, ROWS_ALIGN, [&](long i0, long i1) {
            for (long i = i0; i < i1; i++) {
                float* o = out + size_t(i) * dim;
                std::fill(o, o + dim, 0.0f);
                for (int r = 0; r < k; r++) {
                    const float* yr = y + size_t(slots[i * k + r]) * dim;
                    float w = weights[i * k + r];
                    for (int d = 0; d < dim; d++) o[d] += w * yr[d];
                }
            }
        });
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
    RecurrentState* recurrent_ = nullptr;
    std::vector<double> rope_freq_;   // rope_inv_freq of the config
    float rope_mscale_;
    std::vector<float> att_scratch_;  // (threads, query heads a kv head, ctx)
    std::vector<int> singles_;        // the batch entries attention takes one by one
    std::vector<float> rows_x_, rows_y_;  // (max_rows, dim) each
    std::vector<float> decay_, beta_;     // (max_rows, n_v_heads): the delta rule's g and beta per entry
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
      scratch_(size_t(2) * max_tokens * config.hidden_dim) {
    if (pool.size() > 1) {
        for (int i = 0; i < pool.size(); i++) solo_.push_back(std::make_unique<ThreadPool>(1));
        solo_scratch_.resize(size_t(pool.size()) * 2 * SOLO_MAX_TOKENS * config.hidden_dim);
    }
    small_.reserve(size_t(std::max(1, config.n_experts)));
}

// Many experts with few tokens each (a prefill of a model with 64 or more
// experts; a decode step's top-8) run side by side, one expert a thread
// through a pool of one, the biggest first, each thread taking the next
// when it is done: one fork and join a layer instead of three an expert,
// whose small matrices split over threads spent more time joining than
// multiplying. The rest (big tasks; two experts of Mixtral's decode) run
// one at a time over all threads. An expert's output does not depend on how
// many threads split its rows or columns (cpu_kernels), so neither way
// changes a bit of it.
void CpuExpertExecutor::run_layer(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                                  const NextLayerGuess&) {
    const LayerWeights& lw = weights_.layers[layer];
    const size_t dim = size_t(config_.dim);
    auto run = [&](const ExpertTask& t, float* scratch, ThreadPool& pool) {
        assert(t.n_tokens > 0 && t.n_tokens <= max_tokens_);
        const ExpertWeights& e = lw.experts[t.expert];
        expert_ffn(rows.y + t.row * dim, rows.x + t.row * dim, e.w1, e.w3, e.w2, t.n_tokens, scratch, pool, e.spec);
    };
    small_.clear();
    if (!solo_.empty())
        for (size_t i = 0; i < tasks.size(); i++)
            if (tasks[i].n_tokens <= SOLO_MAX_TOKENS) small_.push_back(int(i));
    if (small_.size() < 2 * solo_.size()) small_.clear();
    for (size_t i = 0, s = 0; i < tasks.size(); i++) {
        if (s < small_.size() && small_[s] == int(i)) {
            s++;
            continue;
        }
        run(tasks[i], scratch_.data(), pool_);
    }
    if (small_.empty()) return;
    // Biggest first, ties in task order (std::sort: no buffer, unlike stable_sort).
    std::sort(small_.begin(), small_.end(), [&](int a, int b) {
        const int na = tasks[size_t(a)].n_tokens, nb = tasks[size_t(b)].n_tokens;
        return na != nb ? na > nb : a < b;
    });
    std::atomic<size_t> next{0};
    const size_t per_thread = size_t(2) * SOLO_MAX_TOKENS * config_.hidden_dim;
    pool_.run([&](int thread) {
        for (size_t j; (j = next.fetch_add(1, std::memory_order_relaxed)) < small_.size();)
            run(tasks[size_t(small_[j])], solo_scratch_.data() + size_t(thread) * per_thread, *solo_[size_t(thread)]);
    });
}
