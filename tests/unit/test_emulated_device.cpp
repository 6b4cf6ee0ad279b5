// The emulated device (a test double of a GPU) on random in-memory experts:
// under any residency, with every non-resident expert copied through S = 1,
// 2 or 3 staging slots, each task's output rows are bitwise what
// expert_ffn_bf16 gives on the CPU with as many threads; copied bytes are
// counted; a budget without room for its residents and staging slots is
// refused.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cpu_kernels/kernels.h"
#include "engine/devices/emulated_device.h"
#include "engine/model/cost.h"
#include "profiles/errors.h"

namespace {

// Random bf16 expert weights for config, owned here.
struct RandomExperts {
    ModelConfig config;
    ModelWeights weights;
    std::vector<bf16> data;

    RandomExperts(int n_layers, int n_experts, int dim, int hidden, uint32_t seed) {
        config.dim = dim;
        config.hidden_dim = hidden;
        config.n_layers = n_layers;
        config.n_experts = n_experts;
        const size_t mat = size_t(dim) * hidden;
        data.resize(size_t(n_layers) * n_experts * 3 * mat);
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-0.1f, 0.1f);
        for (bf16& v : data) v = f32_to_bf16(u(rng));
        weights.layers.resize(size_t(n_layers));
        const bf16* p = data.data();
        for (LayerWeights& lw : weights.layers) {
            lw.experts.resize(size_t(n_experts));
            for (ExpertWeights& e : lw.experts) {
                e = {weight_view(DType::BF16, p, hidden, dim), weight_view(DType::BF16, p + mat, hidden, dim),
                     weight_view(DType::BF16, p + 2 * mat, dim, hidden)};
                p += 3 * mat;
            }
        }
    }
};

}  // namespace

TEST_CASE("emulated device: every placement and staging count gives the CPU's outputs bitwise", "[emulated]") {
    // dim and hidden not multiples of 8, so the kernels' edge paths run too.
    RandomExperts m(3, 6, 72, 100, 5);
    const ModelConfig& c = m.config;
    const int threads = 2, max_tokens = 40;
    ThreadPool pool(threads);
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);

    for (int staging : {1, 2, 3}) {
        Residency residency = static_plan_random(c.n_layers, c.n_experts, 7, uint32_t(staging));
        const double eb = cost_expert(c, 0).bytes;
        EmulatedDevice device(c, m.weights, residency, double(residency.n_resident() + staging) * eb, max_tokens,
                              threads, staging);
        REQUIRE(device.staging_slots() == staging);
        REQUIRE(device.resident_bytes() == residency.n_resident() * eb);
        uint64_t copies = 0;
        std::vector<float> scratch(size_t(2) * max_tokens * c.hidden_dim);
        for (int l = 0; l < c.n_layers; l++) {
            INFO("S = " << staging << ", layer " << l);
            // Every expert routed, in a shuffled order, 1..max_tokens tokens each.
            std::vector<ExpertTask> tasks;
            std::vector<uint8_t> copy;
            int rows = 0;
            for (int e = 0; e < c.n_experts; e++) {
                int n = 1 + int(rng() % max_tokens);
                tasks.push_back({e, n, rows});
                rows += n;
            }
            std::shuffle(tasks.begin(), tasks.end(), rng);
            for (const ExpertTask& t : tasks) {
                copy.push_back(device.resident(l, t.expert) ? 0 : 1);
                copies += copy.back();
            }
            std::vector<float> x(size_t(rows) * c.dim), y(x.size(), -7.0f), expected(x.size());
            for (float& v : x) v = u(rng);
            device.start(l, {x.data(), y.data()}, tasks, copy);
            device.wait();
            for (const ExpertTask& t : tasks) {
                const ExpertWeights& w = m.weights.layers[size_t(l)].experts[size_t(t.expert)];
                const size_t row = size_t(t.row) * c.dim;
                expert_ffn(expected.data() + row, x.data() + row, w.w1, w.w3, w.w2, t.n_tokens, scratch.data(), pool);
            }
            REQUIRE(std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)) == 0);
        }
        REQUIRE(copies > 0);
        REQUIRE(device.copied_bytes() == copies * uint64_t(cost_expert(c, 0).bytes));
    }
}

TEST_CASE("emulated device: refuses a budget without room for its experts and staging slots", "[emulated]") {
    RandomExperts m(2, 4, 16, 24, 1);
    Residency half = static_plan_even(2, 4, 4);
    const double eb = cost_expert(m.config, 0).bytes;
    REQUIRE_THROWS_AS(EmulatedDevice(m.config, m.weights, half, 5 * eb, 8, 1), MoeError);  // two slots by default
    REQUIRE_THROWS_AS(EmulatedDevice(m.config, m.weights, half, 6 * eb, 8, 1, 3), MoeError);
    EmulatedDevice ok(m.config, m.weights, half, 6 * eb, 8, 1);
    REQUIRE(ok.staging_slots() == DEFAULT_STAGING_SLOTS);
    REQUIRE(ok.resident_bytes() == 4 * eb);
}
