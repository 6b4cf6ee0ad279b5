// Placement and option errors in words (see placement_text.h).
#include "server/placement_text.h"

#include <algorithm>
#include <cstdio>

namespace {

// A CUDA device as people name it: "NVIDIA H100 80GB HBM3 (cuda:0)".
std::string cuda_device_words(const PlacementInfo& p) {
    if (p.gpu_index < 0) return p.device_name;
    return p.device_name + " (cuda:" + std::to_string(p.gpu_index) + ")";
}

// What the emulated device is, in every line that names it.
constexpr const char* EMULATED_WHAT = "test double, computes on the CPU";

constexpr double GIB = double(1u << 30);

const char* copy_source_name(CopySource source) {
    return source == CopySource::REGISTERED ? "registered mapping" : "pinned staging";
}

}  // namespace

const char* session_option_flag(SessionOption option) {
    switch (option) {
    case SessionOption::CTX:
        return "--ctx";
    case SessionOption::MAX_BATCH:
        return session_option_name(option);
    case SessionOption::GPU_MEMORY:
        return "--gpu-memory";
    case SessionOption::GPU_REQUIRED:
        return "--gpu-device/--gpu-memory";
    case SessionOption::EMULATE_GPU:
        return "--emulate-gpu";
    case SessionOption::PROFILE:
        return "--profile";
    case SessionOption::CACHE_POLICY:
        return "--cache-policy";
    case SessionOption::CACHE_SHARE:
        return "--cache-share";
    case SessionOption::CACHE_SCOPE:
        return "--cache-scope";
    case SessionOption::PREFETCH:
        return "--prefetch";
    case SessionOption::SCORE_WINDOW:
        return "--ctx";
    case SessionOption::SCORE_CHUNKS:
        return "--chunks";
    }
    return session_option_name(option);
}

std::string engine_error_text(const std::exception& e) {
    const auto* option = dynamic_cast<const OptionError*>(&e);
    if (!option) return e.what();
    const std::string flag = session_option_flag(option->option);
    if (const auto* none = dynamic_cast<const NoDeviceError*>(option)) {
        const std::string why = placement_cpu_reason(none->placement);
        if (none->option == SessionOption::GPU_REQUIRED) return flag + ": " + why;
        return flag + ": needs a device (a GPU, or --emulate-gpu) to place experts on (" + why + ")";
    }
    return flag + (option->value.empty() ? "" : " " + option->value) + ": " + option->message;
}

std::string placement_cpu_reason(const PlacementInfo& p) {
    const CpuServes& c = p.cpu;
    switch (c.reason) {
    case CpuReason::NO_DEVICE_ASKED:
        return "--gpu-device none";
    case CpuReason::DENSE_MODEL:
        return "dense model (the GPU path places experts)";
    case CpuReason::MIXER_NOT_ON_GPU:
        return "the model's Gated DeltaNet and gated attention layers have no GPU kernels yet";
    case CpuReason::NO_CUDA:
        return "built without CUDA";
    case CpuReason::NO_CUDA_DEVICE:
        return "no CUDA device found";
    case CpuReason::NO_SUCH_DEVICE:
        return "no CUDA device " + std::to_string(c.gpu_device) + " (" + std::to_string(c.gpu_devices) + " found)";
    case CpuReason::BUDGET_TOO_SMALL: {
        char line[512];
        std::snprintf(
            line, sizeof line,
            "%.2f GiB of %s does not hold the dense weights (%.2f GiB), the KV cache (%.2f GiB), the "
            "activations (%.2f GiB), the margin (%.2f GiB) and %d staging slots of one expert (%.3f GiB each)",
            p.budget_bytes / GIB, cuda_device_words(p).c_str(), p.dense_bytes / GIB, p.kv_bytes / GIB,
            p.activation_bytes / GIB, p.margin_bytes / GIB, p.staging_slots, p.expert_bytes / GIB);
        return line;
    }
    case CpuReason::CUDA_FAILED:
        return "CUDA failed at start: " + c.gpu_error;
    }
    return cpu_reason_name(c.reason);
}

std::string placement_device_name(const PlacementInfo& p) {
    if (p.device == DeviceKind::EMULATED) return std::string("emulated GPU (") + EMULATED_WHAT + ")";
    if (p.device == DeviceKind::NONE) return placement_cpu_reason(p);
    return cuda_device_words(p);
}

std::string placement_cache_policy(const PlacementInfo& p) {
    if (p.device == DeviceKind::NONE) return "";
    return p.cache_policy ? cache_policy_name(*p.cache_policy) : "static";
}

std::string copy_source_text(const CopySourceChoice& c) {
    char text[160];
    const CopySource other = c.source == CopySource::STAGED ? CopySource::REGISTERED : CopySource::STAGED;
    const double mine = c.source == CopySource::STAGED ? c.staged_gb_s : c.registered_gb_s;
    const double theirs = c.source == CopySource::STAGED ? c.registered_gb_s : c.staged_gb_s;
    std::string line = std::string("copies: ") + copy_source_name(c.source);
    if (mine > 0) {
        std::snprintf(text, sizeof text, " (%.1f GB/s", mine);
        line += text;
        if (theirs > 0) {
            std::snprintf(text, sizeof text, "; %s %.1f GB/s", copy_source_name(other), theirs);
            line += text;
        }
        line += ")";
    }
    switch (c.choice) {
    case CopyChoice::MEASURED:
        break;
    case CopyChoice::NOTHING_TO_COPY:
        line += ": every expert is pinned, nothing to copy";
        break;
    case CopyChoice::BY_CALLER:
        line += ": chosen by the caller";
        break;
    case CopyChoice::REGISTER_REFUSED:
        line += ": cudaHostRegister refused: " + c.error;
        break;
    case CopyChoice::REGISTER_ALL_REFUSED:
        line += ": cudaHostRegister of every copied expert refused: " + c.error;
        break;
    }
    return line;
}

std::string placement_copy_source(const PlacementInfo& p) {
    return p.copy_source ? copy_source_text(*p.copy_source) : "";
}

std::string placement_latency_source(const PlacementInfo& p) {
    const LatencySources& l = p.latency;
    std::string s;
    switch (l.cpu) {
    case CpuCurveSource::NONE:
        return "none (no calibration: predictions are 0)";
    case CpuCurveSource::CALIBRATION:
        s = "CPU: " + l.calibration;
        break;
    case CpuCurveSource::PROBE:
        s = "CPU: quick probe at load (run 'moe-server calibrate' for a full fit)";
        break;
    }
    switch (l.device) {
    case DeviceCurveSource::NONE:
        break;
    case DeviceCurveSource::CALIBRATION:
        s += "; device: measured by 'moe-server calibrate'";
        break;
    case DeviceCurveSource::NOMINAL:
        // The emulated device always prices with the nominal GPU; a CUDA
        // device until `calibrate` measures it.
        s += p.device == DeviceKind::CUDA ? "; device: nominal GPU until 'moe-server calibrate' measures this one"
                                          : "; device: nominal GPU (placement/README.md)";
        break;
    }
    return s;
}

std::string placement_warning(const PlacementInfo& p) {
    switch (p.note.warning) {
    case PlacementWarning::NONE:
        return "";
    case PlacementWarning::CALIBRATION_IGNORED:
        return "ignoring the cached calibration: " + p.note.detail + " (run 'moe-server calibrate --force')";
    }
    return "";
}

std::string placement_summary(const PlacementInfo& p) {
    if (p.device == DeviceKind::NONE) return "device: none, every expert on the CPU (" + placement_cpu_reason(p) + ")";
    const char* plan = plan_kind_name(p.plan);
    char line[640];
    int n = 0;
    if (p.device == DeviceKind::CUDA)
        n = std::snprintf(line, sizeof line,
                          "device: %s, %.2f GiB: %d of %d experts resident (%.1f MiB each; dense %.2f GiB, KV %.2f "
                          "GiB, activations %.2f GiB, margin %.2f GiB, %d staging slots), plan: %s",
                          cuda_device_words(p).c_str(), p.budget_bytes / GIB, p.capacity, p.n_layers * p.n_experts,
                          p.expert_bytes / (1 << 20), p.dense_bytes / GIB, p.kv_bytes / GIB, p.activation_bytes / GIB,
                          p.margin_bytes / GIB, p.staging_slots, plan);
    else if (p.margin_bytes > 0)
        n = std::snprintf(line, sizeof line,
                          "device: %s (%s), %.2f GiB: %d of %d experts resident "
                          "(%.1f MiB each; dense %.2f GiB, KV %.2f GiB, margin %.2f GiB, %d staging slots), plan: %s",
                          device_kind_name(p.device), EMULATED_WHAT, p.budget_bytes / GIB, p.capacity,
                          p.n_layers * p.n_experts, p.expert_bytes / (1 << 20), p.dense_bytes / GIB, p.kv_bytes / GIB,
                          p.margin_bytes / GIB, p.staging_slots, plan);
    else
        n = std::snprintf(line, sizeof line,
                          "device: %s (%s): %d of %d experts resident (%.1f MiB each, "
                          "%.2f GiB with %d staging slots; dense weights and KV not counted), plan: %s",
                          device_kind_name(p.device), EMULATED_WHAT, p.capacity, p.n_layers * p.n_experts,
                          p.expert_bytes / (1 << 20), p.budget_bytes / GIB, p.staging_slots, plan);
    std::string s(line, size_t(std::max(0, std::min(n, int(sizeof line) - 1))));
    if (!p.profile.empty()) s += " from " + p.profile;
    if (p.cache_slots > 0 || p.prefetch) {
        std::snprintf(line, sizeof line, "; cache: %s, %d of the %d slots, prefetch %s",
                      placement_cache_policy(p).c_str(), p.cache_slots, p.capacity, p.prefetch ? "on" : "off");
        s += line;
    }
    if (p.copy_source) s += "; " + copy_source_text(*p.copy_source);
    if (p.expected_hit_rate >= 0) {
        std::snprintf(line, sizeof line, ", expected hit rate %.1f%%", 100.0 * p.expected_hit_rate);
        s += line;
    }
    return s;
}

std::string model_unread_text(const ModelConfig& c) {
    std::string parts;
    if (c.has_vision_tower) parts = "vision tower";
    if (c.n_mtp_layers > 0)
        parts += (parts.empty() ? "" : " and ") + std::to_string(c.n_mtp_layers) + " multi-token-prediction layer" +
                 (c.n_mtp_layers == 1 ? "" : "s");
    if (parts.empty()) return "";
    const bool one = !(c.has_vision_tower && c.n_mtp_layers > 0) && c.n_mtp_layers <= 1;
    return "the checkpoint's " + parts + (one ? " is" : " are") + " not read: text in, one token a step";
}
