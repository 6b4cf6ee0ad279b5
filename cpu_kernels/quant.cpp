// Scalar block quantization (quant.h): rows of every DType to and from fp32,
// the scale / min search of the quantizers, the int8 activation rows of the
// quantized kernels and the scalar dot products they are tested against.
// Compiled for baseline x86-64.
#include "cpu_kernels/quant.h"

#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu_kernels/bf16.h"

namespace {

// Nearest integer, ties to even, as std::nearbyint in the default rounding
// mode but inline (baseline x86-64 has no roundss, and the searches below
// round millions of times): adding 1.5 * 2^23 leaves no fraction bits. For
// |v| < 2^22; larger values are integers or clamped away by the callers.
inline float rnd(float v) {
    return std::fabs(v) < 0x1p22f ? (v + 0x1.8p23f) - 0x1.8p23f : v;
}
// rnd(v) clamped to [lo, hi], as an int (clamped first, so any float is
// safe; NaN gives lo).
inline int qround(float v, int lo, int hi) {
    float c = v > float(lo) ? (v < float(hi) ? v : float(hi)) : float(lo);
    return int(rnd(c));
}
// Nearest, ties away from zero: std::round (llama.cpp's Q8_0 rounding).
inline float round_away(float v) {
    float r = rnd(v);
    return std::fabs(v - r) == 0.5f ? v + std::copysign(0.5f, v) : r;
}
inline float fp16_round(float v) {
    return fp16_to_f32(f32_to_fp16(v));
}
inline uint16_t load_u16(const void* p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

// ---------------------------------------------------------------------------
// Scale searches. Each candidate scale gives the nearest levels; for those
// levels the least-squares scale (and offset) is exact, and the candidate
// with the smallest squared error wins; one more round of rounding with the
// winner's scale and refitting follows.

// x (n) ~ s * q with integer q in [qmin, qmax]; returns s (0 for a zero
// block). The candidates map the element of largest magnitude to levels
// near qmin and near qmax.
float fit_symmetric(const float* x, int n, int qmin, int qmax, QuantSearch search) {
    assert(n % 4 == 0 && n <= 32);
    float xm = 0.0f, sxx = 0.0f;
    for (int i = 0; i < n; i++) {
        if (std::fabs(x[i]) > std::fabs(xm)) xm = x[i];
        sxx += x[i] * x[i];
    }
    if (xm == 0.0f) return 0.0f;
    float best_s = 0.0f, best_err = INFINITY;
    auto try_scale = [&](float s) {
        if (!(s != 0.0f) || !std::isfinite(s)) return;
        // Sums in four lanes (short dependency chains, vectorisable).
        float inv = 1.0f / s, sxq[4] = {}, sqq[4] = {};
        for (int i = 0; i < n; i += 4)
            for (int l = 0; l < 4; l++) {
                float q = float(qround(x[i + l] * inv, qmin, qmax));
                sxq[l] += x[i + l] * q;
                sqq[l] += q * q;
            }
        float a = (sxq[0] + sxq[1]) + (sxq[2] + sxq[3]), b = (sqq[0] + sqq[1]) + (sqq[2] + sqq[3]);
        if (b == 0.0f) return;
        // The least-squares scale for these levels, and its squared error
        // in closed form: sum x^2 - (sum x q)^2 / sum q^2.
        float err = sxx - a * a / b;
        if (err < best_err) best_err = err, best_s = a / b;
    };
    const int steps = search == QuantSearch::RANGE ? 0 : 12;
    for (int i = 0; i <= steps; i++) {
        try_scale(xm / (float(qmin) + 0.125f * float(i)));
        try_scale(xm / (float(qmax) - 0.125f * float(i)));
    }
    try_scale(best_s);
    return best_s;
}

// x (n) ~ s * q - m with integer q in [0, qmax], s >= 0, m >= 0 (the K
// types' sub-blocks: a min at or below zero).
void fit_affine(const float* x, int n, int qmax, float& scale, float& min, QuantSearch search) {
    assert(n % 4 == 0 && n <= 32);
    float lo = 0.0f, hi = x[0], sx = 0.0f, sxx = 0.0f;
    for (int i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        sx += x[i], sxx += x[i] * x[i];
    }
    scale = 0.0f;
    min = -lo;
    if (hi <= lo) return;  // every element equals lo (<= 0): x = -min
    float best_err = INFINITY, fn = float(n);
    auto try_scale = [&](float s, float b) {  // levels of x ~ s q + b
        float inv = 1.0f / s, q1[4] = {}, q2[4] = {}, xq[4] = {};
        for (int i = 0; i < n; i += 4)
            for (int l = 0; l < 4; l++) {
                float q = float(qround((x[i + l] - b) * inv, 0, qmax));
                q1[l] += q, q2[l] += q * q, xq[l] += x[i + l] * q;
            }
        float sq = (q1[0] + q1[1]) + (q1[2] + q1[3]), sqq = (q2[0] + q2[1]) + (q2[2] + q2[3]);
        float sxq = (xq[0] + xq[1]) + (xq[2] + xq[3]);
        float det = fn * sqq - sq * sq;
        if (det <= 0.0f) return;
        float s2 = (fn * sxq - sq * sx) / det, b2 = (sx - s2 * sq) / fn;
        if (b2 > 0.0f) b2 = 0.0f, s2 = sxq / sqq;  // the offset may only lower
        if (!(s2 > 0.0f)) return;
        // sum (s2 q + b2 - x)^2 in closed form.
        float err = s2 * s2 * sqq + 2.0f * s2 * b2 * sq - 2.0f * s2 * sxq + fn * b2 * b2 - 2.0f * b2 * sx + sxx;
        if (err < best_err) best_err = err, scale = s2, min = -b2;
    };
    const int span = search == QuantSearch::RANGE ? 0 : 10;
    for (int i = -span; i <= span; i++) try_scale((hi - lo) / (float(qmax) + 0.1f * float(i)), lo);
    if (best_err < INFINITY) try_scale(scale, -min);
}

// ---------------------------------------------------------------------------
// Q4_K / Q5_K: a super-block's sub-block fits, their scales and mins
// quantized to 6 bits under fp16 d / dmin, and the final levels.

struct KBlock {
    uint16_t d, dmin;
    uint8_t sc[8], mn[8];
    uint8_t q[256];
};

KBlock quantize_k_affine(const float* x, int qmax, QuantSearch search) {
    KBlock b{};
    float s[8], m[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        fit_affine(x + 32 * j, 32, qmax, s[j], m[j], search);
        smax = s[j] > smax ? s[j] : smax;
        mmax = m[j] > mmax ? m[j] : mmax;
    }
    float d = fp16_round(smax / 63.0f), dmin = fp16_round(mmax / 63.0f);
    b.d = f32_to_fp16(d);
    b.dmin = f32_to_fp16(dmin);
    for (int j = 0; j < 8; j++) {
        b.sc[j] = uint8_t(d > 0.0f ? qround(s[j] / d, 0, 63) : 0);
        b.mn[j] = uint8_t(dmin > 0.0f ? qround(m[j] / dmin, 0, 63) : 0);
        float step = d * float(b.sc[j]), off = dmin * float(b.mn[j]);
        for (int i = 0; i < 32; i++)
            b.q[32 * j + i] = uint8_t(step > 0.0f ? qround((x[32 * j + i] + off) / step, 0, qmax) : 0);
    }
    return b;
}

// The 12 scale bytes of sc / mn (the inverse of k_scale_min).
void k_pack_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t s[12]) {
    for (int j = 0; j < 4; j++) {
        s[j] = uint8_t((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        s[j + 4] = uint8_t((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        s[j + 8] = uint8_t((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

void quantize_q4_k(const float* x, BlockQ4_K& out, QuantSearch search) {
    KBlock b = quantize_k_affine(x, 15, search);
    out.d = b.d, out.dmin = b.dmin;
    k_pack_scales(b.sc, b.mn, out.scales);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) out.qs[32 * c + l] = uint8_t(b.q[64 * c + l] | b.q[64 * c + 32 + l] << 4);
}

void quantize_q5_k(const float* x, BlockQ5_K& out, QuantSearch search) {
    KBlock b = quantize_k_affine(x, 31, search);
    out.d = b.d, out.dmin = b.dmin;
    k_pack_scales(b.sc, b.mn, out.scales);
    memset(out.qh, 0, sizeof out.qh);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            out.qs[32 * c + l] = uint8_t((b.q[64 * c + l] & 15) | (b.q[64 * c + 32 + l] & 15) << 4);
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32; l++) out.qh[l] |= uint8_t((b.q[32 * j + l] >> 4) << j);
}

void quantize_q6_k(const float* x, BlockQ6_K& out, QuantSearch search) {
    float s[16], smax = 0.0f;
    for (int g = 0; g < 16; g++) {
        s[g] = fit_symmetric(x + 16 * g, 16, -32, 31, search);
        smax = std::fabs(s[g]) > smax ? std::fabs(s[g]) : smax;
    }
    float d = fp16_round(smax / 127.0f);
    out.d = f32_to_fp16(d);
    uint8_t q[256];
    for (int g = 0; g < 16; g++) {
        int sc = d > 0.0f ? qround(s[g] / d, -127, 127) : 0;
        out.scales[g] = int8_t(sc);
        float step = d * float(sc);
        for (int i = 0; i < 16; i++)
            q[16 * g + i] = uint8_t(32 + (step != 0.0f ? qround(x[16 * g + i] / step, -32, 31) : 0));
    }
    for (int h = 0; h < 2; h++) {
        const uint8_t* qq = q + 128 * h;
        uint8_t* ql = out.ql + 64 * h;
        uint8_t* qh = out.qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = uint8_t((qq[l] & 15) | (qq[l + 64] & 15) << 4);
            ql[l + 32] = uint8_t((qq[l + 32] & 15) | (qq[l + 96] & 15) << 4);
            qh[l] = uint8_t(qq[l] >> 4 | (qq[l + 32] >> 4) << 2 | (qq[l + 64] >> 4) << 4 | (qq[l + 96] >> 4) << 6);
        }
    }
}

void quantize_q8_0(const float* x, BlockQ8_0& out) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = std::fmax(amax, std::fabs(x[i]));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    out.d = f32_to_fp16(d);
    for (int i = 0; i < 32; i++) out.qs[i] = int8_t(round_away(x[i] * id));  // as llama.cpp
}

void quantize_q4_0(const float* x, BlockQ4_0& out, QuantSearch search) {
    float d = fp16_round(fit_symmetric(x, 32, -8, 7, search));
    out.d = f32_to_fp16(d);
    for (int i = 0; i < 16; i++) {
        int lo = d != 0.0f ? qround(x[i] / d, -8, 7) : 0;
        int hi = d != 0.0f ? qround(x[i + 16] / d, -8, 7) : 0;
        out.qs[i] = uint8_t((lo + 8) | (hi + 8) << 4);
    }
}

// MXFP4 as llama.cpp's reference quantizes it: e = floor(log2(amax)) - 2 +
// 127 (so amax / 2^(e - 127) lies in [4, 8): the top values 6 and 8 x half
// the scale), each value to the nearest table entry (the first on a tie).
void quantize_mxfp4(const float* x, BlockMXFP4& out) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = std::fmax(amax, std::fabs(x[i]));
    out.e = amax > 0.0f ? uint8_t(std::floor(std::log2(amax)) - 2 + 127) : 0;
    const float d = mxfp4_scale(out.e);
    auto nearest = [&](float v) {
        int best = 0;
        float err = std::fabs(mxfp4_value(0) * d - v);
        for (int q = 1; q < 16; q++) {
            const float e = std::fabs(mxfp4_value(q) * d - v);
            if (e < err) best = q, err = e;
        }
        return best;
    };
    for (int i = 0; i < 16; i++) out.qs[i] = uint8_t(nearest(x[i]) | nearest(x[i + 16]) << 4);
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
    assert(n % dtype_info(type).block == 0 && dtype_row_group(type) == 1);
    const uint8_t* s = static_cast<const uint8_t*>(src);
    if (dtype_quantized(type)) {
        for (int64_t g = 0; g < n / 32; g++) quant_group32_row(type, s, g, dst + 32 * g);
        return;
    }
    // A memory map makes no alignment promise: elements are loaded bytewise.
    for (int64_t i = 0; i < n; i++) {
        switch (type) {
        case DType::F32:
            memcpy(dst + i, s + 4 * i, 4);
            break;
        case DType::F16:
            dst[i] = fp16_to_f32(load_u16(s + 2 * i));
            break;
        default:
            dst[i] = bf16_to_f32(load_u16(s + 2 * i));
            break;
        }
    }
}

const void* quant_row_plain(DType type, const void* data, size_t row_bytes, int64_t r, void* scratch) {
    const uint8_t* d = static_cast<const uint8_t*>(data);
    if (dtype_row_group(type) == 1) return d + size_t(r) * row_bytes;
    const uint8_t* group = d + size_t(r / 8) * 8 * row_bytes;
    uint8_t* out = static_cast<uint8_t*>(scratch);
    const size_t bytes = size_t(r8_block_bytes(type));
    for (size_t i = 0; i < row_bytes / bytes; i++) r8_take(type, group + 8 * i * bytes, int(r % 8), out + i * bytes);
    return out;
}

void quant_repack_r8(DType type, const void* src, void* dst, int64_t rows, size_t row_bytes) {
    const int bytes = r8_block_bytes(type);
    assert(dtype_row_group(type) == 8 && rows % 8 == 0 && row_bytes % size_t(bytes) == 0);
    // The inverse of r8_take, its moves worked out once: a run of 2 or 4
    // bytes from j in lane l's block to `at` in the group block, XORed with
    // a byte repeated.
    struct Move {
        uint16_t j, at;
        uint8_t run, flip;
    };
    std::vector<Move> moves[8];
    for (int l = 0; l < 8; l++)
        for (int j = 0; j < bytes; j += r8_run(type, j))
            moves[l].push_back(
                {uint16_t(j), uint16_t(r8_offset(type, l, j)), uint8_t(r8_run(type, j)), r8_flip(type, j)});
    const uint8_t* s = static_cast<const uint8_t*>(src);
    uint8_t* d = static_cast<uint8_t*>(dst);
    const size_t blocks = row_bytes / size_t(bytes);
    // Group block by group block, so the output is written in order.
    for (int64_t g = 0; g < rows / 8; g++)
        for (size_t i = 0; i < blocks; i++) {
            uint8_t* gb = d + size_t(g) * 8 * row_bytes + 8 * i * size_t(bytes);
            for (int l = 0; l < 8; l++) {
                const uint8_t* b = s + size_t(8 * g + l) * row_bytes + i * size_t(bytes);
                for (const Move& mv : moves[l]) {
                    if (mv.run == 4) {
                        uint32_t v;
                        std::memcpy(&v, b + mv.j, 4);
                        v ^= 0x01010101u * mv.flip;
                        std::memcpy(gb + mv.at, &v, 4);
                    } else {
                        uint16_t v;
                        std::memcpy(&v, b + mv.j, 2);
                        v = uint16_t(v ^ 0x0101u * mv.flip);
                        std::memcpy(gb + mv.at, &v, 2);
                    }
                }
            }
        }
}

void mxfp4_from_hf(BlockMXFP4* dst, const uint8_t* blocks, const uint8_t* scales, size_t n_blocks) {
    for (size_t b = 0; b < n_blocks; b++) {
        const uint8_t* src = blocks + b * 16;
        uint8_t nib[32];
        for (int j = 0; j < 16; j++) {
            nib[2 * j] = src[j] & 15;
            nib[2 * j + 1] = src[j] >> 4;
        }
        dst[b].e = scales[b];
        for (int j = 0; j < 16; j++) dst[b].qs[j] = uint8_t(nib[j] | nib[j + 16] << 4);
    }
}

void quantize_row(DType type, const float* src, void* dst, int64_t n, QuantSearch search) {
    assert(n % dtype_info(type).block == 0);
    char* d = static_cast<char*>(dst);
    int block = dtype_info(type).block, bb = dtype_info(type).block_bytes;
    for (int64_t i = 0; i < n / block; i++) {
        const float* x = src + i * block;
        char* p = d + i * bb;
        auto put = [&](const auto& b) { memcpy(p, &b, sizeof b); };
        switch (type) {
        case DType::F32:
            memcpy(p, x, 4);
            break;
        case DType::F16: {
            uint16_t h = f32_to_fp16(*x);
            memcpy(p, &h, 2);
            break;
        }
        case DType::BF16: {
            uint16_t h = f32_to_bf16(*x);
            memcpy(p, &h, 2);
            break;
        }
        case DType::Q8_0: {
            BlockQ8_0 b;
            quantize_q8_0(x, b);
            put(b);
            break;
        }
        case DType::Q4_0: {
            BlockQ4_0 b;
            quantize_q4_0(x, b, search);
            put(b);
            break;
        }
        case DType::Q4_K: {
            BlockQ4_K b;
            quantize_q4_k(x, b, search);
            put(b);
            break;
        }
        case DType::Q5_K: {
            BlockQ5_K b;
            quantize_q5_k(x, b, search);
            put(b);
            break;
        }
        case DType::Q6_K: {
            BlockQ6_K b;
            quantize_q6_k(x, b, search);
            put(b);
            break;
        }
        case DType::MXFP4: {
            BlockMXFP4 b;
            quantize_mxfp4(x, b);
            put(b);
            break;
        }
        case DType::Q4_K_R8:
        case DType::Q6_K_R8:
        case DType::Q8_0_R8:
            std::abort();  // rows in groups: quantize to the plain type, then quant_repack_r8
        case DType::U8:
            std::abort();  // raw bytes, never a weight's type
        }
    }
}

// ---------------------------------------------------------------------------
// Activations.

namespace {

bool uses_x256(DType wtype) {
    wtype = dtype_plain(wtype);
    return wtype == DType::Q4_K || wtype == DType::Q5_K || wtype == DType::Q6_K;
}

// q = round(x / d), d = amax / 127, for n elements; returns d.
float quantize_x_block(const float* x, int8_t* q, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = std::fmax(amax, std::fabs(x[i]));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++) q[i] = int8_t(qround(x[i] * id, -127, 127));
    return d;
}

}  // namespace

size_t quant_x_row_bytes(DType wtype, int k) {
    assert(dtype_quantized(wtype));
    return uses_x256(wtype) ? size_t(k / 256) * sizeof(XBlock256) : size_t(k / 32) * sizeof(XBlock32);
}

void quantize_x_row(DType wtype, const float* x, void* dst, int k) {
    if (uses_x256(wtype)) {
        XBlock256* b = static_cast<XBlock256*>(dst);
        for (int i = 0; i < k / 256; i++) {
            b[i].d = quantize_x_block(x + 256 * i, b[i].q, 256);
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int l = 0; l < 16; l++) s += b[i].q[16 * g + l];
                b[i].bsums[g] = int16_t(s);
            }
        }
    } else {
        XBlock32* b = static_cast<XBlock32*>(dst);
        for (int i = 0; i < k / 32; i++) {
            b[i].d = quantize_x_block(x + 32 * i, b[i].q, 32);
            int s = 0;
            for (int l = 0; l < 32; l++) s += b[i].q[l];
            b[i].ds = b[i].d * float(s);
        }
    }
}

float quant_dot_scalar(DType wtype, const void* wrow, const void* xq, int k) {
    const char* w = static_cast<const char*>(wrow);
    const XBlock32* x32 = static_cast<const XBlock32*>(xq);
    const XBlock256* x256 = static_cast<const XBlock256*>(xq);
    float sum = 0.0f;
    switch (wtype) {
    case DType::Q8_0:
        for (int i = 0; i < k / 32; i++) {
            BlockQ8_0 b;
            memcpy(&b, w + i * sizeof b, sizeof b);
            int s = 0;
            for (int l = 0; l < 32; l++) s += b.qs[l] * x32[i].q[l];
            sum += fp16_to_f32(b.d) * x32[i].d * float(s);
        }
        return sum;
    case DType::Q4_0:
        for (int i = 0; i < k / 32; i++) {
            BlockQ4_0 b;
            memcpy(&b, w + i * sizeof b, sizeof b);
            int s = 0;
            for (int l = 0; l < 16; l++) s += (b.qs[l] & 15) * x32[i].q[l] + (b.qs[l] >> 4) * x32[i].q[l + 16];
            sum += fp16_to_f32(b.d) * (x32[i].d * float(s) - 8.0f * x32[i].ds);
        }
        return sum;
    case DType::MXFP4:
        for (int i = 0; i < k / 32; i++) {
            BlockMXFP4 b;
            memcpy(&b, w + i * sizeof b, sizeof b);
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += mxfp4_value(b.qs[l]) * x32[i].q[l] + mxfp4_value(b.qs[l] >> 4) * x32[i].q[l + 16];
            sum += mxfp4_scale(b.e) * x32[i].d * float(s);
        }
        return sum;
    case DType::Q4_K:
    case DType::Q5_K:
        for (int i = 0; i < k / 256; i++) {
            const XBlock256& xb = x256[i];
            BlockQ5_K b{};  // Q4_K blocks are read into its fields (qh stays zero)
            if (wtype == DType::Q4_K) {
                BlockQ4_K b4;
                memcpy(&b4, w + i * sizeof b4, sizeof b4);
                b.d = b4.d, b.dmin = b4.dmin;
                memcpy(b.scales, b4.scales, 12);
                memcpy(b.qs, b4.qs, 128);
            } else {
                memcpy(&b, w + i * sizeof b, sizeof b);
            }
            uint8_t sc[8], mn[8];
            k_scale_min(b.scales, sc, mn);
            int s = 0, smin = 0;
            for (int j = 0; j < 8; j++) {
                int sj = 0;
                for (int l = 0; l < 32; l++) {
                    int e = 32 * j + l;
                    sj += (k_nibble(b.qs, e) | ((b.qh[l] >> j) & 1) << 4) * xb.q[e];
                }
                s += sc[j] * sj;
                smin += mn[j] * (xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
            }
            sum += xb.d * (fp16_to_f32(b.d) * float(s) - fp16_to_f32(b.dmin) * float(smin));
        }
        return sum;
    case DType::Q6_K:
        for (int i = 0; i < k / 256; i++) {
            const XBlock256& xb = x256[i];
            BlockQ6_K b;
            memcpy(&b, w + i * sizeof b, sizeof b);
            const uint8_t* blk = reinterpret_cast<const uint8_t*>(&b);
            int s = 0;
            for (int g = 0; g < 16; g++) {
                int sg = 0;
                for (int l = 0; l < 16; l++) sg += q6_k_level(blk, 16 * g + l) * xb.q[16 * g + l];
                s += b.scales[g] * (sg - 32 * xb.bsums[g]);
            }
            sum += xb.d * fp16_to_f32(b.d) * float(s);
        }
        return sum;
    default:
        break;
    }
    std::abort();  // float types have no quantized dot
}
