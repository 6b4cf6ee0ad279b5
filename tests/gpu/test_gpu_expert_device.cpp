// CudaExpertDevice on a real device (label gpu): a layer's experts, resident
// or copied through S = 1, 2, 3 staging slots by either copy source, give
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
    // Half the layer's experts resident (the even ones), the rest copied.
    Residency residency(c.n_layers, c.n_experts);
    for (int e = 0; e < c.n_experts; e += 2) residency.set(layer, e, true);
    std::vector<uint8_t> copy(tasks.size());
    for (size_t i = 0; i < tasks.size(); i++) copy[i] = residency.resident(layer, tasks[i].expert) ? 0 : 1;
    const size_t n_copied = size_t(std::count(copy.begin(), copy.end(), 1));

    for (CopyMode mode : {CopyMode::STAGED, CopyMode::REGISTERED})
        for (int slots : {1, 2, 3}) {
            INFO("copy mode " << int(mode) << ", " << slots << " staging slots");
            const double budget = double(residency.n_resident() + slots) * cost_expert(c, 0).bytes;
            CudaExpertDevice device(c, w, residency, budget, max_tokens, backend.stream(), backend.blas(), slots, mode);
            INFO(device.copy_source().describe());
            for (int round = 0; round < 2; round++) {  // the second reuses slots the first filled
                gpu_memset(dy.data(), 0, x.size() * sizeof(float), backend.stream());
                device.start(layer, {dx.as<float>(), dy.as<float>()}, tasks, copy);
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
            REQUIRE(device.copied_bytes() == 2 * n_copied * cost_expert(c, 0).bytes);
        }
}
