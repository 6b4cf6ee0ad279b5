// The words of server/placement_text.h from the engine's facts: for each
// reason code (why the CPU serves, how copies were chosen, where the latency
// curves came from, the setup's warning) and each session option, the
// sentence the CLI, the load line, /v1/experts and /metrics show. The
// engine's PlacementInfo carries no words; these are the only ones.
#include <catch2/catch.hpp>
#include <string>

#include "base/errors.h"
#include "engine/runtime/session.h"
#include "server/placement_text.h"

namespace {

constexpr double GIB = double(1u << 30);

PlacementInfo cpu_because(CpuReason reason) {
    PlacementInfo p;
    p.cpu.reason = reason;
    return p;
}

// A CUDA device's placement as cuda_setup leaves it.
PlacementInfo cuda_placement() {
    PlacementInfo p;
    p.device = DeviceKind::CUDA;
    p.device_name = "NVIDIA H100 80GB HBM3";
    p.gpu_index = 0;
    p.budget_bytes = 24 * GIB;
    p.dense_bytes = 2 * GIB;
    p.kv_bytes = 1 * GIB;
    p.activation_bytes = 0.25 * GIB;
    p.margin_bytes = 1 * GIB;
    p.expert_bytes = 336.0 * (1 << 20);
    p.staging_slots = 2;
    p.capacity = 50;
    p.n_layers = 32;
    p.n_experts = 8;
    p.plan = PlanKind::EVEN;
    return p;
}

}  // namespace

TEST_CASE("placement text: why the CPU serves, for each reason", "[unit][placement_text]") {
    CHECK(placement_cpu_reason(cpu_because(CpuReason::NO_DEVICE_ASKED)) == "--gpu-device none");
    CHECK(placement_cpu_reason(cpu_because(CpuReason::DENSE_MODEL)) == "dense model (the GPU path places experts)");
    CHECK(placement_cpu_reason(cpu_because(CpuReason::NO_CUDA)) == "built without CUDA");
    CHECK(placement_cpu_reason(cpu_because(CpuReason::NO_CUDA_DEVICE)) == "no CUDA device found");
    PlacementInfo missing = cpu_because(CpuReason::NO_SUCH_DEVICE);
    missing.cpu.gpu_device = 2;
    missing.cpu.gpu_devices = 1;
    CHECK(placement_cpu_reason(missing) == "no CUDA device 2 (1 found)");
    PlacementInfo failed = cpu_because(CpuReason::CUDA_FAILED);
    failed.cpu.gpu_error = "cudaMalloc: out of memory";
    CHECK(placement_cpu_reason(failed) == "CUDA failed at start: cudaMalloc: out of memory");
    // A budget too small keeps its device and figures: they say by how much.
    PlacementInfo small = cuda_placement();
    small.device = DeviceKind::NONE;
    small.cpu.reason = CpuReason::BUDGET_TOO_SMALL;
    small.budget_bytes = 3 * GIB;
    CHECK(placement_cpu_reason(small) ==
          "3.00 GiB of NVIDIA H100 80GB HBM3 (cuda:0) does not hold the dense weights (2.00 GiB), the KV cache (1.00 "
          "GiB), the activations (0.25 GiB), the margin (1.00 GiB) and 2 staging slots of one expert (0.328 GiB each)");

    // The load line and the device's name (/metrics, /v1/experts) say the same.
    CHECK(placement_summary(failed) ==
          "device: none, every expert on the CPU (CUDA failed at start: cudaMalloc: out of "
          "memory)");
    CHECK(placement_device_name(cpu_because(CpuReason::NO_CUDA)) == "built without CUDA");
    CHECK(placement_device_name(small) == placement_cpu_reason(small));
}

TEST_CASE("placement text: the device's name and the cache policy", "[unit][placement_text]") {
    PlacementInfo cuda = cuda_placement();
    CHECK(placement_device_name(cuda) == "NVIDIA H100 80GB HBM3 (cuda:0)");
    PlacementInfo emulated;
    emulated.device = DeviceKind::EMULATED;
    CHECK(placement_device_name(emulated) == "emulated GPU (test double, computes on the CPU)");

    // No device: no policy (null in /v1/experts); a device without a cache: "static".
    CHECK(placement_cache_policy(PlacementInfo{}).empty());
    CHECK(placement_cache_policy(emulated) == "static");
    for (CachePolicy policy : {CachePolicy::LRU, CachePolicy::LFU, CachePolicy::SCORE}) {
        emulated.cache_policy = policy;
        CHECK(placement_cache_policy(emulated) == cache_policy_name(policy));
    }
    emulated.cache_policy = CachePolicy::LRU;
    emulated.capacity = 4;
    emulated.cache_slots = 1;
    emulated.prefetch = true;
    CHECK(placement_summary(emulated).find("; cache: lru, 1 of the 4 slots, prefetch on") != std::string::npos);
}

TEST_CASE("placement text: how copies reach the device, for each choice", "[unit][placement_text]") {
    CopySourceChoice c;
    c.source = CopySource::REGISTERED;
    c.staged_gb_s = 11.3;
    c.registered_gb_s = 24.1;
    CHECK(copy_source_text(c) == "copies: registered mapping (24.1 GB/s; pinned staging 11.3 GB/s)");
    c.source = CopySource::STAGED;
    CHECK(copy_source_text(c) == "copies: pinned staging (11.3 GB/s; registered mapping 24.1 GB/s)");

    CopySourceChoice refused;
    refused.staged_gb_s = 12.0;
    refused.choice = CopyChoice::REGISTER_REFUSED;
    refused.error = "cudaHostRegister: not permitted";
    CHECK(copy_source_text(refused) ==
          "copies: pinned staging (12.0 GB/s): cudaHostRegister refused: cudaHostRegister: not permitted");
    CopySourceChoice all_refused = c;
    all_refused.choice = CopyChoice::REGISTER_ALL_REFUSED;
    all_refused.error = "out of memory";
    CHECK(copy_source_text(all_refused) ==
          "copies: pinned staging (11.3 GB/s; registered mapping 24.1 GB/s): "
          "cudaHostRegister of every copied expert refused: out of memory");
    CopySourceChoice pinned;
    pinned.choice = CopyChoice::NOTHING_TO_COPY;
    CHECK(copy_source_text(pinned) == "copies: pinned staging: every expert is pinned, nothing to copy");
    CopySourceChoice forced;
    forced.source = CopySource::REGISTERED;
    forced.choice = CopyChoice::BY_CALLER;
    CHECK(copy_source_text(forced) == "copies: registered mapping: chosen by the caller");

    // Only a CUDA device has a copy source (/v1/experts' copy_source is "" otherwise).
    PlacementInfo cuda = cuda_placement();
    CHECK(placement_copy_source(cuda).empty());
    CHECK(placement_summary(cuda).find("copies") == std::string::npos);
    cuda.copy_source = c;
    CHECK(placement_copy_source(cuda) == copy_source_text(c));
    CHECK(placement_summary(cuda) ==
          "device: NVIDIA H100 80GB HBM3 (cuda:0), 24.00 GiB: 50 of 256 experts resident (336.0 MiB each; dense 2.00 "
          "GiB, KV 1.00 GiB, activations 0.25 GiB, margin 1.00 GiB, 2 staging slots), plan: even; copies: pinned "
          "staging (11.3 GB/s; registered mapping 24.1 GB/s)");
}

TEST_CASE("placement text: where the latency model came from", "[unit][placement_text]") {
    PlacementInfo none;
    CHECK(placement_latency_source(none) == "none (no calibration: predictions are 0)");
    none.latency = {CpuCurveSource::CALIBRATION, DeviceCurveSource::NONE, "/cache/calibration/k.json"};
    CHECK(placement_latency_source(none) == "CPU: /cache/calibration/k.json");

    PlacementInfo emulated;
    emulated.device = DeviceKind::EMULATED;
    emulated.latency = {CpuCurveSource::PROBE, DeviceCurveSource::NOMINAL, ""};
    CHECK(placement_latency_source(emulated) ==
          "CPU: quick probe at load (run 'moe-server calibrate' for a full fit); device: nominal GPU "
          "(placement/README.md)");

    PlacementInfo cuda = cuda_placement();
    cuda.latency = {CpuCurveSource::CALIBRATION, DeviceCurveSource::NOMINAL, "k.json"};
    CHECK(placement_latency_source(cuda) ==
          "CPU: k.json; device: nominal GPU until 'moe-server calibrate' measures this one");
    cuda.latency.device = DeviceCurveSource::CALIBRATION;
    CHECK(placement_latency_source(cuda) == "CPU: k.json; device: measured by 'moe-server calibrate'");
}

TEST_CASE("placement text: the setup's warning", "[unit][placement_text]") {
    PlacementInfo p;
    CHECK(placement_warning(p).empty());
    p.note = {PlacementWarning::CALIBRATION_IGNORED, "k.json: not a calibration (version 1)"};
    CHECK(
        placement_warning(p) ==
        "ignoring the cached calibration: k.json: not a calibration (version 1) (run 'moe-server calibrate --force')");
}

TEST_CASE("option errors: the engine names the option, the text its flag", "[unit][placement_text]") {
    const std::pair<SessionOption, const char*> flags[] = {
        {SessionOption::CTX, "--ctx"},
        {SessionOption::MAX_BATCH, "max_batch"},
        {SessionOption::GPU_MEMORY, "--gpu-memory"},
        {SessionOption::GPU_REQUIRED, "--gpu-device/--gpu-memory"},
        {SessionOption::EMULATE_GPU, "--emulate-gpu"},
        {SessionOption::PROFILE, "--profile"},
        {SessionOption::CACHE_POLICY, "--cache-policy"},
        {SessionOption::CACHE_SHARE, "--cache-share"},
        {SessionOption::CACHE_SCOPE, "--cache-scope"},
        {SessionOption::PREFETCH, "--prefetch"},
        {SessionOption::SCORE_WINDOW, "--ctx"},
        {SessionOption::SCORE_CHUNKS, "--chunks"},
    };
    for (const auto& [option, flag] : flags) {
        INFO(session_option_name(option));
        CHECK(std::string(session_option_flag(option)) == flag);
    }

    // The engine's own what() names the field; the text the flag.
    const OptionError ctx(SessionOption::CTX, "", "must be at least 16, got 8");
    CHECK(std::string(ctx.what()) == "ctx: must be at least 16, got 8");
    CHECK(engine_error_text(ctx) == "--ctx: must be at least 16, got 8");
    const OptionError share(SessionOption::GPU_MEMORY, "50%", "needs 9.00 GiB, but x has 8.00 GiB free");
    CHECK(std::string(share.what()) == "device.gpu_memory 50%: needs 9.00 GiB, but x has 8.00 GiB free");
    CHECK(engine_error_text(share) == "--gpu-memory 50%: needs 9.00 GiB, but x has 8.00 GiB free");
    CHECK(engine_error_text(OptionError(SessionOption::SCORE_CHUNKS, "", "the text has 3 tokens")) ==
          "--chunks: the text has 3 tokens");

    // An option that needs a device where the CPU serves: why, in words.
    const NoDeviceError cache(SessionOption::CACHE_POLICY, cpu_because(CpuReason::NO_DEVICE_ASKED));
    CHECK(engine_error_text(cache) ==
          "--cache-policy: needs a device (a GPU, or --emulate-gpu) to place experts on (--gpu-device none)");
    CHECK(std::string(cache.what()).find("device.cache_policy: ") == 0);
    const NoDeviceError gpu(SessionOption::GPU_REQUIRED, cpu_because(CpuReason::NO_CUDA_DEVICE));
    CHECK(engine_error_text(gpu) == "--gpu-device/--gpu-memory: no CUDA device found");

    // Any other error as it is.
    CHECK(engine_error_text(MoeError("model.gguf: not a GGUF file")) == "model.gguf: not a GGUF file");
}

TEST_CASE("placement text: the parts of a checkpoint that are not run are said at load", "[placement_text]") {
    ModelConfig c;
    CHECK(model_unread_text(c).empty());
    c.has_vision_tower = true;
    CHECK(model_unread_text(c) == "the checkpoint's vision tower is not read: text in, one token a step");
    c.n_mtp_layers = 1;
    CHECK(model_unread_text(c) ==
          "the checkpoint's vision tower and 1 multi-token-prediction layer are not read: text in, one token a step");
}
