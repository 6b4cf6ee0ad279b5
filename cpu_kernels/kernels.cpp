// Public kernel entry points: the dispatcher. Picks the table of the active
// ISA, chooses the rows or packed matmul path by token count, prepares
// activations once per call and splits work over the pool. Holds no SIMD code
// itself (compiled for baseline x86-64) and knows nothing about models.
#include "cpu_kernels/kernels.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "cpu_kernels/gemm_dnnl.h"
#include "cpu_kernels/quant.h"

const KernelTable& kernel_table(Isa isa) {
    switch (isa) {
    case Isa::SCALAR: return kernel_table_scalar();
    case Isa::AVX2: return kernel_table_avx2();
    case Isa::AVX512: return kernel_table_avx512();
    case Isa::AVX512BF16: return kernel_table_avx512bf16();
    }
    return kernel_table_scalar();
}

namespace {

const KernelTable& active_table() { return kernel_table(isa_active()); }

// Grow-only aligned buffers of the calling thread: prepared activations and
// attention scratch. After the first calls of a given size nothing allocates.
struct Workspace {
    struct Free {
        void operator()(void* p) const { std::free(p); }
    };
    std::unique_ptr<void, Free> p;
    size_t bytes = 0;
    void* get(size_t n) {
        if (n > bytes) {
            bytes = (n + 4095) / 4096 * 4096;
            p.reset(std::aligned_alloc(64, bytes));
        }
        return p.get();
    }
};

// WS_X3: w3's activations when its type differs from w1's; WS_W, WS_Y: a
// piece of dequantized W and its output (packed path of quantized W).
// WS_DELTA: the chunked delta rule's blocks.
enum WorkspaceSlot { WS_X, WS_X3, WS_H, WS_ATTN, WS_W, WS_Y, WS_ROW, WS_DELTA, WS_COUNT };

void* workspace(WorkspaceSlot slot, size_t bytes) {
    static thread_local Workspace ws[WS_COUNT];
    return ws[slot].get(bytes);
}

// Activations in the form the chosen path reads; x itself when it needs none.
const void* prepared(const KernelTable& t, bool packed, WorkspaceSlot slot, const float* x, int m, int k) {
    if (!t.prepare_x || (packed && !t.packed_x_prepared)) return x;
    void* xp = workspace(slot, size_t(m) * t.x_stride(k) * t.x_elem_bytes);
    t.prepare_x(xp, x, m, k, 0, k);
    return xp;
}

// Threads split output rows / columns in multiples of 64: whole cache lines
// of y, whole SIMD blocks for prepare_x, whole packed-path panels.
constexpr long SPLIT_ALIGN = 64;
// Quantized weights below the packed switch split finer: 16 rows are a cache
// line of y and two groups of interleaved rows, and the finer pieces let a
// thread done early take more of a slowed one's work.
constexpr long ROWS_SPLIT_ALIGN = 16;
long split_align(bool packed) {
    return packed ? SPLIT_ALIGN : ROWS_SPLIT_ALIGN;
}

std::atomic<bool> dnnl_allowed{true};

using MatmulKernel = void (*)(float*, const void*, const bf16*, int, int, int, int, int);

// From this m on, the AVX512_BF16 path hands large matmuls to oneDNN's bf16
// brgemm where it is native: measured on Zen 4 (2 threads) it beats our
// packed kernel by 3-15 % at m = 256 and loses or ties at m = 64.
constexpr int DNNL_MIN_M = 128;

// The packed kernel for m tokens: oneDNN where it takes over, else ours.
MatmulKernel packed_kernel(const KernelTable& t, int m) {
    if (t.isa == Isa::AVX512BF16 && m >= DNNL_MIN_M && dnnl_allowed.load(std::memory_order_relaxed) &&
        dnnl_bf16_native())
        return dnnl_matmul_bf16_cols;
    return t.matmul_packed;
}

// The kernel for m tokens.
MatmulKernel matmul_kernel(const KernelTable& t, int m) {
    return m < t.packed_min_m ? t.matmul_rows : packed_kernel(t, m);
}

}  // namespace

bool matmul_dnnl_select(bool allow) {
    dnnl_allowed.store(allow);
    return allow && dnnl_bf16_native();
}

void matmul_bf16(const KernelTable& t, float* y, const float* x, const bf16* w, int m, int n, int k,
                 ThreadPool& pool) {
    assert(m > 0 && n > 0 && k > 0);
    bool packed = m >= t.packed_min_m;
    const void* xa = prepared(t, packed, WS_X, x, m, k);
    MatmulKernel kernel = matmul_kernel(t, m);
    pool.parallel_for(n, SPLIT_ALIGN, [&](long r0, long r1) { kernel(y, xa, w, m, n, k, int(r0), int(r1)); });
}

void matmul_bf16(float* y, const float* x, const bf16* w, int m, int n, int k, ThreadPool& pool) {
    matmul_bf16(active_table(), y, x, w, m, n, k, pool);
}

namespace {

// Whether w's kernel for m tokens is the packed one (ffn: the fused
// expert's later switch for bf16).
bool packed_for(const KernelTable& t, const WeightView& w, int m, bool ffn) {
    switch (w.type) {
    case DType::BF16:
        return m >= (ffn ? t.ffn_packed_min_m : t.packed_min_m);
    case DType::F32:
    case DType::F16:
        return false;
    default:
        return m >= t.quant_packed_min_m;
    }
}

// x (m, w.cols) in the form w's kernel reads: prepared as for bf16 (bf16 W,
// and quantized W on the packed path, which runs the bf16 kernels), int8
// blocks (quantized W, rows path) or as it is (f32 / f16 W).
const void* prepare_for(const KernelTable& t, const WeightView& w, bool packed, WorkspaceSlot slot, const float* x,
                        int m) {
    int k = int(w.cols);
    if (w.type == DType::BF16 || (dtype_quantized(w.type) && packed)) return prepared(t, packed, slot, x, m, k);
    if (!dtype_quantized(w.type)) return x;
    size_t row = quant_x_row_bytes(w.type, k);
    char* xq = static_cast<char*>(workspace(slot, row * size_t(m)));
    for (int i = 0; i < m; i++) t.quantize_x(w.type, x + long(i) * k, xq + row * size_t(i), k);
    return xq;
}

// Rows of W per piece on the packed path of quantized W: about 256 KB of
// bf16 (L2-resident while the micro-kernel reuses it), 64 to 256 rows.
int dequant_piece_rows(int k) {
    return int(std::clamp(262144L / (2L * k) / SPLIT_ALIGN, 1L, 4L) * SPLIT_ALIGN);
}

// y[:, r0:r1] (y is (m, w.rows)) from xa = prepare_for(t, w, packed, ...).
void view_rows(const KernelTable& t, float* y, const void* xa, const WeightView& w, int m, bool packed, int r0,
               int r1) {
    int n = int(w.rows), k = int(w.cols);
    switch (w.type) {
    case DType::BF16:
        (packed ? matmul_kernel(t, m) : t.matmul_rows)(y, xa, static_cast<const bf16*>(w.data), m, n, k, r0, r1);
        return;
    case DType::F32:
    case DType::F16: {
        float* row = static_cast<float*>(workspace(WS_ROW, sizeof(float) * size_t(k)));
        const float* x = static_cast<const float*>(xa);
        for (int r = r0; r < r1; r++) {
            dequantize_row(w.type, w.row(r), row, k);
            for (int i = 0; i < m; i++) y[long(i) * n + r] = t.dot_f32(row, x + long(i) * k, k);
        }
        return;
    }
    default:
        break;
    }
    if (!packed) return t.quant_rows(w.type, y, xa, w.data, w.row_bytes, m, n, k, r0, r1);
    // Packed: a piece of W's rows dequantized to bf16, the bf16 kernel on it
    // into a piece of y, copied to its columns.
    int piece = dequant_piece_rows(k);
    bf16* wb = static_cast<bf16*>(workspace(WS_W, sizeof(bf16) * size_t(piece) * k));
    float* yp = static_cast<float*>(workspace(WS_Y, sizeof(float) * size_t(piece) * m));
    // (Always a packed kernel: x was prepared for one, whatever the bf16
    // crossover packed_min_m says.)
    MatmulKernel kernel = packed_kernel(t, m);
    for (int r = r0; r < r1; r += piece) {
        int c = std::min(piece, r1 - r);
        t.dequant_bf16(w.type, wb, w.data, w.row_bytes, k, r, r + c);
        kernel(yp, xa, wb, m, c, k, 0, c);
        for (int i = 0; i < m; i++) std::copy(yp + long(i) * c, yp + long(i + 1) * c, y + long(i) * n + r);
    }
}

}  // namespace

void matmul(const KernelTable& t, float* y, const float* x, const WeightView& w, int m, ThreadPool& pool) {
    assert(m > 0 && w.rows > 0 && w.cols > 0);
    if (w.type == DType::BF16)
        return matmul_bf16(t, y, x, static_cast<const bf16*>(w.data), m, int(w.rows), int(w.cols), pool);
    bool packed = packed_for(t, w, m, false);
    const void* xa = prepare_for(t, w, packed, WS_X, x, m);
    pool.parallel_for(w.rows, split_align(packed),
                      [&](long r0, long r1) { view_rows(t, y, xa, w, m, packed, int(r0), int(r1)); });
}

void matmul(float* y, const float* x, const WeightView& w, int m, ThreadPool& pool) {
    matmul(active_table(), y, x, w, m, pool);
}

void quantize_matrix(DType type, const WeightView& w, void* dst, ThreadPool& pool) {
    const DType plain = dtype_plain(type);
    const size_t row = *dtype_row_bytes(plain, w.cols);
    std::vector<unsigned char> plain_rows(plain == type ? 0 : row * size_t(w.rows));
    unsigned char* out = plain == type ? static_cast<unsigned char*>(dst) : plain_rows.data();
    pool.parallel_for(long(w.rows), 1, [&](long begin, long end) {
        std::vector<float> f(size_t(w.cols));
        for (long r = begin; r < end; r++) {
            weight_row_f32(f.data(), w, r);
            quantize_row(plain, f.data(), out + size_t(r) * row, w.cols);
        }
    });
    if (plain != type) quant_repack_r8(type, plain_rows.data(), dst, w.rows, row);
}

void weight_row_f32(float* out, const WeightView& w, int64_t r) {
    assert(r >= 0 && r < w.rows);
    if (w.type == DType::BF16) {  // the common case (a bf16 model's embedding row), without the block decoders
        const bf16* row = static_cast<const bf16*>(w.row(r));
        for (int64_t c = 0; c < w.cols; c++) out[c] = bf16_to_f32(row[c]);
        return;
    }
    if (dtype_row_group(w.type) == 1) return dequantize_row(w.type, w.row(r), out, w.cols);
    static thread_local std::vector<char> scratch;
    scratch.resize(w.row_bytes);
    dequantize_row(dtype_plain(w.type), quant_row_plain(w.type, w.data, w.row_bytes, r, scratch.data()), out, w.cols);
}

namespace {

// An FFN's gate on columns [r0, r1) of m rows of h1 and h3 (rows `hidden`
// apart): the biases, then the activation, into h1.
void ffn_gate(const KernelTable& t, const FfnSpec& f, float* h1, float* h3, int m, long hidden, long r0, long r1) {
    const int n = int(r1 - r0);
    for (int i = 0; i < m; i++) {
        float* a = h1 + long(i) * hidden + r0;
        float* b = h3 + long(i) * hidden + r0;
        if (f.b1)
            for (int j = 0; j < n; j++) a[j] += f.b1[r0 + j];
        if (f.b3)
            for (int j = 0; j < n; j++) b[j] += f.b3[r0 + j];
        if (f.act.kind == FfnActivation::Kind::SILU) {
            t.silu_mul(a, b, n);
            continue;
        }
        // g sigmoid(alpha g) (u + 1) = silu(alpha g) (u + 1) / alpha: the
        // clamps and scalings in one vectorisable pass, then the ISA's silu_mul
        // (the formula of ffn_clamped_swiglu, within rounding).
        const float alpha = f.act.alpha, limit = f.act.limit, inv_alpha = 1.0f / alpha;
        for (int j = 0; j < n; j++) {
            a[j] = alpha * std::min(a[j], limit);
            b[j] = (std::clamp(b[j], -limit, limit) + 1.0f) * inv_alpha;
        }
        t.silu_mul(a, b, n);
    }
}

// The output bias on columns [r0, r1) of m rows of y (rows dim apart).
void ffn_out_bias(const FfnSpec& f, float* y, int m, long dim, long r0, long r1) {
    if (!f.b2) return;
    for (int i = 0; i < m; i++)
        for (long j = r0; j < r1; j++) y[long(i) * dim + j] += f.b2[j];
}

}  // namespace

void expert_ffn_bf16(const KernelTable& t, float* y, const float* x, const bf16* w1, const bf16* w3,
                     const bf16* w2, int m, int dim, int hidden, float* scratch, ThreadPool& pool,
                     const FfnSpec& spec) {
    assert(m > 0 && dim > 0 && hidden > 0);
    float* h1 = scratch;
    float* h3 = scratch + long(m) * hidden;
    assert(t.ffn_packed_min_m >= t.packed_min_m);
    bool packed = m >= t.ffn_packed_min_m;
    const void* xa = prepared(t, packed, WS_X, x, m, dim);
    MatmulKernel kernel = packed ? matmul_kernel(t, m) : t.matmul_rows;
    // The hidden activations go straight into the form the w2 pass reads:
    // each thread prepares its own columns, so there is no extra pass.
    bool prepare_h = t.prepare_x && (!packed || t.packed_x_prepared);
    void* hp = prepare_h ? workspace(WS_H, size_t(m) * t.x_stride(hidden) * t.x_elem_bytes) : h1;
    // Pass 1: w1 and w3 over the same rows, 64 rows of each in turn, then
    // silu(h1) * h3 on this thread's columns. Pass 2: w2.
    pool.parallel_for(hidden, SPLIT_ALIGN, [&](long r0, long r1) {
        for (long r = r0; r < r1; r += SPLIT_ALIGN) {
            int re = int(std::min(r1, r + SPLIT_ALIGN));
            kernel(h1, xa, w1, m, hidden, dim, int(r), re);
            kernel(h3, xa, w3, m, hidden, dim, int(r), re);
        }
        ffn_gate(t, spec, h1, h3, m, hidden, r0, r1);
        if (prepare_h) t.prepare_x(hp, h1, m, hidden, int(r0), int(r1));
    });
    pool.parallel_for(dim, SPLIT_ALIGN, [&](long r0, long r1) {
        kernel(y, hp, w2, m, dim, hidden, int(r0), int(r1));
        ffn_out_bias(spec, y, m, dim, r0, r1);
    });
}

void expert_ffn_bf16(float* y, const float* x, const bf16* w1, const bf16* w3, const bf16* w2, int m, int dim,
                     int hidden, float* scratch, ThreadPool& pool, const FfnSpec& spec) {
    expert_ffn_bf16(active_table(), y, x, w1, w3, w2, m, dim, hidden, scratch, pool, spec);
}

void expert_ffn(const KernelTable& t, float* y, const float* x, const WeightView& w1, const WeightView& w3,
                const WeightView& w2, int m, float* scratch, ThreadPool& pool, const FfnSpec& spec) {
    int hidden = int(w1.rows), dim = int(w1.cols);
    assert(m > 0 && w3.rows == hidden && w3.cols == dim && w2.rows == dim && w2.cols == hidden);
    if (w1.type == DType::BF16 && w3.type == DType::BF16 && w2.type == DType::BF16)
        return expert_ffn_bf16(t, y, x, static_cast<const bf16*>(w1.data), static_cast<const bf16*>(w3.data),
                               static_cast<const bf16*>(w2.data), m, dim, hidden, scratch, pool, spec);
    float* h1 = scratch;
    float* h3 = scratch + long(m) * hidden;
    bool p1 = packed_for(t, w1, m, true), p3 = packed_for(t, w3, m, true), p2 = packed_for(t, w2, m, true);
    const void* x1 = prepare_for(t, w1, p1, WS_X, x, m);
    const void* x3 = w3.type == w1.type && p3 == p1 ? x1 : prepare_for(t, w3, p3, WS_X3, x, m);
    // Pass 1: w1 and w3 over the same rows, up to 64 rows of each in turn,
    // then silu(h1) * h3 on the piece's columns. Pass 2: w2, its activations
    // prepared once in between.
    pool.parallel_for(hidden, split_align(p1 || p3), [&](long r0, long r1) {
        for (long r = r0; r < r1; r += SPLIT_ALIGN) {
            int re = int(std::min(r1, r + SPLIT_ALIGN));
            view_rows(t, h1, x1, w1, m, p1, int(r), re);
            view_rows(t, h3, x3, w3, m, p3, int(r), re);
        }
        ffn_gate(t, spec, h1, h3, m, hidden, r0, r1);
    });
    const void* h = prepare_for(t, w2, p2, WS_H, h1, m);
    pool.parallel_for(dim, split_align(p2), [&](long r0, long r1) {
        view_rows(t, y, h, w2, m, p2, int(r0), int(r1));
        ffn_out_bias(spec, y, m, dim, r0, r1);
    });
}

void expert_ffn(float* y, const float* x, const WeightView& w1, const WeightView& w3, const WeightView& w2, int m,
                float* scratch, ThreadPool& pool, const FfnSpec& spec) {
    expert_ffn(active_table(), y, x, w1, w3, w2, m, scratch, pool, spec);
}

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
    assert(n > 0);
    active_table().rmsnorm(out, x, weight, n, eps);
}

void rope_rotate_half(float* x, int n_heads, int head_dim, int pos, const double* inv_freq, float mscale,
                      int rot_dim) {
    if (rot_dim == 0) rot_dim = head_dim;
    assert(rot_dim % 2 == 0 && rot_dim <= head_dim && rot_dim <= 1024);
    const int half = rot_dim / 2;
    float cs[512], sn[512];
    for (int i = 0; i < half; i++) {
        const double angle = double(pos) * inv_freq[i];
        cs[i] = float(std::cos(angle) * mscale);
        sn[i] = float(std::sin(angle) * mscale);
    }
    const KernelTable& t = active_table();
    if (rot_dim == head_dim) return t.rope(x, n_heads, head_dim, cs, sn);
    for (int h = 0; h < n_heads; h++) t.rope(x + long(h) * head_dim, 1, rot_dim, cs, sn);
}

void softmax(float* x, int n) {
    assert(n > 0);
    const KernelTable& t = active_table();
    float sum = t.exp_sum_f32(x, n, t.max_f32(x, n));
    t.scale_f32(x, 1.0f / sum, n);
}

void silu_mul(float* a, const float* b, int n) { active_table().silu_mul(a, b, n); }

namespace {

// K or V rows of positions [0, n_pos): blocks of block_size rows, block c
// at blocks[c] + offset, rows row_stride floats apart. Contiguous rows are
// one block of n_pos.
struct KvRows {
    const float* const* blocks;
    long offset;
    int block_size;
    long row_stride;
    // Position p's row.
    const float* at(int p) const { return blocks[p / block_size] + offset + long(p % block_size) * row_stride; }
    // Positions from p0 to the end of the run of blocks whose rows follow
    // each other in memory, at most n_pos - p0.
    int run(int p0, int n_pos) const {
        int c = p0 / block_size, len = block_size - p0 % block_size;
        while (p0 + len < n_pos && blocks[c + 1] == blocks[c] + long(block_size) * row_stride) {
            c++;
            len += block_size;
        }
        return std::min(len, n_pos - p0);
    }
};

// The first position a query at position pos sees.
int window_start(const AttnMask& mask, int pos) {
    return mask.window > 0 ? std::max(0, pos - mask.window + 1) : 0;
}

// Softmax-weighted sum of V for n_q query heads of one kv head over
// positions [p_lo, n_pos). s: n_q x (n_pos - p_lo) scores (overwritten).
// The scores of each run of rows go to their columns of s, so the softmax
// and the V sum see the same row and order however the rows are split.
// sinks (n_q,), or null: one more logit each in the softmax's denominator.
void attend_group(const KernelTable& t, float* out, const float* q, KvRows k, KvRows v, int p_lo, int n_pos, int n_q,
                  int head_dim, float* s, const float* sinks) {
    const float scale = 1.0f / std::sqrt(float(head_dim));
    const int n = n_pos - p_lo;
    for (int p0 = p_lo, len = 0; p0 < n_pos; p0 += len) {
        len = k.run(p0, n_pos);
        t.attn_scores(s + (p0 - p_lo), n, q, head_dim, n_q, k.at(p0), k.row_stride, len, head_dim, scale);
    }
    for (int g = 0; g < n_q; g++) {
        float* sg = s + long(g) * n;
        float mx = t.max_f32(sg, n);
        if (sinks) mx = std::max(mx, sinks[g]);
        float sum = t.exp_sum_f32(sg, n, mx);
        if (sinks) sum += std::exp(sinks[g] - mx);
        t.scale_f32(sg, 1.0f / sum, n);
    }
    std::fill(out, out + long(n_q) * head_dim, 0.0f);
    for (int p0 = p_lo, len = 0; p0 < n_pos; p0 += len) {
        len = v.run(p0, n_pos);
        t.attn_accum(out, head_dim, s + (p0 - p_lo), n, n_q, v.at(p0), v.row_stride, len, head_dim);
    }
}

// Every query head of one token (at position n_pos - 1), the n_heads /
// n_kv_heads heads that share a kv head together (each K and V row read
// once for the group). A head's scores and sums are those it gets alone:
// attn_scores and attn_accum keep one order per head however many share the
// rows. scratch: group * n_pos.
void attend_heads(float* out, const float* q, KvRows k, KvRows v, int n_pos, int n_heads, int n_kv_heads,
                  int head_dim, float* scratch, const AttnMask& mask) {
    assert(n_pos > 0 && k.block_size > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0);
    const KernelTable& t = active_table();
    int group = n_heads / n_kv_heads;
    const int p_lo = window_start(mask, n_pos - 1);
    for (int j = 0; j < n_kv_heads; j++) {
        long kv_off = long(j) * head_dim;
        KvRows kh = k, vh = v;
        kh.offset += kv_off;
        vh.offset += kv_off;
        attend_group(t, out + kv_off * group, q + kv_off * group, kh, vh, p_lo, n_pos, group, head_dim, scratch,
                     mask.sinks ? mask.sinks + long(j) * group : nullptr);
    }
}

}  // namespace

void attention_one(float* out, const float* q, const float* k, const float* v, int n_pos, int n_heads,
                   int n_kv_heads, int head_dim, int kv_stride, float* scratch, const AttnMask& mask) {
    attend_heads(out, q, KvRows{&k, 0, n_pos, kv_stride}, KvRows{&v, 0, n_pos, kv_stride}, n_pos, n_heads, n_kv_heads,
                 head_dim, scratch, mask);
}

void attention_paged(float* out, const float* q, const float* const* blocks, long k_offset, long v_offset,
                     int block_size, int n_pos, int n_heads, int n_kv_heads, int head_dim, int kv_stride,
                     float* scratch, const AttnMask& mask) {
    attend_heads(out, q, KvRows{blocks, k_offset, block_size, kv_stride}, KvRows{blocks, v_offset, block_size, kv_stride},
                 n_pos, n_heads, n_kv_heads, head_dim, scratch, mask);
}

namespace {

// attention_run's blocks: QB_ROWS (token, head) rows of queries of one kv
// head against KB positions; positions in blocks [b * KB, (b + 1) * KB)
// whatever the pages or the queries' block, so a query's arithmetic depends
// only on its position and the cache.
constexpr int RUN_QB_ROWS = 64;
constexpr int RUN_KB = 64;

// One task of attention_run: tokens [t0, t0 + nt) of the run, the group of
// query heads of kv head j. Flash-style: S = Q K^T and O += P V as gemm_f32
// blocks (Q scaled and packed, K^T and V packed per block), an online
// softmax per row in between (row = token * group + head).
void attention_run_task(const KernelTable& t, float* out, long out_stride, const float* q, long q_stride, KvRows k,
                        KvRows v, int pos0, int t0, int nt, int j, int group, int head_dim, const AttnMask& mask) {
    constexpr int KB = RUN_KB;
    const int rows = nt * group, hd = head_dim;
    size_t floats = size_t(rows) * (hd + KB + hd + 2) + size_t(2) * KB * hd;
    float* qs = static_cast<float*>(workspace(WS_ATTN, sizeof(float) * floats));
    float* s = qs + size_t(rows) * hd;   // (rows, KB): scores, then P
    float* o = s + size_t(rows) * KB;    // (rows, hd): unnormalised output
    float* mx = o + size_t(rows) * hd;   // (rows,): running max
    float* l = mx + rows;                // (rows,): running sum
    float* kt = l + rows;                // (hd, KB): K^T of the block
    float* vp = kt + size_t(hd) * KB;    // (KB, hd): V of the block
    const float scale = 1.0f / std::sqrt(float(hd));
    const long kv_off = long(j) * hd;
    for (int tt = 0; tt < nt; tt++)
        for (int g = 0; g < group; g++) {
            const float* src = q + long(t0 + tt) * q_stride + (kv_off * group + long(g) * hd);
            float* dst = qs + size_t(tt * group + g) * hd;
            for (int d = 0; d < hd; d++) dst[d] = src[d] * scale;
        }
    std::fill(mx, mx + rows, -INFINITY);
    std::fill(l, l + rows, 0.0f);
    std::fill(o, o + size_t(rows) * hd, 0.0f);
    const int end = pos0 + t0 + nt;                 // the last query sees positions before end,
    const int lo = window_start(mask, pos0 + t0);  // the first one none before lo
    for (int p0 = lo / KB * KB; p0 < end; p0 += KB) {
        const int nb = std::min(KB, end - p0);
        for (int p = 0; p < nb; p++) {
            const int pos = p0 + p;
            if (pos < lo) {  // out of every row's window (and maybe out of the cache): zeros
                for (int d = 0; d < hd; d++) kt[long(d) * KB + p] = 0.0f;
                std::fill(vp + long(p) * hd, vp + long(p + 1) * hd, 0.0f);
                continue;
            }
            const float* kr = k.at(pos) + kv_off;
            const float* vr = v.at(pos) + kv_off;
            for (int d = 0; d < hd; d++) kt[long(d) * KB + p] = kr[d];
            std::copy_n(vr, hd, vp + long(p) * hd);
        }
        // All KB columns of S, the missing positions' K zero: a block cut
        // short by the run's end then multiplies as a whole one does (the
        // GEMM's column tails round differently), and the zero weights of
        // positions a row does not see add exact zeros to its V sum.
        for (int d = 0; d < hd && nb < KB; d++) std::fill(kt + long(d) * KB + nb, kt + long(d + 1) * KB, 0.0f);
        t.gemm_f32(s, KB, 0.0f, qs, hd, 1, kt, KB, rows, KB, hd, false);
        for (int r = 0; r < rows; r++) {
            float* sr = s + long(r) * KB;
            const int pos = pos0 + t0 + r / group;
            const int first = std::max(0, window_start(mask, pos) - p0);  // the row's window in the block:
            const int seen = std::min(nb, pos - p0 + 1);                  // [first, seen)
            if (seen <= first) {
                std::fill(sr, sr + nb, 0.0f);
                continue;
            }
            const float m_new = std::max(mx[r], t.max_f32(sr + first, seen - first));
            const float corr = std::exp(mx[r] - m_new);
            l[r] = l[r] * corr + t.exp_sum_f32(sr + first, seen - first, m_new);
            std::fill(sr, sr + first, 0.0f);
            std::fill(sr + seen, sr + nb, 0.0f);
            if (corr != 1.0f) t.scale_f32(o + long(r) * hd, corr, hd);
            mx[r] = m_new;
        }
        t.gemm_f32(o, hd, 1.0f, s, KB, 1, vp, hd, rows, hd, nb, false);
    }
    for (int r = 0; r < rows; r++) {
        float* dst = out + long(t0 + r / group) * out_stride + kv_off * group + long(r % group) * hd;
        float f = 1.0f;  // a sink joins as one more softmax state: logit sink, weight 1, no value
        if (mask.sinks) {
            const float sink = mask.sinks[kv_off / hd * group + r % group];
            const float m_new = std::max(mx[r], sink);
            f = std::exp(mx[r] - m_new);
            l[r] = l[r] * f + std::exp(sink - m_new);
        }
        const float inv = f / l[r];
        for (int d = 0; d < hd; d++) dst[d] = o[long(r) * hd + d] * inv;
    }
}

}  // namespace

void attention_run(float* out, long out_stride, const float* q, long q_stride, const float* const* blocks,
                   long k_offset, long v_offset, int block_size, int pos0, int n_tokens, int n_heads, int n_kv_heads,
                   int head_dim, int kv_stride, ThreadPool& pool, const AttnMask& mask) {
    assert(n_tokens > 0 && pos0 >= 0 && block_size > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0);
    const KernelTable& t = active_table();
    const int group = n_heads / n_kv_heads;
    const int qb = std::max(1, RUN_QB_ROWS / group);  // tokens a task
    const int n_qblocks = (n_tokens + qb - 1) / qb;
    const int n_tasks = n_qblocks * n_kv_heads;
    const KvRows k{blocks, k_offset, block_size, kv_stride}, v{blocks, v_offset, block_size, kv_stride};
    // Tasks by query block from the last (the most positions) down, so the
    // threads finish together.
    std::atomic<int> next{0};
    pool.run([&](int) {
        for (int task; (task = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) {
            const int b = n_qblocks - 1 - task / n_kv_heads, j = task % n_kv_heads;
            const int t0 = b * qb;
            attention_run_task(t, out, out_stride, q, q_stride, k, v, pos0, t0, std::min(qb, n_tokens - t0), j, group,
                               head_dim, mask);
        }
    });
}

namespace {

// One chunk of c <= DELTA_CHUNK tokens of gated_delta_rule's chunked form.
// With G_t the decay's running sum over the chunk (g_0 + ... + g_t), the
// recurrence unrolls to
//   S_t = e^G_t S_0 + sum_{s<=t} e^(G_t - G_s) k_s u_s^T,
//   u_t = beta_t (v_t - e^G_t S_0^T k_t) - sum_{s<t} A_ts u_s,
//   A_ts = beta_t e^(G_t - G_s) k_t . k_s,
// so U = (I + A)^-1 R with R_t = beta_t (v_t - e^G_t S_0^T k_t) (the WY
// form), then O_t = e^G_t S_0^T q_t + sum_{s<=t} e^(G_t - G_s) (q_t . k_s)
// u_s and S_c = e^G_(c-1) S_0 + sum_s e^(G_(c-1) - G_s) k_s u_s^T. Every
// exponent is <= 0. All products of more than one vector are gemm_f32
// blocks, K and Q stacked so that [K; Q] K^T and [K; Q] S_0 read K^T and
// S_0 once; (I + A)^-1 is forward substitution on c x c.
void delta_rule_chunk(const KernelTable& t, float* S, float* o, long o_stride, const float* q, const float* k,
                      long qk_stride, const float* v, long v_stride, const float* g, const float* beta, long gb_stride,
                      int c, int dk, int dv, float* work) {
    constexpr int C = DELTA_CHUNK;
    float* kq = work;                      // (2c, dk): K then Q
    float* kt = kq + size_t(2 * C) * dk;   // (dk, C): K^T
    float* m2 = kt + size_t(dk) * C;       // (2c, C): K K^T, then Q K^T masked and decayed (P)
    float* tm = m2 + 2 * C * C;            // (C, C): (I + A)^-1, zero above the diagonal
    float* dec = tm + C * C;               // (C, C): e^(G_t - G_s), s <= t
    float* r2 = dec + C * C;               // (2c, dv): K S_0 then R, Q S_0
    float* u = r2 + size_t(2 * C) * dv;    // (C, dv): U
    float G[C], eg[C], bt[C];
    float run = 0.0f;
    for (int s = 0; s < c; s++) {
        run += g[s * gb_stride];
        G[s] = run;
        eg[s] = std::exp(run);
        bt[s] = beta[s * gb_stride];
    }
    for (int tt = 0; tt < c; tt++)
        for (int s = 0; s <= tt; s++) dec[tt * C + s] = std::exp(G[tt] - G[s]);
    for (int s = 0; s < c; s++) {
        std::copy_n(k + s * qk_stride, dk, kq + long(s) * dk);
        std::copy_n(q + s * qk_stride, dk, kq + long(c + s) * dk);
        for (int i = 0; i < dk; i++) kt[long(i) * C + s] = k[s * qk_stride + i];
    }
    t.gemm_f32(m2, C, 0.0f, kq, dk, 1, kt, C, 2 * c, c, dk, false);       // [K; Q] K^T
    t.gemm_f32(r2, dv, 0.0f, kq, dk, 1, S, dv, 2 * c, dv, dk, false);     // [K; Q] S_0
    // T = (I + A)^-1 row by row: T_t = e_t - sum_{s<t} A_ts T_s (T_s is zero past column s).
    for (int tt = 0; tt < c; tt++) {
        float* row = tm + tt * C;
        std::fill(row, row + C, 0.0f);
        row[tt] = 1.0f;
        for (int s = 0; s < tt; s++) t.axpy_f32(row, -bt[tt] * dec[tt * C + s] * m2[tt * C + s], tm + s * C, s + 1);
    }
    for (int tt = 0; tt < c; tt++) {
        float* rt = r2 + long(tt) * dv;
        const float* vt = v + tt * v_stride;
        for (int j = 0; j < dv; j++) rt[j] = bt[tt] * (vt[j] - eg[tt] * rt[j]);
        const float* qs = r2 + long(c + tt) * dv;
        float* ot = o + tt * o_stride;
        for (int j = 0; j < dv; j++) ot[j] = eg[tt] * qs[j];
    }
    t.gemm_f32(u, dv, 0.0f, tm, C, 1, r2, dv, c, dv, c, true);  // U = T R
    float* p = m2 + c * C;
    for (int tt = 0; tt < c; tt++) {
        float* row = p + tt * C;
        for (int s = 0; s <= tt; s++) row[s] *= dec[tt * C + s];
        std::fill(row + tt + 1, row + C, 0.0f);
    }
    t.gemm_f32(o, o_stride, 1.0f, p, C, 1, u, dv, c, dv, c, true);  // O += P U
    for (int s = 0; s < c; s++) t.scale_f32(u + long(s) * dv, dec[(c - 1) * C + s], dv);
    t.gemm_f32(S, dv, eg[c - 1], kt, C, 1, u, dv, dk, dv, c, false);  // S = e^G S_0 + K^T U
}

}  // namespace

void gated_delta_rule(const KernelTable& t, float* S, float* o, long o_stride, const float* q, const float* k,
                      long qk_stride, const float* v, long v_stride, const float* g, const float* beta,
                      long gb_stride, int n, int dk, int dv) {
    assert(n >= 0 && dk > 0 && dv > 0);
    if (n < DELTA_CHUNK_MIN) {
        for (int i = 0; i < n; i++)
            t.delta_rule_step(S, o + i * o_stride, q + i * qk_stride, k + i * qk_stride, v + i * v_stride,
                              g[i * gb_stride], beta[i * gb_stride], dk, dv);
        return;
    }
    constexpr int C = DELTA_CHUNK;
    float* work = static_cast<float*>(
        workspace(WS_DELTA, sizeof(float) * (size_t(3 * C) * dk + 4 * C * C + 3 * size_t(C) * dv)));
    for (int t0 = 0; t0 < n; t0 += C)
        delta_rule_chunk(t, S, o + t0 * o_stride, o_stride, q + t0 * qk_stride, k + t0 * qk_stride, qk_stride,
                         v + t0 * v_stride, v_stride, g + t0 * gb_stride, beta + t0 * gb_stride, gb_stride,
                         std::min(C, n - t0), dk, dv, work);
}

void gated_delta_rule(float* S, float* o, long o_stride, const float* q, const float* k, long qk_stride,
                      const float* v, long v_stride, const float* g, const float* beta, long gb_stride, int n, int dk,
                      int dv) {
    gated_delta_rule(active_table(), S, o, o_stride, q, k, qk_stride, v, v_stride, g, beta, gb_stride, n, dk, dv);
}

double gated_delta_rule_flops(int n, int dk, int dv) {
    if (n < DELTA_CHUNK_MIN) return 4.0 * 2.0 * double(n) * dk * dv;
    double flops = 0.0;
    for (int t0 = 0; t0 < n; t0 += DELTA_CHUNK) {
        const double c = std::min(DELTA_CHUNK, n - t0), tri = c * (c + 1) / 2;
        flops += 2.0 * (2 * c * c * dk + 3 * c * dk * dv + 2 * tri * dv) + c * c * c / 3;
    }
    return flops;
}

void top_k(int* idx, const float* x, int n, int k) {
    assert(k > 0 && k <= n);
    // Insertion into a sorted list of k: n is the expert count (8..64), where
    // this beats any vector selection.
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
