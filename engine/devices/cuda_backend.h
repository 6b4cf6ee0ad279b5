// CudaBackend: the forward pass's dense ops on a CUDA device (see
// backend.h). The dense weights (embeddings, attention, norms, routers,
// final norm, lm_head; bf16 or block-quantized, in their own types) are
// uploaded once; the hidden state, every activation
// and the paged KV cache live in device memory from layer to layer. One
// compute stream orders everything: dense ops, gathers, the device's expert
// computes (CudaExpertDevice enqueues on the same stream and cuBLAS handle)
// and the combines. Only each MoE layer's routing, the CPU experts' rows
// (through pinned buffers, on a stream of their own) and the logits cross to
// the host. CUDA-only source: compiled only when built with CUDA.
#pragma once
#include <memory>
#include <vector>

#include "engine/devices/backend.h"
#include "gpu_kernels/gpu_runtime.h"

class CudaBackend final : public Backend {
public:
    // Uploads the dense weights to device `device` (made current). ctx:
    // positions per sequence; max_batch: entries per forward pass (and
    // logits rows); max_rows: expert rows (max_batch * experts per token).
    // Throws GpuError (CUDA) when the device fails or lacks memory.
    CudaBackend(const ModelConfig& config, const ModelWeights& host_weights, int device, int ctx, int max_batch,
                int max_rows);
    ~CudaBackend() override;

    const char* name() const override { return "cuda"; }
    const ModelWeights& weights() const override { return dev_weights_; }
    StateMemory& state_memory() override { return *state_memory_; }
    float* alloc(size_t n) override;

    void begin(const Batch& batch, const SequenceState& state) override;
    void embed(float* x) override;
    void rmsnorm(float* out, const float* x, const float* weight, int rows, int dim, float eps) override;
    void matmul(float* y, const float* x, const WeightView& w, int m) override;
    void rope(float* x, int n_heads) override;
    // Gated attention and the Gated DeltaNet (gpu_split_heads,
    // gpu_sigmoid_mul, gpu_delta_net). Not yet run on a GPU: until their
    // tests (label gpu) have passed on one, the device setup keeps such
    // models on the CPU (CpuReason::MIXER_NOT_ON_GPU).
    void split_heads(float* a, float* b, const float* x, int rows, int n_heads, int head_dim) override;
    void sigmoid_mul(float* x, const float* gate, size_t n) override;
    void delta_net(int layer, float* o, float* qkv, const float* z, const float* b, const float* a,
                   const LinearAttentionWeights& w) override;
    void kv_store(int kv_layer, const float* k, const float* v) override;
    void attention(int kv_layer, float* out, const float* q, const AttnMask& mask) override;
    void add(float* x, const float* y, size_t n) override;
    void add_bias(float* x, const float* bias, int rows, int width) override;
    void mlp(float* y, const float* x, const ExpertWeights& w, int m, float* scratch) override;
    void sigmoid_scale(float* y, const float* gate, int rows, int dim) override;
    void route(int* experts, float* weights, float* logits, int rows, int n_experts, int k, bool renorm) override;
    void gather(float* out, const float* x, const int* src_row, int rows, int dim) override;
    void combine(float* out, const float* y, const int* slots, const float* weights, int rows, int k,
                 int dim) override;
    const float* to_host(const float* x, size_t n) override;

    ExpertRows expert_rows() override;
    ExpertRows host_rows() override;
    void rows_to_host(std::span<const ExpertTask> tasks) override;
    void rows_from_host(std::span<const ExpertTask> tasks) override;

    // For the device experts: the compute stream and its cuBLAS handle.
    GpuStream stream() const { return stream_.get(); }
    GpuBlas& blas() { return *blas_; }
    int device() const { return device_; }
    // Device bytes this backend holds: dense weights, and activations and
    // staging as cuda_activation_bytes (device_setup.h) counts them for the
    // budget (the KV cache is the KvCache's, through state_memory()).
    size_t weight_bytes() const { return weight_bytes_; }
    size_t activation_bytes() const { return activation_bytes_; }

private:
    // One staging area for small host -> device uploads: pinned host
    // memory, its device twin and an event that says when the last upload
    // out of it finished (so it is never overwritten while in flight).
    struct Upload {
        PinnedBuffer host;
        GpuBuffer dev;
        std::unique_ptr<GpuEvent> done;
    };
    Upload make_upload(size_t bytes);
    // Copies bytes of src through u to u.dev on the compute stream.
    void upload(Upload& u, const void* src, size_t bytes);

    const ModelConfig& c_;
    int device_;
    int ctx_, max_batch_, max_rows_;
    int q_dim_, kv_dim_;
    GpuStreamOwner stream_;       // compute
    GpuStreamOwner rows_stream_;  // CPU experts' rows to and from the host
    std::unique_ptr<GpuBlas> blas_;
    std::unique_ptr<StateMemory> state_memory_;
    GpuBuffer weight_memory_;     // every dense weight, one allocation
    ModelWeights dev_weights_;    // device pointers into weight_memory_; no experts
    size_t weight_bytes_ = 0, activation_bytes_ = 0;
    std::vector<GpuBuffer> buffers_;  // alloc()
    GpuBuffer rope_freq_;             // rope_inv_freq (rope_dim / 2 doubles)
    float rope_mscale_ = 1.0f;        // rope_attention_factor
    GpuBuffer x_bf16_;                // (max_batch, widest k of a dense GEMM) bf16: GEMM inputs
    GpuBuffer dequant_;           // quantized dense weights: a piece of W in bf16 (gpu_matmul)

    // The batch's metadata (begin): tokens, positions, KV rows, block tables.
    Upload meta_;
    const int* d_tokens_ = nullptr;
    const int* d_positions_ = nullptr;
    const int* d_block_start_ = nullptr;
    const int* d_n_pos_ = nullptr;
    float* const* d_row_base_ = nullptr;
    const float* const* d_blocks_ = nullptr;
    int n_ = 0;                   // entries of the current batch
    std::vector<int> seq_start_;  // per sequence: its first entry in the blocks table, -1 when absent
    std::vector<int> seq_blocks_; // per sequence in the batch: blocks its entries read
    const KvCache* cache_ = nullptr;  // the batch state's; null without attention layers
    // The Gated DeltaNet's state and the batch's runs of one sequence's
    // entries (first entry, count, sequence), found in begin; each layer's
    // GpuDeltaRun arrays (a wave at a time) go up through delta_runs_.
    RecurrentState* recurrent_ = nullptr;
    struct Run {
        int first, n, seq;
        bool new_wave;  // its sequence is already in the wave so far: a wave of its own starts here
    };
    std::vector<Run> runs_;
    std::vector<int> wave_seqs_;        // begin's scratch: the sequences of the wave so far
    std::vector<GpuDeltaRun> wave_;     // delta_net's scratch: one wave's runs with this layer's state
    // (all three reserved for max_batch entries: no allocation per pass or layer)
    Upload delta_runs_;
    GpuBuffer delta_scratch_;  // g and beta: 2 * max_batch * n_v_heads floats

    // Routing, gathers and combines.
    Upload gather_src_, combine_slots_, combine_weights_;
    GpuBuffer route_dev_;          // experts (max_batch * k) ints, then weights (max_batch * k) floats
    PinnedBuffer route_host_;
    GpuBuffer rows_x_, rows_y_;    // (max_rows, dim) each
    PinnedBuffer host_x_, host_y_; // (max_rows, dim) each
    GpuEvent rows_ready_;          // after the last gather of expert rows
    GpuEvent rows_back_;           // after the CPU experts' outputs are on the device
    PinnedBuffer logits_host_;     // (max_batch, vocab)
};
