// gpu_devices() for a build without CUDA (gpu_kernels/ is not built then):
// there is no device, so the CPU serves. Compiled only without CUDA.
#include "gpu_kernels/device.h"

std::vector<GpuDevice> gpu_devices() { return {}; }
