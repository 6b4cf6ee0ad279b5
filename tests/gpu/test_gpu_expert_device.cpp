// CudaExpertDevice on a real device (label gpu): a layer's experts, pinned,
// cached, or copied into a cache slot (evicting) or through S = 1, 2, 3
// staging slots by either copy source, with prefetches beside them, give
// the CPU expert FFN's outputs; copied bytes are counted; the device's busy
// time is measured. Skipped where no CUDA device exists.
//
// Tolerance: the device's GEMMs round their inputs (x and the SwiGLU
// product) to bf16, where the CPU keeps them fp32: outputs agree within
// FFN_TOL * (1 + max |CPU output|).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu_kernels/kernels.h"
#include "engine/devices/cuda_backend.h"
#include "engine/devices/cuda_expert_device.h"
#include "engine/model/cost.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "gpu_support.h"
#include "placement/residency.h"
#include "server/placement_text.h"
#include "test_support.h"

namespace {

constexpr double FFN_TOL = 0.02;

}  // namespace

TEST_CASE("the CUDA expert device computes resident and copied experts like the CPU", "[gpu]") {
    GPU_TEST_OR_SKIP();
    std::filesystem::path dir = test_model_dir("small");
    ModelConfig c = model_config_load(dir);
    ModelWeights w = weights_load(c, dir);
    ThreadPool pool(2);
    const int layer = 1, dim = c.dim;
    const int max_tokens = 40;

    // One task per expert of the layer, 1..max_tokens tokens each, rows in order.
    std::mt19937 rng(7);
    std::vector<ExpertTask> tasks;
    int rows = 0;
    for (int e = 0; e < c.n_experts; e++) {
        int n = 1 + int(rng() % max_tokens);
        tasks.push_back({e, n, rows});
        rows += n;
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(size_t(rows) * dim), want(size_t(rows) * dim);
    for (float& v : x) v = normal(rng);
    std::vector<float> scratch(size_t(2) * max_tokens * c.hidden_dim);
    for (const ExpertTask& t : tasks) {
        const ExpertWeights& e = w.layers[layer].experts[t.expert];
        expert_ffn(want.data() + size_t(t.row) * dim, x.data() + size_t(t.row) * dim, e.w1, e.w3, e.w2, t.n_tokens,
                   scratch.data(), pool);
    }
    double scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(double(v)));

    CudaBackend backend(c, w, 0, 64, max_tokens, max_tokens * c.n_experts_active);
    GpuBuffer dx(x.size() * sizeof(float)), dy(x.size() * sizeof(float));
    gpu_copy_h2d(dx.data(), x.data(), x.size() * sizeof(float), backend.stream());
    // Half the layer's experts pinned (the even ones), then two cache
    // slots, empty at the start; the rest copied.
    Residency residency(c.n_layers, c.n_experts);
    for (int e = 0; e < c.n_experts; e += 2) residency.set(layer, e, true);
    std::vector<SlotExpert> slots = ExpertPipeline::slots_of(residency);
    const int n_pinned = int(slots.size());
    slots.resize(slots.size() + 2);

    for (CopyMode mode : {CopyMode::STAGED, CopyMode::REGISTERED})
        for (int staging : {1, 2, 3}) {
            INFO("copy mode " << int(mode) << ", " << staging << " staging slots");
            const double budget = double(n_pinned + 2 + staging) * cost_expert(c, 0).bytes;
            CudaExpertDevice device(c, w, slots, n_pinned, budget, max_tokens, backend.stream(), backend.blas(),
                                    staging, mode);
            INFO(copy_source_text(device.copy_source()));
            size_t n_copied = 0;
            for (int round = 0; round < 3; round++) {
                // Round 0: the first odd expert copied into cache slot 0, the
                // others through staging slots, and the next layer's expert 1
                // prefetched into cache slot 1. Round 1: the cached expert
                // from its slot; the next odd one copied into cache slot 0,
                // evicting it while it is read. Each round prefetches another
                // expert into cache slot 1 over the last one.
                std::vector<DeviceTask> device_tasks;
                int to_cache = round == 2 ? -1 : 1 + 2 * round;
                for (const ExpertTask& t : tasks) {
                    int slot = -1;
                    for (int s = 0; s < device.resident_slots(); s++)
                        if (device.slots()[size_t(s)].layer == layer && device.slots()[size_t(s)].expert == t.expert)
                            slot = s;
                    if (slot >= 0) {
                        device_tasks.push_back({t, slot, false});
                    } else {
                        device_tasks.push_back({t, t.expert == to_cache ? n_pinned : -1, true});
                        n_copied++;
                    }
                }
                std::vector<SlotCopy> extra{{(layer + 1) % c.n_layers, 1 + 2 * round, n_pinned + 1}};
                n_copied += extra.size();
                gpu_memset(dy.data(), 0, x.size() * sizeof(float), backend.stream());
                device.start(layer, {dx.as<float>(), dy.as<float>()}, device_tasks, extra);
                device.wait();
                std::vector<float> got(x.size());
                gpu_copy_d2h(got.data(), dy.data(), got.size() * sizeof(float), backend.stream());
                gpu_synchronize();
                double worst = 0;
                for (size_t i = 0; i < got.size(); i++) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
                INFO("round " << round << ": max |gpu - cpu| " << worst << ", tolerance " << FFN_TOL * (1 + scale));
                REQUIRE(worst <= FFN_TOL * (1 + scale));
                REQUIRE(device.last_busy_ms() > 0);
            }
            REQUIRE(device.copied_bytes() == n_copied * cost_expert(c, 0).bytes);
            REQUIRE(device.slots()[size_t(n_pinned)].expert == 3);  // evicted 1, then held 3
            REQUIRE(device.slots()[size_t(n_pinned + 1)].expert == 5);
        }
}
