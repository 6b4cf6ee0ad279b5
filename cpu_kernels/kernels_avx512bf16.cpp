// AVX512_BF16 path: activations are rounded to bf16 once per call and every
// multiply-add is a vdpbf16ps (32 bf16 products into 16 fp32 lanes); the
// fp32 helpers are the AVX-512 F ones; quantized weights use AVX512-VNNI
// (vpdpbusd), which every AVX512_BF16 CPU has. For Cooper Lake, Sapphire Rapids and
// later, Zen 4 and later. Compiled a second time against SIMDe (MOE_SIMDE)
// for the tests.
#include <cstdint>

#include "cpu_kernels/kernels_impl.h"
#include "cpu_kernels/quant_impl.h"
#include "cpu_kernels/vec_avx512.h"

namespace {

__m512bh as_bh(__m512i v) {
#if defined(MOE_SIMDE)
    __m512bh r;
    memcpy(&r, &v, sizeof r);
    return r;
#else
    return (__m512bh)v;
#endif
}

// The bf16-pair policy. Rows path: W rows and bf16 x rows are read as they
// are (pairs of consecutive k are what vdpbf16ps multiplies). Packed path:
// x as 32-bit bf16 pairs, W packed into 32-bit pairs per column.
struct MatBf16 {
    using V = VecAvx512;
    using F = __m512;
    static constexpr int W = 16;
    // Rows path: 1 row for m = 1, 4 rows x 4 tokens otherwise (16
    // accumulators). Packed path from m = 32: 12 x 32 tile (24
    // accumulators), 128 pair steps x 32 columns = 16 KB B micro-panel.
    static constexpr int R1 = 1, RM_R = 4, RM_M = 4;
    static constexpr int MR = 12, NRV = 2, KC = 128, NC = 256;

    using X = bf16;
    static constexpr int KS = 32;
    using Wv = __m512i;
    using Xv = __m512i;
    static Wv load_w(const bf16* p) { return _mm512_loadu_si512(p); }
    static Xv load_x(const bf16* p) { return _mm512_loadu_si512(p); }
    static F madd(F acc, Wv w, Xv x) { return _mm512_dpbf16_ps(acc, as_bh(w), as_bh(x)); }
    static float tail(const bf16* w, const bf16* x, int n) {
        float s = 0.0f;
        for (int j = 0; j < n; j++) s += bf16_to_f32(w[j]) * bf16_to_f32(x[j]);
        return s;
    }
    // Rows padded to an even length, so that the packed path reads whole pairs.
    static int x_stride(int k) { return (k + 1) & ~1; }
    static void prepare_row(bf16* xp, const float* x, int k, int c0, int c1) {
        int j = c0;
        for (; j + W <= c1; j += W) V::store_bf16(xp + j, V::load(x + j));
        for (; j < c1; j++) xp[j] = f32_to_bf16(x[j]);
        if (c1 == k && (k & 1)) xp[k] = 0;
    }

    using A = uint32_t;
    using B = uint32_t;
    using Av = __m512i;
    using Bv = __m512i;
    static constexpr bool X_PREPARED = true;
    static int steps(int k) { return (k + 1) / 2; }
    static Av bcast_a(const uint32_t* p) { return _mm512_set1_epi32(int(*p)); }
    static Bv load_b(const uint32_t* p) { return _mm512_loadu_si512(p); }
    static F madd_ab(F acc, Av a, Bv b) { return _mm512_dpbf16_ps(acc, as_bh(a), as_bh(b)); }
    static int full_steps8(int k, int s0, int kc) { return imin(kc, k / 2 - s0); }
    static __m256 load_row8(const bf16* wrow, int s) { return _mm256_loadu_ps(reinterpret_cast<const float*>(wrow + 2 * s)); }
    static uint32_t pack_elem(const bf16* wrow, int s, int k) {
        uint32_t lo = wrow[2 * s], hi = 2 * s + 1 < k ? wrow[2 * s + 1] : 0;
        return lo | hi << 16;
    }
    static void pack_b(uint32_t* dst, const bf16* w, int n, int k, int n0, int nc, int s0, int kc) {
        pack_b_blocks<MatBf16>(dst, w, n, k, n0, nc, s0, kc);
    }
};

KernelTable make_table() {
    KernelTable t{};
    t.isa = Isa::AVX512BF16;
    // The FFN's rows path beats our packed one below 128, where oneDNN takes over.
    fill_matmul<MatBf16>(t, 32, 128);
    fill_vector_ops<VecAvx512>(t);
    fill_quant<DotVnni>(t, 32);
    return t;
}

}  // namespace

const KernelTable& MOE_ISA_SYMBOL(kernel_table_avx512bf16)() {
    static const KernelTable table = make_table();
    return table;
}
