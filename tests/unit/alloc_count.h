// Counts every global allocation of the test_unit binary (the replaceable
// global operator new, defined in alloc_count.cpp), so a test can check that
// a hot path allocates nothing.
#pragma once

long global_allocation_count();
