// The words for where experts live and for the engine's option errors: the
// load line the server and the CLI print, the device's name, the cache
// policy, the copy source, the latency model's source and the setup's
// warning as /metrics and /v1/experts show them, and the flag that sets each
// session option. The engine gives the facts (PlacementInfo's reason codes,
// figures and paths; OptionError's SessionOption); this file says them.
// Must not compute anything the engine knows.
#pragma once
#include <exception>
#include <string>

#include "engine/runtime/session.h"

// The flag that sets an option, as the CLI and `serve` take it: "--ctx",
// "--gpu-memory", "--gpu-device/--gpu-memory" (GPU_REQUIRED: either asks
// for a GPU), "--cache-policy", ... (MAX_BATCH, which no flag sets: its
// session_option_name).
const char* session_option_flag(SessionOption option);
// An error as the CLI and the server say it: an OptionError by its option's
// flag ("--gpu-memory 50%: needs ..."), a NoDeviceError with why the CPU
// serves; any other error's what().
std::string engine_error_text(const std::exception& e);

// What the checkpoint holds that moe-server does not run, as one line for
// the load: Qwen3.5's vision tower, multi-token-prediction layers; empty
// when it runs everything.
std::string model_unread_text(const ModelConfig& config);

// Why the CPU serves every expert (p.cpu, DeviceKind::NONE): "--gpu-device
// none", "built without CUDA", "no CUDA device 1 (1 found)", ...
std::string placement_cpu_reason(const PlacementInfo& p);
// The device's name: the GPU's, "emulated GPU (test double, computes on the
// CPU)", or for none why the CPU serves.
std::string placement_device_name(const PlacementInfo& p);
// The cache policy: "lru", "lfu", "score", or "static" for the static plan;
// empty without a device.
std::string placement_cache_policy(const PlacementInfo& p);
// How copies reach a CUDA device, e.g. "copies: registered mapping (24.1
// GB/s; pinned staging 11.3 GB/s)"; empty without one (placement_copy_source).
std::string copy_source_text(const CopySourceChoice& c);
std::string placement_copy_source(const PlacementInfo& p);
// Where the latency model came from: "CPU: FILE", "CPU: quick probe at load
// (...)", then the device's "; device: ...", or "none (no calibration:
// predictions are 0)".
std::string placement_latency_source(const PlacementInfo& p);
// The setup's non-fatal problem in words; empty when none.
std::string placement_warning(const PlacementInfo& p);
// One line for logs: device, budget, resident experts, plan, cache, copies, expected hit rate.
std::string placement_summary(const PlacementInfo& p);
