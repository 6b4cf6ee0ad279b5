// The options of the devices a session runs on and the facts of where its
// experts live: DeviceOptions (what the caller asks for), PlacementInfo
// (what the device setup found and decided: facts and reason codes, no
// words for people) and the errors that name an option (SessionOption,
// OptionError, NoDeviceError; the engine names the option, the CLI and the
// server say it in their own words, server/placement_text.h). The session
// (engine/runtime/session.h) takes them in SessionOptions and hands
// PlacementInfo back; the device setup (device_setup.h) fills it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/errors.h"
#include "placement/expert_cache.h"

// The options a caller of the engine sets (SessionOptions, DeviceOptions,
// Session::score's window), as errors name them: the engine names the
// option, its caller says it in its own words (the CLI: its flag,
// server/placement_text.h).
enum class SessionOption : uint8_t {
    CTX,           // SessionOptions::ctx
    MAX_BATCH,     // SessionOptions::max_batch
    GPU_MEMORY,    // DeviceOptions::gpu_memory_bytes or gpu_expert_share
    GPU_REQUIRED,  // DeviceOptions::gpu_required (a GPU device or memory was asked for)
    EMULATE_GPU,   // DeviceOptions::emulate_gpu_bytes or emulate_gpu_expert_share
    PROFILE,       // DeviceOptions::profile
    CACHE_POLICY,  // DeviceOptions::cache_policy
    CACHE_SHARE,   // DeviceOptions::cache_share
    CACHE_SCOPE,   // DeviceOptions::cache_scope
    PREFETCH,      // DeviceOptions::prefetch
    SCORE_WINDOW,  // Session::score's window
    SCORE_CHUNKS,  // Session::score's chunks
};
// The option's field: "ctx", "device.gpu_memory", "score.window", ...
const char* session_option_name(SessionOption option);

// A value of an option no session takes: the option, its value where the
// words need it ("50%", "on"; mostly empty) and what is wrong, naming no
// option. what() is "NAME[ VALUE]: MESSAGE" with session_option_name; a
// caller with words of its own for the option says it with those.
struct OptionError : MoeError {
    OptionError(SessionOption option, std::string value, std::string message);
    SessionOption option;
    std::string value;
    std::string message;
};

// Where the model runs: a CUDA device when there is one (dense weights, KV
// cache and the popular experts on it), else the CPU; or the emulated device
// as a dry run of placement.
struct DeviceOptions {
    // CUDA: the device (-1 = none: CPU only) and the memory moe-server may
    // use on it in bytes (0 = its free memory at load). Without CUDA or a
    // device the CPU serves, said in one line.
    int gpu_device = 0;  // GPU_DEVICE_DEFAULT (engine/devices/calibration_key.h)
    double gpu_memory_bytes = 0;
    // Instead of a size: this share (0..1) of all experts resident, the
    // budget being what they, the staging slots and the dense part need.
    double gpu_expert_share = 0;
    // --gpu-device or --gpu-memory was given: a GPU that cannot be used is
    // an error (exit 2) instead of a fallback to the CPU.
    bool gpu_required = false;
    // Dry run of placement on an emulated device (a test double that computes
    // on the CPU, see engine/devices/emulated_device.h): its memory in bytes, or the
    // share of all experts it holds (0..1). Both 0 = no device.
    double emulate_gpu_bytes = 0;
    double emulate_gpu_expert_share = 0;
    // Popularity profile for the static plan (profiles/README.md); empty =
    // spread the device's experts evenly over layers.
    std::filesystem::path profile;
    // The dynamic cache (placement/cached_placement.h): no policy = the
    // static plan (every device expert pinned); with one, cache_share of the
    // device's experts are cache slots (the rest pinned) managed by it, per
    // layer or as one pool. prefetch: copy the next layer's predicted
    // experts into cache slots in the copy stream's idle time (needs a
    // policy). The defaults are the best measured (placement/README.md "The
    // cache in the executor"): LFU over one pool with prefetch.
    std::optional<CachePolicy> cache_policy = CachePolicy::LFU;
    double cache_share = 0.25;
    CacheScope cache_scope = CacheScope::GLOBAL;
    bool prefetch = true;
    // The placement options the caller set (PROFILE, CACHE_POLICY,
    // CACHE_SHARE, CACHE_SCOPE, PREFETCH; the CLI: the flags given): they
    // place experts on a device, so without one (no GPU, gpu_device -1, a
    // dense model) the load fails naming the first (NoDeviceError), as it
    // does for a profile set here.
    std::vector<SessionOption> placement_set;
};

// The device experts may run on. NONE: every expert on the CPU, with no
// planner, timing or execution bookkeeping on the way.
enum class DeviceKind : uint8_t { NONE, EMULATED, CUDA };
const char* device_kind_name(DeviceKind kind);  // "none", "emulated", "cuda"

// The static plan of which experts are resident: NONE without a device.
enum class PlanKind : uint8_t { NONE, EVEN, POPULARITY };
const char* plan_kind_name(PlanKind kind);  // "none", "even", "popularity"

// Why the CPU serves every expert (DeviceKind::NONE).
enum class CpuReason : uint8_t {
    NO_DEVICE_ASKED,   // DeviceOptions::gpu_device < 0
    DENSE_MODEL,       // the model has no experts (the GPU path places experts)
    MIXER_NOT_ON_GPU,  // the model's gated attention or Gated DeltaNet layers have no CUDA kernels yet
    NO_CUDA,           // built without CUDA
    NO_CUDA_DEVICE,    // CUDA found no device
    NO_SUCH_DEVICE,    // no device gpu_device among the gpu_devices found
    BUDGET_TOO_SMALL,  // the budget does not hold the dense part and the staging slots (see PlacementInfo)
    CUDA_FAILED,       // CUDA failed at start (gpu_error)
};
const char* cpu_reason_name(CpuReason reason);  // "no_device_asked", "dense_model", ...

// Why the CPU serves, with what its words need.
struct CpuServes {
    CpuReason reason = CpuReason::NO_DEVICE_ASKED;
    int gpu_device = 0;     // NO_SUCH_DEVICE: the device asked for
    int gpu_devices = 0;    // NO_SUCH_DEVICE: the devices CUDA found
    std::string gpu_error;  // CUDA_FAILED: CUDA's message
};

// Where a copied expert's bytes come from (the CUDA device).
enum class CopySource : uint8_t {
    STAGED,      // host memcpy into pinned buffers, then DMA from them
    REGISTERED,  // DMA straight from the mapped weights (cudaHostRegister)
};
// How the copy source was chosen.
enum class CopyChoice : uint8_t {
    MEASURED,              // the faster of the two, measured at load
    NOTHING_TO_COPY,       // every expert is pinned
    BY_CALLER,             // the caller chose it (CopyMode)
    REGISTER_REFUSED,      // measuring: cudaHostRegister refused (error), pinned staging measured alone
    REGISTER_ALL_REFUSED,  // cudaHostRegister of every copied expert refused (error): pinned staging
};
// The copy source in use, both measured rates and how it was chosen.
struct CopySourceChoice {
    CopySource source = CopySource::STAGED;
    double staged_gb_s = 0;      // measured copy rate of pinned staging; 0 when not measured
    double registered_gb_s = 0;  // the same for the registered mapping; 0 when not measured or refused
    CopyChoice choice = CopyChoice::MEASURED;
    std::string error;           // REGISTER_REFUSED, REGISTER_ALL_REFUSED: CUDA's message
};

// Where the latency model's curves came from: the CPU's expert curve and
// the device's curves (copies, expert FFN).
enum class CpuCurveSource : uint8_t {
    NONE,         // no curve: the CPU serves alone and no calibration is cached (predictions are 0)
    CALIBRATION,  // `calibrate`'s cached file (LatencySources::calibration)
    PROBE,        // a quick probe at load
};
enum class DeviceCurveSource : uint8_t {
    NONE,         // no device
    CALIBRATION,  // `calibrate` measured this device (LatencySources::calibration)
    NOMINAL,      // the nominal GPU (placement/latency_model.h), not a measurement
};
struct LatencySources {
    CpuCurveSource cpu = CpuCurveSource::NONE;
    DeviceCurveSource device = DeviceCurveSource::NONE;
    std::string calibration;  // the cached calibration file, when there is one
};

// A non-fatal problem of the device setup.
enum class PlacementWarning : uint8_t {
    NONE,
    CALIBRATION_IGNORED,  // the cached calibration does not validate (detail: the reader's message, naming it)
};
struct PlacementNote {
    PlacementWarning warning = PlacementWarning::NONE;
    std::string detail;
};

// Where experts live: the device, its budget and the static plan. Facts
// only: the words for people are the caller's (server/placement_text.h).
struct PlacementInfo {
    DeviceKind device = DeviceKind::NONE;
    CpuServes cpu;                    // NONE: why the CPU serves
    std::string device_name;          // CUDA (and NONE's BUDGET_TOO_SMALL): the device's name, "NVIDIA H100 80GB HBM3"
    int gpu_index = -1;               // CUDA (and NONE's BUDGET_TOO_SMALL): its CUDA index (cuda:N)
    int staging_slots = 0;            // device slots copied experts run from
    std::optional<CopySourceChoice> copy_source;  // CUDA: how copies reach the device
    // The budget: CUDA and EMULATED, and NONE's BUDGET_TOO_SMALL (the one that did not hold).
    double budget_bytes = 0;          // device memory given to moe-server (GiB mode) or to experts (share mode)
    double dense_bytes = 0;           // non-expert weights a GPU would hold
    double kv_bytes = 0;              // the sequence state on the device (the fp32 KV cache; sequence_state_bytes)
    double activation_bytes = 0;      // activations, expert rows, batch metadata (CUDA)
    double margin_bytes = 0;          // workspace and fragmentation (emulated: activations too)
    double expert_bytes = 0;          // one expert
    int capacity = 0;                 // resident experts: pinned plus cache slots
    int cache_slots = 0;              // of those, cache slots (0: the static plan)
    std::optional<CachePolicy> cache_policy;  // with a device: the cache's policy; none = the static plan
    bool prefetch = false;            // next-layer prefetch into cache slots
    PlanKind plan = PlanKind::NONE;
    std::string profile;              // the profile the plan came from
    double expected_hit_rate = -1;    // on the profile's workload; -1 without a profile
    LatencySources latency;           // where the latency model came from
    PlacementNote note;               // a non-fatal problem (an unusable cached calibration)
    int n_layers = 0, n_experts = 0;
    std::vector<uint8_t> resident;  // (n_layers, n_experts) pinned at load (cache slots change: Session::expert_slots)
};

// An option that needs a device where the CPU serves every expert: a
// placement option (DeviceOptions::placement_set, a profile) or
// GPU_REQUIRED. placement says why (PlacementInfo::cpu).
struct NoDeviceError : OptionError {
    NoDeviceError(SessionOption option, PlacementInfo placement);
    PlacementInfo placement;
};
