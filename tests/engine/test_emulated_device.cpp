// The emulated device (a test double of a GPU) on random in-memory experts:
// under any residency, with every non-resident expert copied through S = 1,
// 2 or 3 staging slots, on every kernel path this CPU runs, each task's
// output rows are bitwise what expert_ffn gives on that path (the device on
// one thread, the CPU's call on two: the thread count changes no sum); copied
// bytes are counted; a budget without room for its residents and staging
// slots, or a path this CPU cannot run, is refused.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "alloc_count.h"
#include "base/errors.h"
#include "cpu_kernels/isa.h"
#include "cpu_kernels/kernels.h"
#include "engine/devices/emulated_device.h"
#include "engine/devices/hybrid_executor.h"
#include "engine/model/cost.h"
#include "engine/model/synth_model.h"
#include "test_support.h"

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
                     weight_view(DType::BF16, p + 2 * mat, dim, hidden), {}};
                p += 3 * mat;
            }
        }
    }
};

}  // namespace

TEST_CASE(
    "emulated device: every placement, staging count, cache slot and kernel path gives its path's outputs "
    "bitwise",
    "[emulated]") {
    // dim and hidden not multiples of 8, so the kernels' edge paths run too.
    RandomExperts m(3, 6, 72, 100, 5);
    const ModelConfig& c = m.config;
    const int max_tokens = 40;
    ThreadPool pool(2);
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);

    for (Isa isa : {Isa::SCALAR, Isa::AVX2, Isa::AVX512, Isa::AVX512BF16}) {
        if (!isa_supported(isa)) continue;
        const KernelTable& kernels = kernel_table(isa);
        for (int staging : {1, 2, 3}) {
            // The pinned experts, then two cache slots (empty at the start).
            Residency residency = static_plan_random(c.n_layers, c.n_experts, 7, uint32_t(staging));
            std::vector<SlotExpert> slots = ExpertPipeline::slots_of(residency);
            const int n_pinned = int(slots.size());
            slots.resize(slots.size() + 2);
            const double eb = cost_expert(c, 0).bytes;
            EmulatedDevice device(c, m.weights, slots, double(n_pinned + 2 + staging) * eb, max_tokens, 1, isa,
                                  staging);
            REQUIRE(device.isa() == isa);
            REQUIRE(device.threads() == 1);
            REQUIRE(device.staging_slots() == staging);
            REQUIRE(device.resident_slots() == n_pinned + 2);
            REQUIRE(device.resident_bytes() == (n_pinned + 2) * eb);
            uint64_t copies = 0;
            std::vector<float> scratch(size_t(2) * max_tokens * c.hidden_dim);
            for (int l = 0; l < c.n_layers; l++) {
                INFO(isa_name(isa) << ", S = " << staging << ", layer " << l);
                // Every expert routed, in a shuffled order, 1..max_tokens tokens each.
                std::vector<ExpertTask> tasks;
                std::vector<DeviceTask> device_tasks;
                int rows = 0;
                for (int e = 0; e < c.n_experts; e++) {
                    int n = 1 + int(rng() % max_tokens);
                    tasks.push_back({e, n, rows});
                    rows += n;
                }
                std::shuffle(tasks.begin(), tasks.end(), rng);
                // Resident experts from their slot (a cache slot's expert came
                // with an earlier layer's copy); the others copied, alternately
                // into a cache slot (evicting what it held) and a staging slot.
                int j = 0;
                for (const ExpertTask& t : tasks) {
                    int slot = -1;
                    for (int s = 0; s < device.resident_slots(); s++)
                        if (device.slots()[size_t(s)].layer == l && device.slots()[size_t(s)].expert == t.expert)
                            slot = s;
                    if (slot >= 0) {
                        device_tasks.push_back({t, slot, false});
                    } else {
                        device_tasks.push_back({t, j % 2 ? -1 : n_pinned + (j / 2) % 2, true});
                        copies++;
                        j++;
                    }
                }
                // A prefetch of the next layer's first expert not resident, into the
                // cache slot this layer did not copy into last.
                std::vector<SlotCopy> extra;
                if (l + 1 < c.n_layers)
                    for (int e = 0; e < c.n_experts && extra.empty(); e++) {
                        bool resident = false;
                        for (const SlotExpert& h : device.slots())
                            resident = resident || (h.layer == l + 1 && h.expert == e);
                        if (!resident) extra.push_back({l + 1, e, n_pinned + 1});
                    }
                copies += extra.size();
                std::vector<float> x(size_t(rows) * c.dim), y(x.size(), -7.0f), expected(x.size());
                for (float& v : x) v = u(rng);
                device.start(l, {x.data(), y.data()}, device_tasks, extra);
                device.wait();
                for (const ExpertTask& t : tasks) {
                    const ExpertWeights& w = m.weights.layers[size_t(l)].experts[size_t(t.expert)];
                    const size_t row = size_t(t.row) * c.dim;
                    expert_ffn(kernels, expected.data() + row, x.data() + row, w.w1, w.w3, w.w2, t.n_tokens,
                               scratch.data(), pool);
                }
                REQUIRE(std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)) == 0);
            }
            REQUIRE(copies > 0);
            REQUIRE(device.copied_bytes() == copies * uint64_t(cost_expert(c, 0).bytes));
        }
    }
}

TEST_CASE("emulated device: refuses a budget without room for its experts and staging slots", "[emulated]") {
    RandomExperts m(2, 4, 16, 24, 1);
    Residency half = static_plan_even(2, 4, 4);
    const double eb = cost_expert(m.config, 0).bytes;
    // two slots by default
    REQUIRE_THROWS_AS(EmulatedDevice(m.config, m.weights, half, 5 * eb, 8, 1, Isa::SCALAR), MoeError);
    REQUIRE_THROWS_AS(EmulatedDevice(m.config, m.weights, half, 6 * eb, 8, 1, Isa::SCALAR, 3), MoeError);
    EmulatedDevice ok(m.config, m.weights, half, 6 * eb, 8, 1, Isa::SCALAR);
    REQUIRE(ok.staging_slots() == DEFAULT_STAGING_SLOTS);
    REQUIRE(ok.resident_bytes() == 4 * eb);
    // A path this CPU cannot run, named.
    for (Isa isa : {Isa::AVX2, Isa::AVX512, Isa::AVX512BF16}) {
        if (isa_supported(isa)) continue;
        const std::string error = moe_error_of([&] { EmulatedDevice(m.config, m.weights, half, 6 * eb, 8, 1, isa); });
        REQUIRE(error.find(std::string("cannot run the ") + isa_name(isa)) != std::string::npos);
    }
}

namespace {

// TEST DOUBLES for the allocation count: a CPU side that computes nothing,
// and a device that runs the real ExpertPipeline over a queue that does
// nothing (the kernels, which are not the cache's, stay out of the count).
class NoCompute final : public ExpertExecutor {
public:
    void run_layer(int, const ExpertRows&, std::span<const ExpertTask>, const NextLayerGuess&) override {}
    const char* name() const override { return "no compute (test double)"; }
};

class NullQueue final : public DeviceQueue {
public:
    void copy(int, int, WeightSlot) override {}
    void compute(int, const ExpertRows&, const ExpertTask&, WeightSlot) override {}
    void record(int, QueueStream) override {}
    void wait(QueueStream, int) override {}
    void host_wait(int) override {}
};

class PipelineOnlyDevice final : public ExpertDevice {
public:
    PipelineOnlyDevice(const ModelConfig& c, std::span<const SlotExpert> slots)
        : ExpertDevice(c.n_layers, c.n_experts, slots, DEFAULT_STAGING_SLOTS, 0, 0) {}
    const char* name() const override { return "pipeline only (test double)"; }
    void start(int layer, const ExpertRows& rows, std::span<const DeviceTask> tasks,
               std::span<const SlotCopy> extra) override {
        pipeline_.start(queue_, layer, rows, tasks, extra);
    }
    void wait() override { pipeline_.wait(queue_); }

private:
    NullQueue queue_;
};

}  // namespace

TEST_CASE("the hybrid executor with the expert cache and prefetch allocates nothing per layer", "[emulated][cache]") {
    // Random layers of the mixtral-mini shape (8 experts, top-2) through the
    // executor: lookups, plans, admissions and evictions, prefetches and
    // fills, the device's pipeline and the statistics. After a warm-up, no
    // layer makes a heap allocation.
    const ModelConfig c = synth_preset(SynthPreset::MIXTRAL_MINI);
    ModelWeights w;  // the executor reads no weights: its CPU side and device are test doubles
    ThreadPool pool(1);
    LatencyModel model;  // a lone miss stays on the CPU with a fill beside it; busy experts are copied
    model.cpu = {0, 2.0, 0.5};
    model.device = {0, 0.5, 0};
    model.copy = {1.6, 1e12};
    model.has_device = true;
    for (CachePolicy policy : {CachePolicy::LRU, CachePolicy::LFU, CachePolicy::SCORE}) {
        INFO(cache_policy_name(policy));
        CachedPlacementConfig config;
        config.policy = policy;
        config.cache_slots = c.n_layers;
        config.prefetch = true;
        std::unique_ptr<CachedPlacement> placement =
            make_cached_placement(c, model, 1e6, static_plan_even(c.n_layers, c.n_experts, c.n_layers), {}, config);
        PipelineOnlyDevice device(c, device_slots(c, *placement));
        NoCompute cpu;
        std::unique_ptr<Backend> backend = make_cpu_backend(c, w, pool, 16, 16 * c.n_experts_active);
        HybridExpertExecutor hybrid(c, *backend, cpu, &device, std::move(placement));
        std::mt19937 rng(3);
        std::vector<ExpertTask> tasks, guess;
        tasks.reserve(size_t(c.n_experts));
        guess.reserve(size_t(c.n_experts));
        auto random_layer = [&](std::vector<ExpertTask>& out, int max_tokens) {
            out.clear();
            int row = 0;
            for (int e = 0; e < c.n_experts; e++)
                if (rng() % 4 == 0) {
                    const int n = 1 + int(rng() % uint32_t(max_tokens));
                    out.push_back({e, n, row});
                    row += n;
                }
        };
        long allocations = 0;
        for (int pass = 0; pass < 64; pass++) {
            const long before = global_allocation_count();
            for (int l = 0; l < c.n_layers; l++) {
                random_layer(tasks, pass % 8 == 0 ? 12 : 1);
                random_layer(guess, 1);
                const NextLayerGuess next{l + 1 < c.n_layers ? l + 1 : -1, guess};
                hybrid.run_layer(l, backend->expert_rows(), tasks, next);
            }
            if (pass >= 8) allocations += global_allocation_count() - before;
        }
        const ExecutionStats& s = hybrid.step();
        INFO("cache hits " << s.cache_hits << ", evictions " << s.cache_evictions << ", fills " << s.cache_fills
                           << ", prefetches " << s.prefetch_copies);
        REQUIRE(s.cache_evictions > 0);
        REQUIRE(s.cache_fills > 0);
        REQUIRE(s.prefetch_copies > 0);
        REQUIRE(allocations == 0);
    }
}
