// The per-element math of the CUDA kernels, as __host__ __device__ inline
// functions (MOE_HD): each kernel in gpu_kernels/*.cu applies one of these
// to its element, row or position, and tests/cpu_kernels/test_gpu_math.cpp runs the
// same functions on the CPU against cpu_kernels. Plain C++ when not compiled
// by nvcc. No memory, no launches, no model knowledge.
#pragma once
#include <cmath>

#include "cpu_kernels/bf16.h"

// silu(a) * b, as cpu_kernels' silu_mul.
MOE_HD inline float gm_silu_mul(float a, float b) { return a / (1.0f + expf(-a)) * b; }

// 1 / (1 + e^-x): the shared expert's gate (the CPU backend uses it too).
MOE_HD inline float gm_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// log(1 + e^x), without overflow for large x (PyTorch's softplus, threshold 20).
MOE_HD inline float gm_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Gated DeltaNet's causal depthwise conv, one channel c at one position:
// taps (channels, K) oldest input first, window ((K - 1) rows of `stride`
// channels) the K - 1 inputs before this one, oldest first; shifts x into
// the window and returns silu(conv).
MOE_HD inline float gm_conv_channel(float* window, float x, const float* taps, int c, int stride, int K) {
    const float* t = taps + c * K;
    float y = t[K - 1] * x;
    for (int j = 0; j < K - 1; j++) y += t[j] * window[j * stride + c];
    for (int j = 0; j + 1 < K - 1; j++) window[j * stride + c] = window[(j + 1) * stride + c];
    if (K > 1) window[(K - 2) * stride + c] = x;
    return y / (1.0f + expf(-y));
}

// x (n) to unit length, times scale: x * scale / sqrt(sum x^2 + 1e-6)
// (Gated DeltaNet's q and k; transformers' l2norm, eps 1e-6).
MOE_HD inline void gm_l2_normalize(float* x, int n, float scale) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const float f = scale / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) x[i] *= f;
}

// One element of the gated RMSNorm of a head's output: o * r * w * silu(z),
// r = gm_rms_scale of the head's sum of squares.
MOE_HD inline float gm_gated_norm_element(float o, float z, float w, float r) {
    return o * r * w * (z / (1.0f + expf(-z)));
}

// Gated RMSNorm of one head's output o (n): rmsnorm(o) * w * silu(z).
MOE_HD inline void gm_rmsnorm_gated(float* o, const float* z, const float* w, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += o[i] * o[i];
    const float r = 1.0f / sqrtf(ss / float(n) + eps);
    for (int i = 0; i < n; i++) o[i] = gm_gated_norm_element(o[i], z[i], w[i], r);
}

// Gated DeltaNet, one position of one head (Qwen3.5 / Qwen3-Next; the
// delta rule with a per-step decay), one column j of its state: S (dk,
// dv) row-major, s = &S[0][j] (rows `stride` apart), k and q unit vectors
// (q scaled by 1/sqrt(dk)), v_j, g <= 0 the log decay, beta in (0, 1).
// u's column j reads only S's column j, so each column goes on by itself:
//   S *= exp(g);  u_j = beta (v_j - (S^T k)_j);  S[:, j] += k u_j;  returns (S^T q)_j.
// The same sums in the same order as cpu_kernels' scalar delta_rule_step.
MOE_HD inline float gm_delta_rule_column(float* s, long stride, const float* q, const float* k, float v, float g,
                                         float beta, int dk) {
    const float decay = expf(g);
    float acc = 0.0f;
    for (int i = 0; i < dk; i++) {
        float r = s[i * stride] * decay;
        s[i * stride] = r;
        acc += r * k[i];
    }
    const float u = beta * (v - acc);
    acc = 0.0f;
    for (int i = 0; i < dk; i++) {
        const float r = s[i * stride] + k[i] * u;
        s[i * stride] = r;
        acc += r * q[i];
    }
    return acc;
}

// The RMSNorm factor of a row of n values whose squares sum to sum_sq:
// out = x * gm_rms_scale(...) * weight.
MOE_HD inline float gm_rms_scale(float sum_sq, int n, float eps) { return 1.0f / sqrtf(sum_sq / float(n) + eps); }

// One rotate-half RoPE pair (a, b) = (x[i], x[i + rot_dim / 2]) at position
// pos: the angle pos * inv_freq (the model's frequency of pair i, engine's
// rope_inv_freq) and its cos and sin in double, times mscale (YaRN's
// attention factor, else 1) rounded to float, as cpu_kernels'
// rope_rotate_half does (pos * freq reaches 1e5 rad at long contexts, where
// fp32 angles are off by radians).
MOE_HD inline void gm_rope_pair(float* a, float* b, int pos, double inv_freq, float mscale) {
    const double angle = double(pos) * inv_freq;
    const float c = float(cos(angle) * mscale), s = float(sin(angle) * mscale);
    const float x = *a, y = *b;
    *a = x * c - y * s;
    *b = y * c + x * s;
}

// Online softmax over a stream of scores: the state (max m, sum l of
// exp(score - m)) takes one more score s; the caller rescales its weighted
// accumulator by *rescale and adds *p times the new value. Starts from
// m = -INFINITY, l = 0.
MOE_HD inline void gm_online_softmax_step(float s, float* m, float* l, float* rescale, float* p) {
    const float m_new = s > *m ? s : *m;
    *rescale = expf(*m - m_new);  // exp(-inf) = 0 on the first score
    *p = expf(s - m_new);
    *l = *l * *rescale + *p;
    *m = m_new;
}

// Merges online-softmax state (m2, l2) into (m, l); the caller scales its
// accumulator by *scale1 and the other's by *scale2 and adds them.
MOE_HD inline void gm_online_softmax_merge(float* m, float* l, float m2, float l2, float* scale1, float* scale2) {
    const float m_new = m2 > *m ? m2 : *m;
    *scale1 = *m == -INFINITY ? 0.0f : expf(*m - m_new);
    *scale2 = m2 == -INFINITY ? 0.0f : expf(m2 - m_new);
    *l = *l * *scale1 + l2 * *scale2;
    *m = m_new;
}

// The most experts one token may choose on the device.
constexpr int GM_MAX_TOP_K = 16;

// Routing of one token, as softmax + top_k + the renormalisation of the
// CPU's MoE layer: probabilities p = softmax(logits (n,)); the k largest
// (largest first, ties to the lower index) into experts (k,), their p into
// weights (k,), divided by their sum when renorm. k <= GM_MAX_TOP_K.
MOE_HD inline void gm_route_row(int* experts, float* weights, const float* logits, int n, int k, bool renorm) {
    float mx = logits[0];
    for (int i = 1; i < n; i++) mx = logits[i] > mx ? logits[i] : mx;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += expf(logits[i] - mx);
    const float inv = 1.0f / sum;
    float best[GM_MAX_TOP_K];
    int filled = 0;
    for (int i = 0; i < n; i++) {
        const float p = expf(logits[i] - mx) * inv;
        int at = filled < k ? filled : k;
        while (at > 0 && p > best[at - 1]) at--;
        if (at >= k) continue;
        for (int j = (filled < k ? filled : k - 1); j > at; j--) {
            best[j] = best[j - 1];
            experts[j] = experts[j - 1];
        }
        best[at] = p;
        experts[at] = i;
        if (filled < k) filled++;
    }
    float chosen = 0.0f;
    for (int r = 0; r < k; r++) chosen += best[r];
    for (int r = 0; r < k; r++) weights[r] = renorm ? best[r] / chosen : best[r];
}
