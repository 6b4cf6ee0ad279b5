// CUDA_CHECK / CUBLAS_CHECK: every CUDA and cuBLAS call goes through one of
// these; a failure throws with the call, file and line. Used only in .cu
// files and CUDA-only sources of gpu_kernels/.
#pragma once
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                                                 \
    do {                                                                                                 \
        cudaError_t err_ = (call);                                                                       \
        if (err_ != cudaSuccess)                                                                         \
            throw std::runtime_error(std::string(#call) + " failed at " + __FILE__ + ":" +               \
                                     std::to_string(__LINE__) + ": " + cudaGetErrorString(err_));        \
    } while (0)
