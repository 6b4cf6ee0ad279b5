// Gated DeltaNet (Qwen3.5, Qwen3-Next) on the device: the causal conv, the
// q/k normalisation and per-head gates, the delta rule token by token and
// the gated RMSNorm (gpu_kernels.h, gpu_delta_net), each a gpu_math.h
// function per element, column or head as the CPU backend applies them.
#include <algorithm>
#include <string>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/gpu_kernels.h"
#include "gpu_kernels/gpu_math.h"

namespace {

constexpr int THREADS = 256;
constexpr int MAX_HEAD_V_DIM = 512;

// One thread per (run, channel): the run's entries in order through the
// channel's conv window.
__global__ void conv_kernel(float* qkv, const GpuDeltaRun* runs, const float* taps, int conv_dim, int kernel) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= conv_dim) return;
    const GpuDeltaRun run = runs[blockIdx.y];
    for (int i = run.first; i < run.first + run.n; i++) {
        float* x = qkv + long(i) * conv_dim;
        x[c] = gm_conv_channel(run.conv, x[c], taps, c, conv_dim, kernel);
    }
}

// One warp per (entry, q or k head): the head to unit length (eps 1e-6, as
// gm_l2_normalize), q's also scaled by 1 / sqrt(dk).
__global__ void qk_norm_kernel(float* qkv, int n_entries, int conv_dim, int n_k_heads, int dk) {
    const long warp = (long(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (warp >= long(n_entries) * 2 * n_k_heads) return;
    const long entry = warp / (2 * n_k_heads);
    const int h = int(warp % (2 * n_k_heads));
    float* v = qkv + entry * conv_dim + long(h) * dk;
    float ss = 0.0f;
    for (int i = lane; i < dk; i += 32) ss += v[i] * v[i];
    for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float f = (h < n_k_heads ? 1.0f / sqrtf(float(dk)) : 1.0f) / sqrtf(ss + 1e-6f);
    for (int i = lane; i < dk; i += 32) v[i] *= f;
}

// One thread per (entry, value head): the log decay and beta.
__global__ void gates_kernel(float* g, float* beta, const float* a, const float* b, const float* neg_exp_a,
                             const float* dt_bias, long total, int n_v_heads) {
    for (long e = blockIdx.x * long(blockDim.x) + threadIdx.x; e < total; e += long(gridDim.x) * blockDim.x) {
        const int h = int(e % n_v_heads);
        g[e] = neg_exp_a[h] * gm_softplus(a[e] + dt_bias[h]);
        beta[e] = gm_sigmoid(b[e]);
    }
}

// One block per (value head, run), one thread per state column: the run's
// entries in order, each token's q and k staged in shared memory.
__global__ void delta_rule_kernel(float* o, const float* qkv, const GpuDeltaRun* runs, const float* g,
                                  const float* beta, GpuDeltaLayer s) {
    extern __shared__ float qk[];  // q then k of one token: 2 * dk
    const int h = blockIdx.x, j = threadIdx.x;
    const GpuDeltaRun run = runs[blockIdx.y];
    const int dk = s.head_k_dim, dv = s.head_v_dim, nv = s.n_v_heads;
    const int kh = s.tiled ? h % s.n_k_heads : h / (nv / s.n_k_heads);
    const long key_dim = long(s.n_k_heads) * dk, value_dim = long(nv) * dv;
    float* state = run.state + long(h) * dk * dv;
    for (int i = run.first; i < run.first + run.n; i++) {
        const float* x = qkv + long(i) * s.conv_dim;
        for (int t = j; t < dk; t += blockDim.x) {
            qk[t] = x[long(kh) * dk + t];
            qk[dk + t] = x[key_dim + long(kh) * dk + t];
        }
        __syncthreads();
        if (j < dv) {
            const long e = long(i) * nv + h;
            o[long(i) * value_dim + long(h) * dv + j] =
                gm_delta_rule_column(state + j, dv, qk, qk + dk, x[2 * key_dim + long(h) * dv + j], g[e], beta[e], dk);
        }
        __syncthreads();  // the next token's staging waits for every column
    }
}

// One block per (entry, value head): the head's sum of squares, then each
// element normed, weighted and gated by silu(z).
__global__ void gated_norm_kernel(float* o, const float* z, const float* norm, int dv, float eps) {
    __shared__ float partial[THREADS];
    float* oh = o + long(blockIdx.x) * dv;
    const float* zh = z + long(blockIdx.x) * dv;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dv; i += blockDim.x) ss += oh[i] * oh[i];
    partial[threadIdx.x] = ss;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
        if (int(threadIdx.x) < step) partial[threadIdx.x] += partial[threadIdx.x + step];
        __syncthreads();
    }
    const float r = gm_rms_scale(partial[0], dv, eps);
    for (int i = threadIdx.x; i < dv; i += blockDim.x) oh[i] = gm_gated_norm_element(oh[i], zh[i], norm[i], r);
}

}  // namespace

void gpu_delta_net(float* o, float* qkv, const float* z, const float* b, const float* a, const GpuDeltaRun* runs,
                   int n_runs, int first_entry, int n_entries, const GpuDeltaLayer& s, float* scratch,
                   GpuStream stream) {
    if (n_runs <= 0 || n_entries <= 0) return;
    if (s.head_v_dim > MAX_HEAD_V_DIM || s.n_v_heads % s.n_k_heads != 0)
        throw GpuError("gpu_delta_net: value heads of " + std::to_string(s.head_v_dim) + " (at most " +
                       std::to_string(MAX_HEAD_V_DIM) + ") or " + std::to_string(s.n_v_heads) + " value heads over " +
                       std::to_string(s.n_k_heads) + " key heads");
    conv_kernel<<<dim3(unsigned((s.conv_dim + THREADS - 1) / THREADS), unsigned(n_runs)), THREADS, 0, stream>>>(
        qkv, runs, s.conv, s.conv_dim, s.conv_kernel);
    CUDA_LAUNCH_CHECK();
    const long warps = long(n_entries) * 2 * s.n_k_heads;
    qk_norm_kernel<<<unsigned((warps * 32 + THREADS - 1) / THREADS), THREADS, 0, stream>>>(
        qkv + long(first_entry) * s.conv_dim, n_entries, s.conv_dim, s.n_k_heads, s.head_k_dim);
    CUDA_LAUNCH_CHECK();
    // g and beta of every entry up to the last, indexed by entry (scratch:
    // 2 * (first_entry + n_entries) * n_v_heads floats).
    const long all = long(first_entry + n_entries) * s.n_v_heads, first = long(first_entry) * s.n_v_heads;
    const long gates = long(n_entries) * s.n_v_heads;
    float* g = scratch;
    float* beta = scratch + all;
    gates_kernel<<<unsigned(std::min<long>((gates + THREADS - 1) / THREADS, 65535)), THREADS, 0, stream>>>(
        g + first, beta + first, a + first, b + first, s.neg_exp_a, s.dt_bias, gates, s.n_v_heads);
    CUDA_LAUNCH_CHECK();
    // A block of whole warps covering the state's columns.
    const int threads = (s.head_v_dim + 31) / 32 * 32;
    delta_rule_kernel<<<dim3(unsigned(s.n_v_heads), unsigned(n_runs)), unsigned(threads),
                        2 * size_t(s.head_k_dim) * sizeof(float), stream>>>(o, qkv, runs, g, beta, s);
    CUDA_LAUNCH_CHECK();
    gated_norm_kernel<<<unsigned(gates), THREADS, 0, stream>>>(o + first * s.head_v_dim, z + first * s.head_v_dim,
                                                               s.norm, s.head_v_dim, s.eps);
    CUDA_LAUNCH_CHECK();
}
