// Public kernel entry points: threading and dispatch to the active ISA table.
// Element-wise ops that are not on the bandwidth-critical path stay scalar.
#include "cpu_kernels/kernels.h"

#include <algorithm>
#include <cassert>
#include <cmath>

const KernelTable& kernel_table(Isa isa) {
    switch (isa) {
    case Isa::SCALAR:
    case Isa::AVX2:
    case Isa::AVX512:
    case Isa::AVX512BF16: break;
    }
    return kernel_table_scalar();
}

static const KernelTable& active_table() { return kernel_table(isa_active()); }

void matmul_bf16(float* y, const float* x, const bf16* w, int m, int n, int k, ThreadPool& pool) {
    assert(m > 0 && n > 0 && k > 0);
    const KernelTable& t = active_table();
    // Rows aligned to 16 so no two threads write the same cache line of y.
    pool.parallel_for(n, 16, [&](long r0, long r1) { t.matmul_bf16_rows(y, x, w, m, n, k, int(r0), int(r1)); });
}

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
    assert(n > 0);
    float ss = active_table().dot_f32(x, x, n);
    float scale = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * weight[i];
}

void rope_rotate_half(float* x, int n_heads, int head_dim, int pos, float theta) {
    assert(head_dim % 2 == 0);
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        // Frequencies in double: pos * freq reaches 1e5 rad at long contexts.
        double freq = std::pow(double(theta), -2.0 * i / head_dim);
        double angle = double(pos) * freq;
        float c = float(std::cos(angle)), s = float(std::sin(angle));
        for (int h = 0; h < n_heads; h++) {
            float* v = x + long(h) * head_dim;
            float a = v[i], b = v[i + half];
            v[i] = a * c - b * s;
            v[i + half] = b * c + a * s;
        }
    }
}

void softmax(float* x, int n) {
    assert(n > 0);
    float mx = *std::max_element(x, x + n);
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void silu_mul(float* a, const float* b, int n) {
    for (int i = 0; i < n; i++) a[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
}

void attention_one(float* out, const float* q, const float* k, const float* v, int n_pos, int n_heads,
                   int n_kv_heads, int head_dim, int kv_stride, float* scratch) {
    assert(n_pos > 0 && n_heads % n_kv_heads == 0);
    const KernelTable& t = active_table();
    int group = n_heads / n_kv_heads;
    float scale = 1.0f / std::sqrt(float(head_dim));
    for (int h = 0; h < n_heads; h++) {
        const float* qh = q + long(h) * head_dim;
        long kv_off = long(h / group) * head_dim;
        for (int p = 0; p < n_pos; p++) scratch[p] = t.dot_f32(qh, k + long(p) * kv_stride + kv_off, head_dim) * scale;
        softmax(scratch, n_pos);
        float* oh = out + long(h) * head_dim;
        std::fill(oh, oh + head_dim, 0.0f);
        for (int p = 0; p < n_pos; p++) t.axpy_f32(oh, scratch[p], v + long(p) * kv_stride + kv_off, head_dim);
    }
}

void top_k(int* idx, const float* x, int n, int k) {
    assert(k > 0 && k <= n);
    // Insertion into a sorted list of k: n is the expert count (8..64).
    int filled = 0;
    for (int i = 0; i < n; i++) {
        int p = filled < k ? filled : k;
        while (p > 0 && x[i] > x[idx[p - 1]]) p--;
        if (p >= k) continue;
        int last = filled < k ? filled : k - 1;
        for (int j = last; j > p; j--) idx[j] = idx[j - 1];
        idx[p] = i;
        if (filled < k) filled++;
    }
}

void expert_ffn_bf16(float* y, const float* x, const bf16* w1, const bf16* w3, const bf16* w2, int m, int dim,
                     int hidden, float* scratch, ThreadPool& pool) {
    float* h1 = scratch;
    float* h3 = scratch + long(m) * hidden;
    matmul_bf16(h1, x, w1, m, hidden, dim, pool);
    matmul_bf16(h3, x, w3, m, hidden, dim, pool);
    silu_mul(h1, h3, m * hidden);
    matmul_bf16(y, h1, w2, m, dim, hidden, pool);
}
