// Backend: the one seam of the forward pass. ForwardPass (forward.h) says
// what happens in a layer; a Backend does each dense op in its own memory:
// the CPU backend on host buffers with cpu_kernels, the CUDA backend
// (cuda_backend.h, built with CUDA) on device buffers with gpu_kernels,
// where the hidden state and the KV cache stay from layer to layer. Only
// small things cross to the host: each MoE layer's routing (the placement
// planner runs there), the CPU experts' rows, and the logits.
//
// Buffers handed to a Backend are its own (alloc()); ForwardPass never reads
// or writes them itself. Ops run in call order; those that return host data
// block until it is there. Must not decide placement (that is the
// HybridExpertExecutor's) or know about requests.
#pragma once
#include <cstddef>
#include <memory>
#include <span>

#include "cpu_kernels/kernels.h"
#include "engine/devices/expert_executor.h"
#include "engine/state/kv_cache.h"
#include "engine/state/sequence_state.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

struct Batch;
class ThreadPool;

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;  // "cpu" or "cuda"

    // The dense weights (embeddings, attention, norms, biases, routers, the
    // MLPs every token runs, final norm, lm_head) as this backend reads them: host pointers on the CPU, device
    // pointers on CUDA. Expert pointers are not part of it.
    virtual const ModelWeights& weights() const = 0;
    // Where the sequence state (the KV cache's blocks) lives: host or device memory.
    virtual StateMemory& state_memory() = 0;
    // n floats of this backend's memory, owned by the backend; for state
    // allocated once (a forward pass never allocates).
    virtual float* alloc(size_t n) = 0;

    // A forward pass starts: the batch's tokens, positions and sequence
    // state (state.prepare_write has run for every entry; its KvCache is
    // what kv_store and attention use) for the ops below.
    virtual void begin(const Batch& batch, const SequenceState& state) = 0;
    // x (n, dim) = embed[token] of the batch's entries.
    virtual void embed(float* x) = 0;
    // out (rows, dim) = rmsnorm of each row of x with weight (dim,).
    virtual void rmsnorm(float* out, const float* x, const float* weight, int rows, int dim, float eps) = 0;
    // y (m, w.rows) = x (m, w.cols) @ W^T.
    virtual void matmul(float* y, const float* x, const WeightView& w, int m) = 0;
    // Rotate-half RoPE on x (n, n_heads * head_dim), entry i at its batch
    // position: the first rope_dim() of each head's dims (ModelConfig).
    virtual void rope(float* x, int n_heads) = 0;
    // a, b (rows, n_heads * head_dim) from x (rows, 2 * n_heads * head_dim)
    // whose heads are [a_h | b_h] (a gated attention's query and gate).
    virtual void split_heads(float* a, float* b, const float* x, int rows, int n_heads, int head_dim) = 0;
    // x (n,) *= sigmoid(gate) elementwise (gated attention's output).
    virtual void sigmoid_mul(float* x, const float* gate, size_t n) = 0;
    // Gated DeltaNet layer `layer` (the delta-net layers' index among
    // themselves) on the batch's entries, in batch order, continuing each
    // sequence's RecurrentState: qkv (n, conv_dim) the projections before
    // the conv (overwritten), z (n, value_dim) the output gate, b and a
    // (n, n_v_heads) beta's and the decay's inputs. o (n, value_dim): each
    // value head's output after the gated RMSNorm.
    virtual void delta_net(int layer, float* o, float* qkv, const float* z, const float* b, const float* a,
                           const LinearAttentionWeights& w) = 0;
    // Writes the batch's keys and values (n, kv_dim) of KV-cache layer
    // kv_layer (the attention layers' index among themselves) into the cache.
    virtual void kv_store(int kv_layer, const float* k, const float* v) = 0;
    // out (n, n_heads * head_dim): each entry's query attends to positions
    // [0, position] of its sequence in KV-cache layer kv_layer (GQA, causal),
    // or the last mask.window of them; mask.sinks (n_heads, this backend's
    // memory) or null (cpu_kernels' AttnMask).
    virtual void attention(int kv_layer, float* out, const float* q, const AttnMask& mask) = 0;
    // x (n,) += y (n,).
    virtual void add(float* x, const float* y, size_t n) = 0;
    // x (rows, width): each row += bias (width,) (q/k/v projection biases).
    virtual void add_bias(float* x, const float* bias, int rows, int width) = 0;
    // The MLP every token runs (a dense layer's, or a shared expert), a dense
    // weight of this backend: y (m, dim) = (silu(x W1^T) * (x W3^T)) W2^T for
    // x (m, dim), with the arithmetic of a routed expert on this backend.
    // scratch: 2 * m * w.w1.rows floats of this backend's memory.
    virtual void mlp(float* y, const float* x, const ExpertWeights& w, int m, float* scratch) = 0;
    // y (rows, dim): row i *= sigmoid(gate[i]), gate (rows,) (the shared expert's gate).
    virtual void sigmoid_scale(float* y, const float* gate, int rows, int dim) = 0;
    // Routing of rows tokens from router logits (rows, n_experts), which it
    // may overwrite: softmax over all experts, top k (largest first, ties to
    // the lower index), weights renormalised to sum 1 when renorm. experts
    // and weights (rows, k) are host arrays, filled when it returns.
    virtual void route(int* experts, float* weights, float* logits, int rows, int n_experts, int k, bool renorm) = 0;
    // out (rows, dim): out[i] = x[src_row[i]]; src_row is a host array.
    virtual void gather(float* out, const float* x, const int* src_row, int rows, int dim) = 0;
    // out (rows, dim): out[i] = sum over r < k in order of weights[i*k + r] *
    // y[slots[i*k + r]]; slots and weights are host arrays.
    virtual void combine(float* out, const float* y, const int* slots, const float* weights, int rows, int k,
                         int dim) = 0;
    // x (n floats of this backend's memory, at most the logits of a
    // full batch) readable on the host until the next call:
    // x itself on the CPU, else a copy in the backend's host buffer. Blocks.
    virtual const float* to_host(const float* x, size_t n) = 0;

    // The expert phase. expert_rows(): the layer's gathered inputs x and
    // outputs y, (max_rows, dim) each, in this backend's memory: ForwardPass
    // gathers into x and combines from y; a device computes from them.
    virtual ExpertRows expert_rows() = 0;
    // The CPU side computes from host memory: host_rows() are host copies of
    // the rows (pinned on CUDA; the rows themselves on the CPU backend).
    // rows_to_host copies the x rows of these tasks to host_rows() and
    // returns when they are there; rows_from_host copies their y rows back,
    // ordered before the backend's next op. No-ops on the CPU backend.
    virtual ExpertRows host_rows() = 0;
    virtual void rows_to_host(std::span<const ExpertTask> tasks) = 0;
    virtual void rows_from_host(std::span<const ExpertTask> tasks) = 0;
};

// The CPU backend: host buffers, cpu_kernels on the pool, exactly the
// arithmetic of the CPU path. max_rows: rows of expert_rows() (max_batch *
// experts per token).
std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& config, const ModelWeights& weights, ThreadPool& pool,
                                          int ctx, int max_rows);
