// The avx2 kernel table compiled against SIMDe for baseline x86-64, so its
// correctness is tested on CPUs without that instruction set. Exports
// kernel_table_avx2_simde(); holds no code of its own.
#define MOE_SIMDE 1
#include "cpu_kernels/kernels_avx2.cpp"
