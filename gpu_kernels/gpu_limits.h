// Sizes the CUDA kernels and the code that budgets their memory agree on:
// plain constants, includable in every build (the budget arithmetic of
// engine/devices/device_setup.cpp runs without CUDA too).
#pragma once
#include <cstddef>

// Below this many rows of x, block-quantized W is read in place by a GEMV
// kernel (gpu_matvec_quant); from it on, W is dequantized to bf16 piece by
// piece for the cuBLAS GEMM, which then costs about what a bf16 W costs.
constexpr int GPU_QUANT_GEMV_MAX_M = 8;

// Elements of the bf16 scratch a piece of block-quantized W is dequantized
// into (32 MiB): a Mixtral-8x7B expert matrix takes four pieces.
constexpr size_t GPU_DEQUANT_PIECE_ELEMS = size_t(16) << 20;
