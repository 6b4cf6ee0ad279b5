// AVX-512 F path (no BF16 extension): 512-bit registers, bf16 widened by
// shift, fp32 FMA. For Skylake-SP .. Ice Lake and Zen 4 without the BF16
// path selected. Only instantiates kernels_impl.h. Compiled a second time
// against SIMDe (MOE_SIMDE) for the tests.
#include <climits>

#include "cpu_kernels/kernels_impl.h"
#include "cpu_kernels/quant_impl.h"
#include "cpu_kernels/vec_avx512.h"

namespace {

// Rows path: 1 row for m = 1, 4 rows x 4 tokens otherwise (16 accumulators,
// 8 widened weight vectors, 2 x vectors of the 32 zmm registers); it matches
// the packed path up to m = 256 on mixtral-mini shapes, so the packed path
// starts at m = 128. Packed: 12 x 32 tile (24 accumulators), 128 steps x 32
// columns = 16 KB B micro-panel in L1, 128 x 256 fp32 block = 128 KB in L2.
using MatAvx512 = MatF32<VecAvx512, 1, 4, 4, 12, 2, 128, 256>;

KernelTable make_table() {
    KernelTable t{};
    t.isa = Isa::AVX512;
    // The FFN's rows path beat its packed path at every m up to 384.
    fill_matmul<MatAvx512>(t, 128, INT_MAX);
    fill_vector_ops<VecAvx512>(t);
    fill_quant<DotMadd>(t, 32);
    return t;
}

}  // namespace

const KernelTable& MOE_ISA_SYMBOL(kernel_table_avx512)() {
    static const KernelTable table = make_table();
    return table;
}
