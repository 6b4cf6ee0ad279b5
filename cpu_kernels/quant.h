// Block-quantized weights: the byte layouts of the GGUF types moe-server
// reads (ggml's documented layouts, written here from their description),
// the scalar conversions of a row of any DType to and from fp32, and the
// int8 form activations take for the quantized matmul kernels (quantized
// once per call, then dotted with whole weight blocks in integers). The
// scalar dot products of one weight row with one quantized activation row
// are the reference the ISA paths are tested against. The element levels
// and quant_group32 (a group of 32 weights of any quantized row, to fp32)
// are __host__ __device__: the CUDA kernels decode blocks with the very
// functions the CPU's dequantize_row uses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu_kernels/bf16.h"
#include "cpu_kernels/dtype.h"

// fp16 <-> fp32, scalar. Narrowing rounds to nearest even (as F16C does);
// overflow gives inf, NaN stays NaN. static: see bf16.h.
MOE_HD static inline float fp16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
    if (exp == 0) {
        float f = float(mant) * 0x1p-24f;  // zero or subnormal, exact
        return sign ? -f : f;
    }
    bits = exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112) << 23) | (mant << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t f32_to_fp16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
    if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: inf
    if (a < 0x38800000u) {                        // below 2^-14: a subnormal, in units of 2^-24
        float v;
        memcpy(&v, &a, sizeof v);
        // Adding 2^23 rounds to an integer, nearest even (exact otherwise).
        return sign | uint16_t(int((v * 0x1p24f + 0x1p23f) - 0x1p23f));
    }
    uint32_t r = a - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | uint16_t(r >> 13);
}

// ---------------------------------------------------------------------------
// Weight blocks. Every field is little-endian; blocks are packed (no
// padding) and carry no alignment promise in a memory map, so code reads
// their fp16 fields with memcpy or unaligned vector loads.

constexpr int QK32 = 32;    // Q8_0, Q4_0
constexpr int QK256 = 256;  // the K types

// Q8_0: x[i] = d * qs[i].
struct BlockQ8_0 {
    uint16_t d;  // fp16
    int8_t qs[32];
};

// Q4_0: x[i] = d * (q[i] - 8), q[i] (0..15) the low nibble of qs[i] for
// i < 16, the high nibble of qs[i - 16] otherwise.
struct BlockQ4_0 {
    uint16_t d;  // fp16
    uint8_t qs[16];
};

// Q4_K: 8 sub-blocks of 32; x = d * sc[j] * q - dmin * mn[j] with 6-bit
// sc / mn (see k_scale_min) and 4-bit q. Elements 64c .. 64c+31 (sub-block
// 2c) are the low nibbles of qs[32c .. 32c+31], elements 64c+32 .. 64c+63
// (sub-block 2c+1) their high nibbles.
struct BlockQ4_K {
    uint16_t d, dmin;  // fp16
    uint8_t scales[12];
    uint8_t qs[128];
};

// Q5_K: Q4_K's layout plus a fifth bit: bit j of qh[l] is the high bit
// (worth 16) of element 32j + l, so q is 0..31.
struct BlockQ5_K {
    uint16_t d, dmin;  // fp16
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};

// Q6_K: 16 groups of 16; x = d * sc[g] * (q - 32), q 6 bits (0..63). In each
// half h (elements 128h ..) with ql = ql + 64h, qh = qh + 32h, for l < 32:
// element l   = ql[l] & 15      | (qh[l] & 3) << 4
// element 32+l = ql[l+32] & 15  | (qh[l] >> 2 & 3) << 4
// element 64+l = ql[l] >> 4     | (qh[l] >> 4 & 3) << 4
// element 96+l = ql[l+32] >> 4  | (qh[l] >> 6 & 3) << 4
struct BlockQ6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;  // fp16
};

// MXFP4 (OCP microscaling, gpt-oss's experts): 32 FP4 (e2m1) values under
// one power-of-two scale. x[i] = MXFP4_VALUES[q[i]] * 2^(e - 128) (the table
// holds twice the e2m1 values, so the scale is halved: ggml's convention),
// q[i] the low nibble of qs[i] for i < 16, the high nibble of qs[i - 16]
// otherwise.
struct BlockMXFP4 {
    uint8_t e;  // e8m0
    uint8_t qs[16];
};
MOE_HD static inline int8_t mxfp4_value(int q) {
    constexpr int8_t VALUES[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    return VALUES[q & 15];
}
// 2^(e - 128) as fp32, subnormal for e < 2 (e = 255 would be NaN in the
// format; files do not carry it and it reads as 2^127).
MOE_HD static inline float mxfp4_scale(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// The 6-bit scales and mins of a Q4_K / Q5_K block, unpacked from its 12
// bytes: sub-blocks 0..3 are the low 6 bits of bytes 0..3 (scales) and 4..7
// (mins); sub-block 4 + j takes its low 4 bits from byte 8 + j (scale: low
// nibble, min: high nibble) and its high 2 bits from the top bits of byte j
// (scale) and 4 + j (min). Done on 32-bit words: four sub-blocks at once;
// k_scale_min64 leaves them as the bytes of two words (kept in registers).
// k_scale_min64_words takes the 12 bytes as their three little-endian words
// (an _R8 group block holds them apart).
MOE_HD static inline void k_scale_min64_words(uint32_t a, uint32_t b, uint32_t c, uint64_t& sc, uint64_t& mn) {
    uint32_t sc_lo = a & 0x3f3f3f3fu, mn_lo = b & 0x3f3f3f3fu;
    uint32_t sc_hi = (c & 0x0f0f0f0fu) | ((a >> 6) & 0x03030303u) << 4;
    uint32_t mn_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 6) & 0x03030303u) << 4;
    sc = sc_lo | uint64_t(sc_hi) << 32;  // byte j: sub-block j (little-endian)
    mn = mn_lo | uint64_t(mn_hi) << 32;
}
MOE_HD static inline void k_scale_min64(const uint8_t s[12], uint64_t& sc, uint64_t& mn) {
    uint32_t a, b, c;
    memcpy(&a, s, 4);
    memcpy(&b, s + 4, 4);
    memcpy(&c, s + 8, 4);
    k_scale_min64_words(a, b, c, sc, mn);
}

MOE_HD static inline void k_scale_min(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    uint64_t sc64, mn64;
    k_scale_min64(s, sc64, mn64);
    for (int j = 0; j < 8; j++) sc[j] = uint8_t(sc64 >> (8 * j)), mn[j] = uint8_t(mn64 >> (8 * j));
}

// The levels of element i of a block, from its bytes (b: the block's first
// byte; any alignment). Q4_K / Q5_K: 0..15 / 0..31 (k_nibble reads qs);
// Q6_K: 0..63.
MOE_HD static inline uint16_t load_le16(const uint8_t* p) {
    return uint16_t(p[0] | p[1] << 8);
}
MOE_HD static inline int k_nibble(const uint8_t* qs, int i) {
    const int c = i / 64, l = i % 32;
    return i % 64 < 32 ? qs[32 * c + l] & 15 : qs[32 * c + l] >> 4;
}
MOE_HD static inline int q5_k_level(const uint8_t* b, int i) {
    return k_nibble(b + offsetof(BlockQ5_K, qs), i) | ((b[offsetof(BlockQ5_K, qh) + i % 32] >> (i / 32)) & 1) << 4;
}
MOE_HD static inline int q6_k_level(const uint8_t* b, int i) {
    const int h = i / 128, r = i % 128, part = r / 32, l = r % 32;
    const uint8_t* ql = b + offsetof(BlockQ6_K, ql) + 64 * h;
    const uint8_t* qh = b + offsetof(BlockQ6_K, qh) + 32 * h;
    int low = part & 1 ? ql[l + 32] : ql[l];
    low = part < 2 ? low & 15 : low >> 4;
    return low | ((qh[l] >> (2 * part)) & 3) << 4;
}

// The _R8 types (memory only, dtype.h): the blocks of 8 consecutive rows
// (lanes 0..7 of a row group) at one block index, interleaved in 4-byte
// words into one group block, so that a 256-bit vector of it holds 4
// elements of each of the 8 rows and a kernel's int32 lanes are rows (one
// scale per lane). Same bytes as the 8 blocks (Q8_0_R8's levels with their
// top bit flipped). A group's blocks follow each other: block i of group g
// is at data + 8 g row_bytes + 8 i block_bytes.
// Q8_0_R8, its levels stored as unsigned bytes w + 128 (w ^ 0x80), the
// operand vpdpbusd multiplies unsigned:
struct BlockQ8_0x8 {
    uint16_t d[8];      // lane l's d (fp16)
    uint8_t qs[8][32];  // qs[k][4l + i] = lane l's qs[4k + i] ^ 0x80
};
// Q4_K_R8:
struct BlockQ4_Kx8 {
    uint16_t d[8], dmin[8];  // lane l's d and dmin (fp16)
    uint32_t scales[3][8];   // scales[w][l]: lane l's scale bytes 4w .. 4w+3 (k_scale_min's a, b, c)
    uint8_t qs[32][32];      // qs[8c + k][4l + i] = lane l's qs[32c + 4k + i]
};
// Q6_K_R8, its levels in the order the kernel reads them: for half h of
// the block and word k, the words of ql that hold sub-blocks 4h, 4h+2 and
// 4h+1, 4h+3, then the word of qh that completes all four:
struct BlockQ6_Kx8 {
    uint16_t d[8];          // lane l's d (fp16)
    uint32_t scales[4][8];  // scales[w][l]: lane l's int8 scales 4w .. 4w+3
    // q[8h + k][0][4l + i] = lane l's ql[64h + 4k + i], [1]: ql[64h + 32 + 4k + i], [2]: qh[32h + 4k + i]
    uint8_t q[16][3][32];
};
static_assert(sizeof(BlockQ4_Kx8) == 8 * sizeof(BlockQ4_K) && sizeof(BlockQ6_Kx8) == 8 * sizeof(BlockQ6_K) &&
              sizeof(BlockQ8_0x8) == 8 * sizeof(BlockQ8_0));
// Where byte j of lane l's block lies in its group block.
MOE_HD static inline int q8_0_r8_offset(int l, int j) {
    return j < 2 ? 2 * l + j : 16 + 32 * ((j - 2) / 4) + 4 * l + (j - 2) % 4;
}
MOE_HD static inline int q4_k_r8_offset(int l, int j) {
    if (j < 4) return 2 * (8 * (j / 2) + l) + j % 2;
    if (j < 16) return 32 + 4 * (8 * ((j - 4) / 4) + l) + (j - 4) % 4;
    const int q = j - 16;
    return 128 + 32 * (8 * (q / 32) + q % 32 / 4) + 4 * l + q % 4;
}
MOE_HD static inline int q6_k_r8_offset(int l, int j) {
    if (j >= 208) return 2 * l + (j - 208);
    if (j >= 192) return 16 + 4 * (8 * ((j - 192) / 4) + l) + j % 4;
    // ql word w: half w / 16, k w % 8, part (w / 8) % 2; qh word w: half w / 8, k w % 8.
    const int w = j < 128 ? j / 4 : (j - 128) / 4;
    const int word = j < 128 ? 3 * (8 * (w / 16) + w % 8) + (w / 8) % 2 : 3 * w + 2;
    return 144 + 32 * word + 4 * l + j % 4;
}
// Whether a type is one of the _R8 ones (dtype.h's row_group 8; this form
// also compiles for the device), and the type of one of its rows.
MOE_HD static inline bool r8_type(DType type) {
    return type == DType::Q8_0_R8 || type == DType::Q4_K_R8 || type == DType::Q6_K_R8;
}
MOE_HD static inline DType r8_plain(DType type) {
    return type == DType::Q8_0_R8 ? DType::Q8_0 : type == DType::Q4_K_R8 ? DType::Q4_K : DType::Q6_K;
}
// An _R8 type's plain block bytes, and where byte j of lane l's block lies in a group block.
MOE_HD static inline int r8_block_bytes(DType type) {
    return type == DType::Q8_0_R8   ? int(sizeof(BlockQ8_0))
           : type == DType::Q4_K_R8 ? int(sizeof(BlockQ4_K))
                                    : int(sizeof(BlockQ6_K));
}
MOE_HD static inline int r8_offset(DType type, int l, int j) {
    return type == DType::Q8_0_R8   ? q8_0_r8_offset(l, j)
           : type == DType::Q4_K_R8 ? q4_k_r8_offset(l, j)
                                    : q6_k_r8_offset(l, j);
}
// Bytes from j on that stay together: a word, or an fp16 (the d of Q8_0 and
// Q6_K, Q4_K's d and dmin).
MOE_HD static inline int r8_run(DType type, int j) {
    return (type == DType::Q8_0_R8 ? j < 2 : type == DType::Q4_K_R8 ? j < 4 : j >= 208) ? 2 : 4;
}
// What byte j is XORed with in the group block: Q8_0_R8's levels 0x80.
MOE_HD static inline uint8_t r8_flip(DType type, int j) {
    return type == DType::Q8_0_R8 && j >= 2 ? 0x80 : 0;
}
// Lane l's plain block b out of group block gb.
MOE_HD static inline void r8_take(DType type, const uint8_t* gb, int l, uint8_t* b) {
    for (int j = 0; j < r8_block_bytes(type); j += r8_run(type, j))
        for (int i = 0; i < r8_run(type, j); i++) b[j + i] = gb[r8_offset(type, l, j) + i] ^ r8_flip(type, j);
}

// y (32 fp32) = elements [32 g, 32 g + 32) of the row at `row` of a type
// without row groups; any alignment.
MOE_HD static inline void quant_group32_row(DType type, const uint8_t* row, int64_t g, float* y) {
    switch (type) {
    case DType::Q8_0: {
        const uint8_t* b = row + g * int64_t(sizeof(BlockQ8_0));
        const float d = fp16_to_f32(load_le16(b));
        for (int i = 0; i < 32; i++) y[i] = d * float(int8_t(b[2 + i]));
        return;
    }
    case DType::Q4_0: {
        const uint8_t* b = row + g * int64_t(sizeof(BlockQ4_0));
        const float d = fp16_to_f32(load_le16(b));
        for (int i = 0; i < 16; i++) {
            y[i] = d * float((b[2 + i] & 15) - 8);
            y[i + 16] = d * float((b[2 + i] >> 4) - 8);
        }
        return;
    }
    case DType::MXFP4: {
        const uint8_t* b = row + g * int64_t(sizeof(BlockMXFP4));
        const float d = mxfp4_scale(b[0]);
        for (int i = 0; i < 16; i++) {
            y[i] = d * float(mxfp4_value(b[1 + i]));
            y[i + 16] = d * float(mxfp4_value(b[1 + i] >> 4));
        }
        return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
        const bool q5 = type == DType::Q5_K;
        const uint8_t* b = row + g / 8 * int64_t(q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
        const int j = int(g % 8);
        uint64_t sc, mn;  // in registers: a device thread indexes them by j
        k_scale_min64(b + offsetof(BlockQ4_K, scales), sc, mn);
        const float d = fp16_to_f32(load_le16(b)) * float(uint8_t(sc >> (8 * j))),
                    m = fp16_to_f32(load_le16(b + 2)) * float(uint8_t(mn >> (8 * j)));
        const uint8_t* qs = b + (q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
        for (int l = 0; l < 32; l++) {
            const int e = 32 * j + l;
            y[l] = d * float(q5 ? q5_k_level(b, e) : k_nibble(qs, e)) - m;
        }
        return;
    }
    case DType::Q6_K: {
        const uint8_t* b = row + g / 8 * int64_t(sizeof(BlockQ6_K));
        const int j = int(g % 8);
        const float d = fp16_to_f32(load_le16(b + offsetof(BlockQ6_K, d)));
        const int8_t* scales = reinterpret_cast<const int8_t*>(b + offsetof(BlockQ6_K, scales));
        for (int l = 0; l < 32; l++) {
            const int e = 32 * j + l;
            y[l] = d * float(scales[e / 16]) * float(q6_k_level(b, e) - 32);
        }
        return;
    }
    default:
        return;  // float types are not block-quantized
    }
}
// y (32 fp32) = group j (0..7; 0 for Q8_0_R8) of lane l's block, read in
// place out of the group block gb of an _R8 type: the bytes r8_take would
// gather (the struct comments above say where each lies), the arithmetic of
// quant_group32_row, so the values are the same bit for bit. Only the bytes
// of that group are read: a GPU thread decodes one group.
MOE_HD static inline void quant_group32_r8(DType type, const uint8_t* gb, int l, int j, float* y) {
    uint32_t w;
    switch (type) {
    case DType::Q8_0_R8: {
        const float d = fp16_to_f32(load_le16(gb + 2 * l));
        for (int k = 0; k < 8; k++) {
            memcpy(&w, gb + 16 + 32 * k + 4 * l, 4);
            w ^= 0x80808080u;
            for (int i = 0; i < 4; i++) y[4 * k + i] = d * float(int8_t(uint8_t(w >> (8 * i))));
        }
        return;
    }
    case DType::Q4_K_R8: {
        uint32_t a, b, c;
        memcpy(&a, gb + 32 + 4 * l, 4);
        memcpy(&b, gb + 64 + 4 * l, 4);
        memcpy(&c, gb + 96 + 4 * l, 4);
        uint64_t sc, mn;
        k_scale_min64_words(a, b, c, sc, mn);
        const float d = fp16_to_f32(load_le16(gb + 2 * l)) * float(uint8_t(sc >> (8 * j))),
                    m = fp16_to_f32(load_le16(gb + 16 + 2 * l)) * float(uint8_t(mn >> (8 * j)));
        // Sub-block j: the low (j even) or high nibbles of qs[32 (j / 2) ..], word k of them at row 8 (j / 2) + k.
        const int shift = j % 2 ? 4 : 0;
        for (int k = 0; k < 8; k++) {
            memcpy(&w, gb + 128 + 32 * (8 * (j / 2) + k) + 4 * l, 4);
            for (int i = 0; i < 4; i++) y[4 * k + i] = d * float((w >> (8 * i + shift)) & 15) - m;
        }
        return;
    }
    case DType::Q6_K_R8: {
        const float d = fp16_to_f32(load_le16(gb + 2 * l));
        // Group j: half h = j / 4, part p = j % 4 (q6_k_level): ql word k of
        // q[8h + k][p % 2], qh word k of q[8h + k][2]; scales 2j and 2j + 1.
        const int h = j / 4, p = j % 4;
        const int8_t sc[2] = {int8_t(gb[16 + 32 * (2 * j / 4) + 4 * l + (2 * j) % 4]),
                              int8_t(gb[16 + 32 * ((2 * j + 1) / 4) + 4 * l + (2 * j + 1) % 4])};
        for (int k = 0; k < 8; k++) {
            uint32_t ql, qh;
            memcpy(&ql, gb + 144 + 32 * (3 * (8 * h + k) + p % 2) + 4 * l, 4);
            memcpy(&qh, gb + 144 + 32 * (3 * (8 * h + k) + 2) + 4 * l, 4);
            for (int i = 0; i < 4; i++) {
                const int lo = int(ql >> (8 * i)) & 0xff, hi = int(qh >> (8 * i)) & 0xff;
                const int level = (p < 2 ? lo & 15 : lo >> 4) | ((hi >> (2 * p)) & 3) << 4;
                y[4 * k + i] = d * float(sc[(4 * k + i) / 16]) * float(level - 32);
            }
        }
        return;
    }
    default:
        return;
    }
}

// y (32 fp32) = elements [32 g, 32 g + 32) of row r of a block-quantized
// matrix of `type` at data, rows row_bytes apart (row groups for the _R8
// types: lane r % 8's group read in place, quant_group32_r8); any
// alignment. Every quantized type's dequantization, CPU and GPU alike.
MOE_HD static inline void quant_group32(DType type, const uint8_t* data, size_t row_bytes, int64_t r, int64_t g,
                                        float* y) {
    if (!r8_type(type)) return quant_group32_row(type, data + size_t(r) * row_bytes, g, y);
    const int bytes = r8_block_bytes(type);
    const int64_t per_block = r8_plain(type) == DType::Q8_0 ? 1 : 8;  // groups of 32 in one block
    quant_group32_r8(type, data + size_t(r / 8) * 8 * row_bytes + size_t(g / per_block) * 8 * bytes, int(r % 8),
                     int(g % per_block), y);
}

// ---------------------------------------------------------------------------
// Rows of any DType. n must be whole blocks of the type (dtype_row_bytes);
// src / dst carry no alignment promise.

// dst (n fp32) = the row at src (a type without row groups).
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
// Row r of a matrix of `type` (rows row_bytes apart) in dtype_plain(type):
// the row itself, or for an _R8 type its blocks taken out of their group
// into scratch (row_bytes), which is returned.
const void* quant_row_plain(DType type, const void* data, size_t row_bytes, int64_t r, void* scratch);
// Rows of dtype_plain(type) (rows a multiple of 8, row_bytes apart) -> the
// same matrix as `type`, an _R8 type, at dst (rows * row_bytes bytes, not
// overlapping src).
void quant_repack_r8(DType type, const void* src, void* dst, int64_t rows, size_t row_bytes);

// How the block-quantized types other than Q8_0 choose each block's scale
// (and min): LEAST_SQUARES tries 20-odd candidates around the block's range
// and keeps the least squared error; RANGE takes the range's own scale (one
// candidate, refitted), several times faster and a little less accurate:
// for the large synthetic files of speed benchmarks (`quantize
// --fast-scales`), whose values nobody reads.
enum class QuantSearch { LEAST_SQUARES, RANGE };

// The row at dst = src (n fp32) in `type`. Float types round to nearest
// even. Q8_0: d = amax / 127 as fp16, q = round(x * (1 / d)) (llama.cpp's
// reference rounding, so its files are reproduced byte for byte). The
// other types choose each block's scale (and min) as `search` says, then
// quantize the per-block scales.
void quantize_row(DType type, const float* src, void* dst, int64_t n,
                  QuantSearch search = QuantSearch::LEAST_SQUARES);

// n_blocks MXFP4 blocks from a Hugging Face checkpoint's pair (gpt-oss's
// `*_blocks` / `*_scales`, as transformers' convert_moe_packed_tensors
// reads them): blocks (n_blocks, 16) bytes whose byte j holds element 2j in
// its low nibble and 2j + 1 in its high one; scales (n_blocks) e8m0 bytes,
// 2^(s - 127) times the e2m1 value. Into BlockMXFP4 (elements 0-15 in the
// low nibbles, 16-31 in the high ones; the same scale byte, the table
// doubled under a halved scale): the same values, no rounding.
void mxfp4_from_hf(BlockMXFP4* dst, const uint8_t* blocks, const uint8_t* scales, size_t n_blocks);

// ---------------------------------------------------------------------------
// Activations for the quantized kernels: rows of int8 blocks with an fp32
// scale, quantized once per call (q = round(x / d), d = amax / 127).
// Q8_0 / Q4_0 weights pair with XBlock32; the K types with XBlock256, whose
// sums of 16 let the kernels apply Q4_K/Q5_K mins and Q6_K's -32 offset
// without touching the elements again.

struct XBlock32 {
    float d;
    float ds;  // d * sum(q)
    int8_t q[32];
};

struct XBlock256 {
    float d;
    int16_t bsums[16];  // sums of q over groups of 16
    int8_t q[256];
};

// Bytes of one quantized activation row of k (whole blocks of wtype).
size_t quant_x_row_bytes(DType wtype, int k);
// One row: dst = the quantized form of x (k) that wtype's kernels read.
void quantize_x_row(DType wtype, const float* x, void* dst, int k);

// The scalar dot product of one weight row of wtype (k elements) with one
// quantized activation row: integer block sums, scaled in fp32. The
// reference of every ISA path's quantized kernel.
float quant_dot_scalar(DType wtype, const void* wrow, const void* xq, int k);
