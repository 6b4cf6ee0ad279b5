// Intrinsics for the ISA translation units (kernels_avx2.cpp, kernels_avx512.cpp,
// kernels_avx512bf16.cpp) and nothing else. Normally this is <immintrin.h>; when
// MOE_SIMDE is defined (the test build), SIMDe with native aliases stands in, so
// the same AVX-512 source runs, slowly, on any CPU and is checked against the
// scalar path. MOE_ISA_SYMBOL gives the one exported name of such a TU (its
// table getter) a suffix in the SIMDe build, so both builds link side by side.
// Must not be included by code that runs on every CPU.
#pragma once

#if defined(MOE_SIMDE)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#if !defined(_MM_FROUND_NO_EXC)
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif
#define MOE_ISA_SYMBOL(name) name##_simde
#else
// GCC 12 reports its own _mm512_undefined_*() idiom (`__m512 __Y = __Y;`) as
// uninitialised once inlined; the header lines are exempted, nothing else.
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#define MOE_ISA_SYMBOL(name) name
#endif
