// The CUDA device budget (engine/devices/device_setup.h, cuda_budget) without a
// GPU: what the dense weights, the fp32 KV cache, the activations and the
// margin take from --gpu-memory (or from the free memory), how many experts
// are left room for beside the staging slots, the share-of-experts form, and
// the refusals. Figures are recomputed here from the model's shapes.
#include <catch2/catch.hpp>
#include <cmath>

#include "base/errors.h"
#include "engine/devices/device_setup.h"
#include "engine/model/cost.h"
#include "engine/model/synth_model.h"
#include "engine/model/weights.h"
#include "server/placement_text.h"

namespace {

constexpr double GIB = double(1u << 30);

}  // namespace

TEST_CASE("cuda budget: Mixtral-8x7B in 24 GiB holds its dense part, an fp32 KV cache and what experts fit",
          "[unit][cuda_budget]") {
    const ModelConfig c = synth_preset(SynthPreset::MIXTRAL_8X7B);
    DeviceOptions o;
    o.gpu_memory_bytes = 24 * GIB;
    PlacementInfo info;
    const int ctx = 4096, max_batch = 512, staging = 2;
    REQUIRE(cuda_budget(o, c, WeightFormat{}, ctx, max_batch, 79 * GIB, "test GPU", staging, info));
    CHECK(info.budget_bytes == 24 * GIB);
    CHECK(info.dense_bytes == cost_dense_bytes(c));
    // fp32 keys and values of every layer for one context.
    CHECK(info.kv_bytes == double(c.n_layers) * ctx * c.n_kv_heads * c.head_dim * 2 * 4);
    CHECK(info.kv_bytes == 1 * GIB);  // 32 layers x 4096 positions x 1024 x (K, V) x 4 bytes
    CHECK(info.margin_bytes == 1 * GIB);           // a tenth, at most 1 GiB
    CHECK(info.activation_bytes > 0);
    CHECK(info.activation_bytes < 0.5 * GIB);
    const double expert = cost_expert(c, 0).bytes;
    CHECK(expert == 3.0 * 4096 * 14336 * 2);
    const double left = 24 * GIB - info.dense_bytes - info.kv_bytes - info.activation_bytes - info.margin_bytes;
    CHECK(info.capacity == int(std::floor(left / expert)) - staging);
    CHECK(info.capacity > 40);  // about a fifth of the 256 experts
    CHECK(info.capacity < 70);
    // What is placed fits.
    CHECK(info.dense_bytes + info.kv_bytes + info.activation_bytes + info.margin_bytes +
              (info.capacity + staging) * expert <=
          info.budget_bytes);
}

TEST_CASE("cuda budget: the free memory by default, a share of experts, and refusals", "[unit][cuda_budget]") {
    const ModelConfig c = synth_preset(SynthPreset::MIXTRAL_MINI);
    const double expert = cost_expert(c, 0).bytes;
    PlacementInfo free_info;
    REQUIRE(cuda_budget(DeviceOptions{}, c, WeightFormat{}, 1024, 64, 8 * GIB, "test GPU", 2, free_info));
    CHECK(free_info.budget_bytes == 8 * GIB);
    CHECK(free_info.capacity == c.n_layers * c.n_experts);  // everything fits

    DeviceOptions share;
    share.gpu_expert_share = 0.25;
    PlacementInfo s;
    REQUIRE(cuda_budget(share, c, WeightFormat{}, 1024, 64, 8 * GIB, "test GPU", 2, s));
    CHECK(s.capacity == c.n_layers * c.n_experts / 4);
    CHECK(s.budget_bytes < 8 * GIB);

    DeviceOptions too_much;
    too_much.gpu_memory_bytes = 9 * GIB;
    PlacementInfo t;
    CHECK_THROWS_WITH(cuda_budget(too_much, c, WeightFormat{}, 1024, 64, 8 * GIB, "test GPU", 2, t),
                      Catch::Contains("9.00 GiB asked") && Catch::Contains("8.00 GiB free"));
    try {
        cuda_budget(too_much, c, WeightFormat{}, 1024, 64, 8 * GIB, "test GPU", 2, t);
    } catch (const OptionError& e) {
        CHECK(e.option == SessionOption::GPU_MEMORY);
        CHECK(engine_error_text(e) == "--gpu-memory: 9.00 GiB asked, but test GPU has 8.00 GiB free");
    }
    DeviceOptions too_many;
    too_many.gpu_expert_share = 1;
    PlacementInfo m;
    try {
        cuda_budget(too_many, c, WeightFormat{}, 1024, 64, 0.5 * GIB, "test GPU", 2, m);
        FAIL("all experts of mixtral-mini fit in 0.5 GiB");
    } catch (const OptionError& e) {
        CHECK(e.option == SessionOption::GPU_MEMORY);
        CHECK(e.value == "100%");
        CHECK_THAT(engine_error_text(e), Catch::StartsWith("--gpu-memory 100%: needs ") &&
                                             Catch::EndsWith(" GiB, but test GPU has 0.50 GiB free"));
    }

    // Room for the dense part but not for two staging slots: no GPU plan.
    DeviceOptions small;
    PlacementInfo d;
    REQUIRE(cuda_budget(DeviceOptions{}, c, WeightFormat{}, 1024, 64, 8 * GIB, "x", 2, d));
    small.gpu_memory_bytes = (d.dense_bytes + d.kv_bytes + d.activation_bytes + 1.5 * expert) / 0.9;
    PlacementInfo n;
    REQUIRE_FALSE(cuda_budget(small, c, WeightFormat{}, 1024, 64, 8 * GIB, "test GPU", 2, n));
    // The figures say why; the words are the text module's.
    n.device_name = "test GPU";
    n.cpu.reason = CpuReason::BUDGET_TOO_SMALL;
    const std::string why = placement_cpu_reason(n);
    CHECK(why.find("of test GPU does not hold the dense weights") != std::string::npos);
    CHECK(why.find("2 staging slots") != std::string::npos);
}
