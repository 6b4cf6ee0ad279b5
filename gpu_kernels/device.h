// CUDA device discovery. Declared for every build, so callers need no
// #ifdef: device.cu defines gpu_devices() in CUDA builds, and
// engine/devices/nocuda_devices.cpp (compiled only without CUDA, when
// gpu_kernels/ is not built) defines it to report no device.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

struct GpuDevice {
    int index = 0;
    std::string name;
    size_t total_bytes = 0;
    size_t free_bytes = 0;
    int sm_major = 0, sm_minor = 0;
};

// Every visible device; empty when there is no driver, no device or the
// binary was built without CUDA.
std::vector<GpuDevice> gpu_devices();
