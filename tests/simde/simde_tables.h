// The kernel tables of the SIMDe builds (tests/simde/kernels_*_simde.cpp) and
// the list of every table a test should compare with the scalar reference.
#pragma once
#include <string>
#include <vector>

#include "cpu_kernels/isa.h"

const KernelTable& kernel_table_avx2_simde();
const KernelTable& kernel_table_avx512_simde();
const KernelTable& kernel_table_avx512bf16_simde();

struct NamedTable {
    std::string name;
    const KernelTable* table;
};

// Native paths this CPU runs (a skipped one is reported with WARN), then the
// three SIMDe builds, always.
std::vector<NamedTable> tables_under_test();
