// AVX2 + FMA path: 256-bit registers, bf16 widened by shift, fp32 FMA. For
// every x86-64 CPU since Haswell / Zen 1. Only instantiates kernels_impl.h.
#include "cpu_kernels/kernels_impl.h"
#include "cpu_kernels/quant_impl.h"
#include "cpu_kernels/vec_avx2.h"

namespace {

// Rows path: 1 row for m = 1; 3 rows x 2 tokens otherwise (6 accumulators
// + 6 widened weight vectors + 2 x vectors fit the 16 ymm registers).
// Packed path from m = 32 (measured crossover on Zen 4): 6 x 16 tile (12
// accumulators), 256 steps x 16 columns = 16 KB B micro-panel in L1,
// 256 x 256 fp32 block = 256 KB in L2.
using MatAvx2 = MatF32<VecAvx2, 1, 3, 2, 6, 2, 256, 256>;

KernelTable make_table() {
    KernelTable t{};
    t.isa = Isa::AVX2;
    fill_matmul<MatAvx2>(t, 32, 48);
    fill_vector_ops<VecAvx2>(t);
    fill_quant<DotMadd>(t, 32);
    return t;
}

}  // namespace

const KernelTable& MOE_ISA_SYMBOL(kernel_table_avx2)() {
    static const KernelTable table = make_table();
    return table;
}
