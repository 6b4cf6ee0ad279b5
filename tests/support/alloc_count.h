// Counts every global allocation of the test_unit binary (the replaceable
// global operator new, defined in alloc_count.cpp), so a test can check that
// a hot path allocates nothing, and their bytes (live now, and the most
// live at once since the last reset), so a test can check what a hostile
// input costs in memory.
#pragma once

long global_allocation_count();
long long global_live_bytes();
long long global_peak_bytes();
// The peak starts again from the bytes live now.
void global_peak_reset();
