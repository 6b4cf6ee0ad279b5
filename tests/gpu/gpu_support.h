// Helpers of the gpu-labelled tests. A test starts with GPU_TEST_OR_SKIP():
// where no CUDA device exists it prints "gpu: skipped: <why>" and returns,
// and ctest (SKIP_REGULAR_EXPRESSION, tests/gpu.cmake) reports it skipped.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

// Empty when a CUDA device can be used; else why not.
std::string gpu_unavailable_reason();
// Free memory of device 0 now, in bytes.
size_t gpu_free_bytes();

#define GPU_TEST_OR_SKIP()                                                     \
    do {                                                                       \
        std::string why_ = gpu_unavailable_reason();                           \
        if (!why_.empty()) {                                                   \
            std::printf("gpu: skipped: %s\n", why_.c_str());                   \
            return;                                                            \
        }                                                                      \
    } while (0)
