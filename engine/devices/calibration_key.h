// The key a calibration file is cached under (profiles/calibration.h) for
// this machine and a model's expert shape, derived in this one place so that
// `moe-server calibrate` writes where the engine looks. Measures nothing and
// reads no calibration file.
#pragma once
#include <string>

#include "engine/model/model_config.h"
#include "profiles/calibration.h"

// The device a run uses until a --gpu-device flag chooses one: the first
// CUDA device (none without one).
constexpr int GPU_DEVICE_DEFAULT = 0;

// The name of CUDA device `gpu_device` (gpu_kernels/device.h), or "none" for
// -1 (CPU only), a build without CUDA, or a machine without that device.
std::string gpu_device_name(int gpu_device);

// A Calibration with only its key fields set: the CPU's name, the active
// kernel path, `threads`, gpu_device_name(gpu_device), the model's dim and
// hidden_dim, and its experts' types (weights_expert_dtypes). `calibrate`
// fills in the measurements.
Calibration calibration_key_fields(const ModelConfig& config, const std::string& expert_dtypes, int threads,
                                   int gpu_device);

// calibration_key(calibration_key_fields(...)): the file name `calibrate`
// writes and the engine looks up.
std::string engine_calibration_key(const ModelConfig& config, const std::string& expert_dtypes, int threads,
                                   int gpu_device);
