// gpu_devices() through the CUDA runtime. "No driver / no device" is not an
// error here: the CPU path serves then.
#include "gpu_kernels/cuda_check.h"
#include "gpu_kernels/device.h"

std::vector<GpuDevice> gpu_devices() {
    std::vector<GpuDevice> devices;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return devices;
    }
    for (int i = 0; i < count; i++) {
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
        CUDA_CHECK(cudaSetDevice(i));
        size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        devices.push_back({i, prop.name, total_bytes, free_bytes, prop.major, prop.minor});
    }
    return devices;
}
