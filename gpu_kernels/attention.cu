// Causal attention over the paged KV cache (prefill, decode and beams alike:
// every query row has its own sequence blocks and length), optionally over a
// sliding window and with sinks (gpt-oss). One thread block
// per (query row, kv head); its WARPS warps take positions round-robin, each
// lane holding head_dim / 32 elements of the group's query heads, and keep
// an online softmax per head (gm_online_softmax_step), so no score row is
// stored; the warps' states are merged at the end (gm_online_softmax_merge).
// GQA: the n_heads / n_kv_heads query heads of a group read each K and V row
// once together. Kernel first, launcher after.
#include <string>

#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/gpu_kernels.h"
#include "gpu_kernels/gpu_math.h"

namespace {

constexpr int WARPS = 8;
constexpr int MAX_GROUP = 8;     // query heads per kv head
constexpr int MAX_PER_LANE = 8;  // head_dim <= 256

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void attention_paged_kernel(float* out, const float* q, const float* const* blocks, const int* block_start,
                                       const int* n_pos, long k_offset, long v_offset, int block_size, int n_heads,
                                       int n_kv_heads, int head_dim, int kv_stride, float scale, int window,
                                       const float* sinks) {
    const int row = blockIdx.x, g = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int group = n_heads / n_kv_heads;
    const int q_dim = n_heads * head_dim;
    const int per_lane = (head_dim + 31) / 32;
    const float* const* seq_blocks = blocks + block_start[row];
    const int len = n_pos[row];
    const int first = window > 0 && len > window ? len - window : 0;  // the query's window: [first, len)

    float qv[MAX_GROUP][MAX_PER_LANE], acc[MAX_GROUP][MAX_PER_LANE], m[MAX_GROUP], l[MAX_GROUP];
    for (int h = 0; h < group; h++) {
        const float* qh = q + long(row) * q_dim + long(g * group + h) * head_dim;
        for (int j = 0; j < per_lane; j++) {
            const int d = lane + 32 * j;
            qv[h][j] = d < head_dim ? qh[d] * scale : 0.0f;
            acc[h][j] = 0.0f;
        }
        m[h] = -INFINITY;
        l[h] = 0.0f;
    }
    for (int p = first + warp; p < len; p += WARPS) {
        const float* base = seq_blocks[p / block_size] + long(p % block_size) * kv_stride + long(g) * head_dim;
        const float* kr = base + k_offset;
        const float* vr = base + v_offset;
        float kv[MAX_PER_LANE], vv[MAX_PER_LANE];
        for (int j = 0; j < per_lane; j++) {
            const int d = lane + 32 * j;
            kv[j] = d < head_dim ? kr[d] : 0.0f;
            vv[j] = d < head_dim ? vr[d] : 0.0f;
        }
        for (int h = 0; h < group; h++) {
            float s = 0.0f;
            for (int j = 0; j < per_lane; j++) s += qv[h][j] * kv[j];
            s = warp_sum(s);
            float rescale, w;
            gm_online_softmax_step(s, &m[h], &l[h], &rescale, &w);
            for (int j = 0; j < per_lane; j++) acc[h][j] = acc[h][j] * rescale + w * vv[j];
        }
    }

    // Merge the warps, head by head: warp 0 folds in the others' states
    // from shared memory (every thread reaches every barrier).
    __shared__ float s_m[WARPS], s_l[WARPS];
    __shared__ float s_acc[WARPS][MAX_PER_LANE * 32];
    for (int h = 0; h < group; h++) {
        if (lane == 0) {
            s_m[warp] = m[h];
            s_l[warp] = l[h];
        }
        for (int j = 0; j < per_lane; j++) s_acc[warp][lane + 32 * j] = acc[h][j];
        __syncthreads();
        if (warp == 0) {
            for (int w = 1; w < WARPS; w++) {
                float s1, s2;
                gm_online_softmax_merge(&m[h], &l[h], s_m[w], s_l[w], &s1, &s2);
                for (int j = 0; j < per_lane; j++) acc[h][j] = acc[h][j] * s1 + s_acc[w][lane + 32 * j] * s2;
            }
            if (sinks) {  // one more softmax state: logit sinks[head], weight 1, no value
                float s1, s2;
                gm_online_softmax_merge(&m[h], &l[h], sinks[g * group + h], 1.0f, &s1, &s2);
                for (int j = 0; j < per_lane; j++) acc[h][j] *= s1;
            }
            float* oh = out + long(row) * q_dim + long(g * group + h) * head_dim;
            for (int j = 0; j < per_lane; j++) {
                const int d = lane + 32 * j;
                if (d < head_dim) oh[d] = acc[h][j] / l[h];
            }
        }
        __syncthreads();
    }
}

}  // namespace

void gpu_attention_paged(float* out, const float* q, const float* const* blocks, const int* block_start,
                         const int* n_pos, long k_offset, long v_offset, int block_size, int rows, int n_heads,
                         int n_kv_heads, int head_dim, int kv_stride, int window, const float* sinks,
                         GpuStream stream) {
    if (rows <= 0) return;
    if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || n_heads / n_kv_heads > MAX_GROUP || head_dim <= 0 ||
        head_dim > 32 * MAX_PER_LANE)
        throw GpuError("gpu_attention_paged: " + std::to_string(n_heads) + " heads over " + std::to_string(n_kv_heads) +
                       " kv heads of " + std::to_string(head_dim) + " is outside what the kernel takes (at most " +
                       std::to_string(MAX_GROUP) + " query heads per kv head, head_dim <= " +
                       std::to_string(32 * MAX_PER_LANE) + ")");
    const float scale = 1.0f / sqrtf(float(head_dim));
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(n_kv_heads));
    attention_paged_kernel<<<grid, WARPS * 32, 0, stream>>>(out, q, blocks, block_start, n_pos, k_offset, v_offset,
                                                             block_size, n_heads, n_kv_heads, head_dim, kv_stride,
                                                             scale, window, sinks);
    CUDA_LAUNCH_CHECK();
}
