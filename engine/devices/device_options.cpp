// Names of the device options and placement facts, and the option errors
// (see device_options.h).
#include "engine/devices/device_options.h"

#include <string>
#include <utility>

const char* session_option_name(SessionOption option) {
    switch (option) {
    case SessionOption::CTX: return "ctx";
    case SessionOption::MAX_BATCH: return "max_batch";
    case SessionOption::GPU_MEMORY: return "device.gpu_memory";
    case SessionOption::GPU_REQUIRED: return "device.gpu_required";
    case SessionOption::EMULATE_GPU: return "device.emulate_gpu";
    case SessionOption::PROFILE: return "device.profile";
    case SessionOption::CACHE_POLICY: return "device.cache_policy";
    case SessionOption::CACHE_SHARE: return "device.cache_share";
    case SessionOption::CACHE_SCOPE: return "device.cache_scope";
    case SessionOption::PREFETCH: return "device.prefetch";
    case SessionOption::SCORE_WINDOW: return "score.window";
    case SessionOption::SCORE_CHUNKS: return "score.chunks";
    }
    return "?";
}

OptionError::OptionError(SessionOption option_, std::string value_, std::string message_)
    : MoeError(std::string(session_option_name(option_)) + (value_.empty() ? "" : " " + value_) + ": " + message_),
      option(option_),
      value(std::move(value_)),
      message(std::move(message_)) {}

const char* cpu_reason_name(CpuReason reason) {
    switch (reason) {
    case CpuReason::NO_DEVICE_ASKED: return "no_device_asked";
    case CpuReason::DENSE_MODEL: return "dense_model";
    case CpuReason::MIXER_NOT_ON_GPU: return "mixer_not_on_gpu";
    case CpuReason::NO_CUDA: return "no_cuda";
    case CpuReason::NO_CUDA_DEVICE: return "no_cuda_device";
    case CpuReason::NO_SUCH_DEVICE: return "no_such_device";
    case CpuReason::BUDGET_TOO_SMALL: return "budget_too_small";
    case CpuReason::CUDA_FAILED: return "cuda_failed";
    }
    return "?";
}

NoDeviceError::NoDeviceError(SessionOption option_, PlacementInfo placement_)
    : OptionError(option_, "",
                  std::string("needs a device to place experts on; the CPU serves (") +
                      cpu_reason_name(placement_.cpu.reason) + ")"),
      placement(std::move(placement_)) {}

const char* device_kind_name(DeviceKind kind) {
    switch (kind) {
    case DeviceKind::NONE:
        return "none";
    case DeviceKind::EMULATED:
        return "emulated";
    case DeviceKind::CUDA:
        return "cuda";
    }
    return "?";
}

const char* plan_kind_name(PlanKind kind) {
    switch (kind) {
    case PlanKind::NONE:
        return "none";
    case PlanKind::EVEN:
        return "even";
    case PlanKind::POPULARITY:
        return "popularity";
    }
    return "?";
}
