// Instruction-set paths and the one place that reads CPUID. The active path
// is chosen once at start-up (detect, or --cpu-isa / MOE_CPU_ISA) and every
// kernel entry point dispatches through the table of that path.
#pragma once
#include <optional>
#include <string_view>

#include "cpu_kernels/bf16.h"

enum class Isa { SCALAR, AVX2, AVX512, AVX512BF16 };

// The best path this CPU runs (CPUID + OS support for the register state).
Isa isa_detect();
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);
std::optional<Isa> isa_parse(std::string_view name);

// Selects the active path; returns false (and changes nothing) when the CPU
// cannot run it. Without a call the active path is MOE_CPU_ISA if set and
// supported, else isa_detect().
bool isa_select(Isa isa);
Isa isa_active();

// Per-ISA inner kernels. Each ISA translation unit fills one table; the
// public functions in kernels.h split work across threads and call these.
struct KernelTable {
    // y[i, r] = x[i, :] . W[r, :] for i < m and rows r in [r0, r1); y is (m, n).
    void (*matmul_bf16_rows)(float* y, const float* x, const bf16* w, int m, int n, int k, int r0, int r1);
    float (*dot_f32)(const float* a, const float* b, int n);
    // y (n,) += a * x
    void (*axpy_f32)(float* y, float a, const float* x, int n);
};

const KernelTable& kernel_table(Isa isa);  // only for paths built into this binary
const KernelTable& kernel_table_scalar();
