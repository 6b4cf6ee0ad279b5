// CUDA_CHECK / CUBLAS_CHECK: every CUDA and cuBLAS call goes through one of
// these; a failure throws GpuError (gpu_runtime.h) with the call, file and
// line and the library's own words. CUDA_LAUNCH_CHECK() follows every kernel
// launch. Used only in gpu_kernels' CUDA sources.
#pragma once
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "gpu_kernels/gpu_runtime.h"

#define MOE_GPU_FAIL(call, what) \
    throw GpuError(std::string(call) + " failed at " + __FILE__ + ":" + std::to_string(__LINE__) + ": " + (what))

#define CUDA_CHECK(call)                                                     \
    do {                                                                     \
        cudaError_t err_ = (call);                                           \
        if (err_ != cudaSuccess) MOE_GPU_FAIL(#call, cudaGetErrorString(err_)); \
    } while (0)

#define CUBLAS_CHECK(call)                                                         \
    do {                                                                           \
        cublasStatus_t st_ = (call);                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS) MOE_GPU_FAIL(#call, cublasGetStatusString(st_)); \
    } while (0)

// After a kernel launch: a bad configuration shows here, not at the next call.
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())
