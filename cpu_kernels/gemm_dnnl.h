// oneDNN's bf16 matmul as an alternative packed path, used where this oneDNN
// has a native bf16 implementation for the running CPU (avx512_core_bf16 or
// AMX brgemm) and it measured faster than our own packed kernel. Internal to
// cpu_kernels (kernels.cpp chooses); builds to "unavailable" without oneDNN.
#pragma once
#include "cpu_kernels/bf16.h"

// True when built with oneDNN and its bf16 matmul on this CPU is a native
// brgemm implementation (checked once; a reference or emulated one is refused).
bool dnnl_bf16_native();

// Same contract as KernelTable::matmul_packed for the AVX512_BF16 path: x is
// the prepared bf16 activations (rows (k + 1) & ~1 apart); y[i, c] for all
// i < m and columns c in [c0, c1). Runs single-threaded in the calling thread
// (the caller's pool splits the columns); primitives are cached per thread
// and shape.
void dnnl_matmul_bf16_cols(float* y, const void* x, const bf16* w, int m, int n, int k, int c0, int c1);
