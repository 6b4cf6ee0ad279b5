// gpu_support.h over gpu_kernels' device discovery and runtime.
#include "gpu_support.h"

#include "gpu_kernels/device.h"
#include "gpu_kernels/gpu_runtime.h"

std::string gpu_unavailable_reason() {
    if (gpu_devices().empty()) return "no CUDA device (no driver, or none visible)";
    return "";
}

size_t gpu_free_bytes() {
    gpu_set_device(0);
    size_t free_bytes = 0, total_bytes = 0;
    gpu_mem_info(&free_bytes, &total_bytes);
    return free_bytes;
}
