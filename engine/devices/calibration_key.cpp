// The calibration cache key (see calibration_key.h).
#include "engine/devices/calibration_key.h"

#include <vector>

#include "cpu_kernels/isa.h"
#ifdef MOE_HAVE_CUDA
#include "gpu_kernels/device.h"
#endif

std::string gpu_device_name(int gpu_device) {
#ifdef MOE_HAVE_CUDA
    if (gpu_device >= 0) {
        std::vector<GpuDevice> devices = gpu_devices();
        if (gpu_device < int(devices.size())) return devices[size_t(gpu_device)].name;
    }
#else
    (void)gpu_device;
#endif
    return "none";
}

Calibration calibration_key_fields(const ModelConfig& config, const std::string& expert_dtypes, int threads,
                                   int gpu_device) {
    Calibration c;
    c.cpu_name = cpu_model_name();
    c.isa = isa_name(isa_active());
    c.threads = threads;
    c.device_name = gpu_device_name(gpu_device);
    c.dim = config.dim;
    c.hidden_dim = config.hidden_dim;
    c.dtype = expert_dtypes;
    return c;
}

std::string engine_calibration_key(const ModelConfig& config, const std::string& expert_dtypes, int threads,
                                   int gpu_device) {
    return calibration_key(calibration_key_fields(config, expert_dtypes, threads, gpu_device));
}
