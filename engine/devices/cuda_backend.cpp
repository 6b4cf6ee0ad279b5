// CudaBackend (see cuda_backend.h): device buffers, gpu_kernels launchers
// and cuBLAS on one compute stream. Host data crosses through pinned
// staging areas, each guarded by an event so it is never overwritten while a
// copy out of it is in flight.
#include "engine/devices/cuda_backend.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "engine/devices/device_setup.h"
#include "engine/model/cost.h"
#include "engine/state/batch.h"
#include "engine/state/recurrent_state.h"

namespace {

constexpr size_t ALIGN = 256;  // device allocations and weight offsets

size_t aligned(size_t bytes) {
    return (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

int blocks_per_seq(int ctx) {
    return (ctx + KV_BLOCK - 1) / KV_BLOCK;
}

// Bytes of the per-batch metadata: tokens, positions, block_start, n_pos
// (ints), then row bases and the block tables (pointers). Blocks: at most
// one table per entry, each a whole context.
size_t meta_bytes(int max_batch, int ctx) {
    return aligned(4 * sizeof(int) * size_t(max_batch)) +
           sizeof(float*) * (size_t(max_batch) + size_t(max_batch) * blocks_per_seq(ctx));
}

// The KV cache's blocks in device memory; copy-on-write copies run on the
// compute stream, so they are ordered before the attention that reads them.
class CudaStateMemory final : public StateMemory {
public:
    explicit CudaStateMemory(GpuStream stream) : stream_(stream) {}
    StateHome home() const override { return StateHome::DEVICE; }
    float* alloc(size_t floats) override {
        GpuBuffer b(floats * sizeof(float));
        float* p = b.as<float>();
        blocks_.push_back(std::move(b));
        return p;
    }
    void free(float* p) override {
        auto it = std::find_if(blocks_.begin(), blocks_.end(), [&](const GpuBuffer& b) { return b.data() == p; });
        if (it != blocks_.end()) blocks_.erase(it);
    }
    void copy(float* dst, const float* src, size_t floats) override {
        gpu_copy_d2d(dst, src, floats * sizeof(float), stream_);
    }
    void zero(float* dst, size_t floats) override { gpu_memset(dst, 0, floats * sizeof(float), stream_); }

private:
    GpuStream stream_;
    std::vector<GpuBuffer> blocks_;
};

// Every dense tensor of the model with its size in bytes, in one order:
// fn(const void*& data, bytes) may repoint it.
// Absent ones (empty views, null vectors) are skipped.
template <class Fn>
void for_each_dense(const ModelConfig& c, ModelWeights& w, Fn&& fn) {
    const size_t q_dim = size_t(c.n_heads) * c.head_dim, kv_dim = size_t(c.n_kv_heads) * c.head_dim;
    auto matrix = [&](WeightView& m) {
        if (!m.empty()) fn(m.data, m.bytes());
    };
    auto vector = [&](const float*& v, size_t n) {
        if (!v) return;
        const void* p = v;
        fn(p, n * sizeof(float));
        v = static_cast<const float*>(p);
    };
    const size_t q_norm = c.qk_norm == QkNorm::FULL ? q_dim : size_t(c.head_dim);
    const size_t k_norm = c.qk_norm == QkNorm::FULL ? kv_dim : size_t(c.head_dim);
    matrix(w.embed);
    if (!c.tie_embeddings) matrix(w.lm_head);
    vector(w.final_norm, size_t(c.dim));
    for (LayerWeights& lw : w.layers) {
        vector(lw.attn_norm, size_t(c.dim));
        for (WeightView* m : {&lw.wq, &lw.wk, &lw.wv, &lw.wo}) matrix(*m);
        vector(lw.q_bias, q_dim);
        vector(lw.k_bias, kv_dim);
        vector(lw.v_bias, kv_dim);
        vector(lw.q_norm, q_norm);
        vector(lw.k_norm, k_norm);
        vector(lw.o_bias, size_t(c.dim));
        vector(lw.sinks, size_t(c.n_heads));
        vector(lw.ffn_norm, size_t(c.dim));
        matrix(lw.router);
        vector(lw.router_bias, size_t(c.n_experts));
        for (WeightView* m : {&lw.mlp.w1, &lw.mlp.w3, &lw.mlp.w2, &lw.shared_gate}) matrix(*m);
        vector(lw.mlp.spec.b1, size_t(lw.mlp.w1.rows));
        vector(lw.mlp.spec.b3, size_t(lw.mlp.w3.rows));
        vector(lw.mlp.spec.b2, size_t(lw.mlp.w2.rows));
    }
}

// The widest input of a dense GEMM: dim, q_dim, or an always-run MLP's down projection.
int widest_dense_input(const ModelConfig& c) {
    int k = std::max(c.dim, c.n_heads * c.head_dim);
    for (int l = 0; l < c.n_layers; l++) k = std::max(k, c.layer_mlp_hidden(l));
    return k;
}

// A copy of the host weights' dense pointers (experts dropped).
ModelWeights dense_view(const ModelWeights& host) {
    ModelWeights v;
    v.embed = host.embed;
    v.lm_head = host.lm_head;
    v.final_norm = host.final_norm;
    for (const LayerWeights& lw : host.layers) {
        LayerWeights d = lw;
        d.experts.clear();
        v.layers.push_back(std::move(d));
    }
    return v;
}

}  // namespace

CudaBackend::Upload CudaBackend::make_upload(size_t bytes) {
    Upload u{PinnedBuffer(bytes), GpuBuffer(bytes), std::make_unique<GpuEvent>()};
    u.done->record(stream_.get());
    return u;
}

void CudaBackend::upload(Upload& u, const void* src, size_t bytes) {
    assert(bytes <= u.host.bytes());
    u.done->synchronize();  // the previous upload out of u.host has finished
    std::memcpy(u.host.data(), src, bytes);
    gpu_copy_h2d(u.dev.data(), u.host.data(), bytes, stream_.get());
    u.done->record(stream_.get());
}

CudaBackend::CudaBackend(const ModelConfig& config, const ModelWeights& host_weights, int device, int ctx,
                         int max_batch, int max_rows)
    : c_(config),
      device_((gpu_set_device(device), device)),
      ctx_(ctx),
      max_batch_(max_batch),
      max_rows_(max_rows),
      q_dim_(config.n_heads * config.head_dim),
      kv_dim_(config.n_kv_heads * config.head_dim) {
    blas_ = std::make_unique<GpuBlas>(stream_.get());
    state_memory_ = std::make_unique<CudaStateMemory>(stream_.get());

    // Dense weights: one allocation, each tensor at an aligned offset,
    // copied from the host mapping once.
    dev_weights_ = dense_view(host_weights);
    size_t total = 0;
    for_each_dense(c_, dev_weights_, [&](const void*&, size_t bytes) { total += aligned(bytes); });
    weight_memory_ = GpuBuffer(total);
    weight_bytes_ = total;
    unsigned char* base = weight_memory_.as<unsigned char>();
    size_t offset = 0;
    for_each_dense(c_, dev_weights_, [&](const void*& ptr, size_t bytes) {
        gpu_copy_h2d(base + offset, ptr, bytes, stream_.get());
        ptr = base + offset;
        offset += aligned(bytes);
    });
    if (c_.tie_embeddings) dev_weights_.lm_head = dev_weights_.embed;
    stream_.synchronize();  // pageable sources: the copies must finish before the mapping is read again

    const std::vector<double> freq = rope_inv_freq(c_);
    rope_freq_ = GpuBuffer(freq.size() * sizeof(double));
    gpu_copy_h2d(rope_freq_.data(), freq.data(), freq.size() * sizeof(double), stream_.get());
    stream_.synchronize();  // a pageable source
    rope_mscale_ = rope_attention_factor(c_);

    x_bf16_ = GpuBuffer(size_t(max_batch) * widest_dense_input(c_) * sizeof(bf16));
    const bool quantized = weight_format(host_weights).quantized_dense;
    dequant_ = GpuBuffer(quantized ? GPU_DEQUANT_PIECE_ELEMS * sizeof(bf16) : 0);
    meta_ = make_upload(meta_bytes(max_batch, ctx));
    const int k = std::max(1, c_.n_experts_active);
    gather_src_ = make_upload(size_t(std::max(max_rows, max_batch)) * sizeof(int));
    runs_.reserve(size_t(max_batch));
    wave_seqs_.reserve(size_t(max_batch));
    wave_.reserve(size_t(max_batch));
    if (config.n_linear_layers() > 0) {
        delta_runs_ = make_upload(size_t(max_batch) * sizeof(GpuDeltaRun));
        delta_scratch_ = GpuBuffer(size_t(2) * max_batch * config.linear.n_v_heads * sizeof(float));
    }
    combine_slots_ = make_upload(size_t(max_batch) * k * sizeof(int));
    combine_weights_ = make_upload(size_t(max_batch) * k * sizeof(float));
    route_dev_ = GpuBuffer(size_t(max_batch) * k * (sizeof(int) + sizeof(float)));
    route_host_ = PinnedBuffer(route_dev_.bytes());
    rows_x_ = GpuBuffer(size_t(max_rows) * c_.dim * sizeof(float));
    rows_y_ = GpuBuffer(size_t(max_rows) * c_.dim * sizeof(float));
    host_x_ = PinnedBuffer(rows_x_.bytes());
    host_y_ = PinnedBuffer(rows_y_.bytes());
    logits_host_ = PinnedBuffer(size_t(max_batch) * c_.vocab_size * sizeof(float));
    activation_bytes_ = size_t(cuda_activation_bytes(config, ctx, max_batch, max_rows, quantized));
}

CudaBackend::~CudaBackend() = default;

float* CudaBackend::alloc(size_t n) {
    buffers_.emplace_back(aligned(n * sizeof(float)));
    return buffers_.back().as<float>();
}

void CudaBackend::begin(const Batch& batch, const SequenceState& state) {
    const int n = batch.size();
    assert(n > 0 && n <= max_batch_);
    n_ = n;
    cache_ = state.kv();
    recurrent_ = state.recurrent();
    // Runs of one sequence's consecutive entries; a run whose sequence the
    // current wave already has starts the next wave (delta_net).
    runs_.clear();
    wave_seqs_.clear();
    for (int i = 0; i < n; i++) {
        const int seq = batch.seq_ids[i];
        if (!runs_.empty() && runs_.back().seq == seq) {
            runs_.back().n++;
            continue;
        }
        const bool repeat = std::find(wave_seqs_.begin(), wave_seqs_.end(), seq) != wave_seqs_.end();
        if (repeat) wave_seqs_.clear();
        wave_seqs_.push_back(seq);
        runs_.push_back({i, 1, seq, repeat});
    }
    gpu_set_device(device_);  // current per thread: the engine may run on another thread than the loader
    if (int(seq_start_.size()) < state.n_seqs()) {  // grows only with the state
        seq_start_.resize(state.n_seqs());
        seq_blocks_.resize(state.n_seqs());
    }
    std::fill(seq_start_.begin(), seq_start_.end(), -1);

    // Packed: [tokens][positions][block_start][n_pos] ints (aligned), then
    // [row_base] and [blocks] pointers. Written straight into the pinned
    // area once the last upload from it has finished.
    meta_.done->synchronize();
    int* ints = meta_.host.as<int>();
    int* tokens = ints;
    int* positions = ints + max_batch_;
    int* block_start = ints + 2 * max_batch_;
    int* n_pos = ints + 3 * max_batch_;
    const size_t ptr_at = aligned(4 * sizeof(int) * size_t(max_batch_));
    float** row_base = reinterpret_cast<float**>(meta_.host.as<unsigned char>() + ptr_at);
    const float** blocks = const_cast<const float**>(row_base + max_batch_);
    // Each sequence's KV block table once, as long as its last position in
    // the batch needs (prepare_write has made it that long); none without
    // attention layers.
    for (int i = 0; i < n; i++) seq_blocks_[batch.seq_ids[i]] = -1;
    for (int i = 0; i < n; i++) {
        int& nb = seq_blocks_[batch.seq_ids[i]];
        nb = std::max(nb, batch.positions[i] / KV_BLOCK + 1);
    }
    int n_blocks = 0;
    for (int i = 0; i < n; i++) {
        const int seq = batch.seq_ids[i], pos = batch.positions[i];
        tokens[i] = batch.tokens[i];
        positions[i] = pos;
        n_pos[i] = pos + 1;
        row_base[i] = cache_ ? cache_->row_base(seq, pos) : nullptr;
        if (cache_ && seq_start_[seq] < 0) {
            seq_start_[seq] = n_blocks;
            const float* const* table = cache_->blocks(seq);
            for (int b = 0; b < seq_blocks_[seq]; b++) blocks[n_blocks++] = table[b];
        }
        block_start[i] = seq_start_[seq];
    }
    const size_t bytes = ptr_at + sizeof(float*) * (size_t(max_batch_) + n_blocks);
    gpu_copy_h2d(meta_.dev.data(), meta_.host.data(), bytes, stream_.get());
    meta_.done->record(stream_.get());

    const int* d_ints = meta_.dev.as<int>();
    d_tokens_ = d_ints;
    d_positions_ = d_ints + max_batch_;
    d_block_start_ = d_ints + 2 * max_batch_;
    d_n_pos_ = d_ints + 3 * max_batch_;
    d_row_base_ = reinterpret_cast<float* const*>(meta_.dev.as<unsigned char>() + ptr_at);
    d_blocks_ = reinterpret_cast<const float* const*>(d_row_base_ + max_batch_);
}

void CudaBackend::embed(float* x) {
    gpu_embed(x, d_tokens_, dev_weights_.embed, n_, stream_.get());
}

void CudaBackend::rmsnorm(float* out, const float* x, const float* weight, int rows, int dim, float eps) {
    gpu_rmsnorm(out, x, weight, rows, dim, eps, stream_.get());
}

void CudaBackend::matmul(float* y, const float* x, const WeightView& w, int m) {
    assert(size_t(m) * w.cols * sizeof(bf16) <= x_bf16_.bytes());
    gpu_matmul(*blas_, y, x, w, m, {x_bf16_.as<bf16>(), dequant_.as<bf16>(), dequant_.bytes() / sizeof(bf16)});
}

void CudaBackend::split_heads(float* a, float* b, const float* x, int rows, int n_heads, int head_dim) {
    gpu_split_heads(a, b, x, rows, n_heads, head_dim, stream_.get());
}

void CudaBackend::sigmoid_mul(float* x, const float* gate, size_t n) {
    gpu_sigmoid_mul(x, gate, long(n), stream_.get());
}

// The batch's runs in waves in which no sequence repeats (a sequence whose
// entries come in two runs has them continue its state in order), each
// wave one gpu_delta_net over its entries.
void CudaBackend::delta_net(int layer, float* o, float* qkv, const float* z, const float* b, const float* a,
                            const LinearAttentionWeights& w) {
    assert(recurrent_);
    const LinearAttentionShape& s = c_.linear;
    const GpuDeltaLayer shape{s.conv_dim(),
                              s.conv_kernel,
                              s.n_k_heads,
                              s.n_v_heads,
                              s.head_k_dim,
                              s.head_v_dim,
                              s.v_head_order == LinearAttentionShape::VHeadOrder::TILED,
                              c_.rms_norm_eps,
                              w.conv,
                              w.a,
                              w.dt_bias,
                              w.norm};
    auto flush = [&] {
        if (wave_.empty()) return;
        const int first = wave_.front().first, last = wave_.back().first + wave_.back().n;
        upload(delta_runs_, wave_.data(), wave_.size() * sizeof(GpuDeltaRun));
        gpu_delta_net(o, qkv, z, b, a, delta_runs_.dev.as<GpuDeltaRun>(), int(wave_.size()), first, last - first,
                      shape, delta_scratch_.as<float>(), stream_.get());
        wave_.clear();
    };
    for (const Run& r : runs_) {
        if (r.new_wave) flush();
        wave_.push_back({r.first, r.n, recurrent_->conv(layer, r.seq), recurrent_->matrices(layer, r.seq)});
    }
    flush();
}

void CudaBackend::rope(float* x, int n_heads) {
    gpu_rope_rotate_half(x, d_positions_, n_, n_heads, c_.head_dim, c_.rope_dim(), rope_freq_.as<double>(),
                         rope_mscale_, stream_.get());
}

void CudaBackend::kv_store(int kv_layer, const float* k, const float* v) {
    gpu_kv_store(k, v, d_row_base_, cache_->k_offset(kv_layer), cache_->v_offset(kv_layer), n_, kv_dim_, stream_.get());
}

void CudaBackend::attention(int kv_layer, float* out, const float* q, const AttnMask& mask) {
    gpu_attention_paged(out, q, d_blocks_, d_block_start_, d_n_pos_, cache_->k_offset(kv_layer),
                        cache_->v_offset(kv_layer), KV_BLOCK, n_, c_.n_heads, c_.n_kv_heads, c_.head_dim, kv_dim_,
                        mask.window, mask.sinks, stream_.get());
}

void CudaBackend::add(float* x, const float* y, size_t n) {
    gpu_add(x, y, long(n), stream_.get());
}

void CudaBackend::add_bias(float* x, const float* bias, int rows, int width) {
    gpu_add_bias(x, bias, rows, width, stream_.get());
}

void CudaBackend::mlp(float* y, const float* x, const ExpertWeights& w, int m, float* scratch) {
    assert(size_t(m) * std::max(w.w1.cols, w.w2.cols) * sizeof(bf16) <= x_bf16_.bytes());
    gpu_expert_ffn(*blas_, y, x, w.w1, w.w3, w.w2, m, scratch,
                   {x_bf16_.as<bf16>(), dequant_.as<bf16>(), dequant_.bytes() / sizeof(bf16)}, w.spec);
}

void CudaBackend::sigmoid_scale(float* y, const float* gate, int rows, int dim) {
    gpu_sigmoid_scale(y, gate, rows, dim, stream_.get());
}

void CudaBackend::route(int* experts, float* weights, float* logits, int rows, int n_experts, int k, bool renorm) {
    int* d_experts = route_dev_.as<int>();
    float* d_weights = reinterpret_cast<float*>(d_experts + size_t(max_batch_) * k);
    gpu_route_topk(d_experts, d_weights, logits, rows, n_experts, k, renorm, stream_.get());
    const size_t n = size_t(rows) * k;
    int* h_experts = route_host_.as<int>();
    float* h_weights = reinterpret_cast<float*>(h_experts + size_t(max_batch_) * k);
    gpu_copy_d2h(h_experts, d_experts, n * sizeof(int), stream_.get());
    gpu_copy_d2h(h_weights, d_weights, n * sizeof(float), stream_.get());
    stream_.synchronize();
    std::memcpy(experts, h_experts, n * sizeof(int));
    std::memcpy(weights, h_weights, n * sizeof(float));
}

void CudaBackend::gather(float* out, const float* x, const int* src_row, int rows, int dim) {
    upload(gather_src_, src_row, size_t(rows) * sizeof(int));
    gpu_gather_rows(out, x, gather_src_.dev.as<int>(), rows, dim, stream_.get());
    rows_ready_.record(stream_.get());
}

void CudaBackend::combine(float* out, const float* y, const int* slots, const float* weights, int rows, int k,
                          int dim) {
    upload(combine_slots_, slots, size_t(rows) * k * sizeof(int));
    upload(combine_weights_, weights, size_t(rows) * k * sizeof(float));
    gpu_combine(out, y, combine_slots_.dev.as<int>(), combine_weights_.dev.as<float>(), rows, k, dim, stream_.get());
}

const float* CudaBackend::to_host(const float* x, size_t n) {
    assert(n * sizeof(float) <= logits_host_.bytes());
    gpu_copy_d2h(logits_host_.data(), x, n * sizeof(float), stream_.get());
    stream_.synchronize();
    return logits_host_.as<float>();
}

ExpertRows CudaBackend::expert_rows() {
    return {rows_x_.as<float>(), rows_y_.as<float>()};
}

ExpertRows CudaBackend::host_rows() {
    return {host_x_.as<float>(), host_y_.as<float>()};
}

// The rows stream waits for the gather, not for the device experts queued
// after it on the compute stream, so the CPU starts while the GPU computes.
void CudaBackend::rows_to_host(std::span<const ExpertTask> tasks) {
    gpu_stream_wait(rows_stream_.get(), rows_ready_);
    const size_t row_bytes = size_t(c_.dim) * sizeof(float);
    for (const ExpertTask& t : tasks)
        gpu_copy_d2h(host_x_.as<unsigned char>() + t.row * row_bytes, rows_x_.as<unsigned char>() + t.row * row_bytes,
                     t.n_tokens * row_bytes, rows_stream_.get());
    rows_stream_.synchronize();
}

// The combine (on the compute stream) waits for these copies.
void CudaBackend::rows_from_host(std::span<const ExpertTask> tasks) {
    const size_t row_bytes = size_t(c_.dim) * sizeof(float);
    for (const ExpertTask& t : tasks)
        gpu_copy_h2d(rows_y_.as<unsigned char>() + t.row * row_bytes, host_y_.as<unsigned char>() + t.row * row_bytes,
                     t.n_tokens * row_bytes, rows_stream_.get());
    rows_back_.record(rows_stream_.get());
    gpu_stream_wait(stream_.get(), rows_back_);
}
