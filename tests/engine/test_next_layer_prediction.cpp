// Next-layer expert prediction (ForwardPass::set_predict_next_layer): each
// MoE layer's experts predicted when the previous layer routes, from the
// residual stream its experts receive. It must change no logits, count
// tokens x top-k predictions for every MoE layer after the first, and be
// exactly right where neither the previous layer's experts nor the layer's
// attention add anything to the residual stream.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <vector>

#include "cpu_kernels/thread_pool.h"
#include "engine/devices/backend.h"
#include "engine/devices/expert_executor.h"
#include "engine/model/synth_model.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/token_mixer.h"
#include "profiles/routing_stats.h"

namespace {

struct Run {
    std::vector<float> logits;
    RoutingStats stats;
};

Run prefill(const ModelConfig& c, const ModelWeights& w, const std::vector<int>& tokens, bool predict) {
    const int n = int(tokens.size());
    ThreadPool pool(2);
    auto state = make_sequence_state(c, 1, 64, host_state_memory());
    SequenceState& cache = *state;
    CpuExpertExecutor executor(c, w, pool, n);
    std::unique_ptr<Backend> backend = make_cpu_backend(c, w, pool, 64, n * c.n_experts_active);
    ForwardPass forward(c, *backend, cache, executor, n, n);
    forward.set_predict_next_layer(predict);
    Batch batch;
    for (int i = 0; i < n; i++) batch.add(tokens[size_t(i)], i, 0, true);
    Run r{{}, RoutingStats(c.n_layers, c.n_experts)};
    const float* logits = forward.run(batch, &r.stats);
    r.logits.assign(logits, logits + size_t(n) * c.vocab_size);
    return r;
}

}  // namespace

TEST_CASE("next-layer prediction changes no logits and is counted for every MoE layer after the first",
          "[predict]") {
    for (const char* preset : {"tiny", "olmoe-mini"}) {
        SECTION(preset) {
            const ModelConfig c = synth_preset(synth_preset_parse(preset));
            const ModelWeights w = synth_weights(c, 3, 2);
            std::vector<int> tokens;
            for (int i = 0; i < 24; i++) tokens.push_back(300 + (i * 7919) % 20000);
            const Run off = prefill(c, w, tokens, false);
            const Run on = prefill(c, w, tokens, true);
            REQUIRE(on.logits.size() == off.logits.size());
            CHECK(std::memcmp(on.logits.data(), off.logits.data(), on.logits.size() * sizeof(float)) == 0);
            CHECK(on.stats.counts() == off.stats.counts());
            for (int l = 0; l < c.n_layers; l++) {
                INFO("layer " << l);
                CHECK(off.stats.predicted()[size_t(l)] == 0);
                const uint64_t want = l == 0 ? 0 : tokens.size() * uint64_t(c.n_experts_active);
                CHECK(on.stats.predicted()[size_t(l)] == want);
                CHECK(on.stats.predicted_right()[size_t(l)] <= want);
            }
            // A random router's residual stream moves between layers: some guesses miss.
            CHECK(on.stats.predicted_right()[1] < on.stats.predicted()[1]);
        }
    }
}

TEST_CASE("next-layer prediction is exactly right where the stream does not change in between", "[predict]") {
    const ModelConfig c = synth_preset(SynthPreset::OLMOE_MINI);
    ModelWeights w = synth_weights(c, 4, 2);
    // Layer 1's experts' down projections and layer 2's output projection
    // all zeros: layer 2's router sees what layer 1's router saw.
    const WeightView& wo = w.layers[2].wo;
    std::vector<char> zeros(std::max(wo.bytes(), w.layers[1].experts[0].w2.bytes()), 0);
    w.layers[2].wo = weight_view(wo.type, zeros.data(), wo.rows, wo.cols);
    for (ExpertWeights& e : w.layers[1].experts) e.w2 = weight_view(e.w2.type, zeros.data(), e.w2.rows, e.w2.cols);
    std::vector<int> tokens;
    for (int i = 0; i < 16; i++) tokens.push_back(500 + (i * 104729) % 30000);
    const Run on = prefill(c, w, tokens, true);
    CHECK(on.stats.predicted()[2] == tokens.size() * uint64_t(c.n_experts_active));
    CHECK(on.stats.predicted_right()[2] == on.stats.predicted()[2]);
    CHECK(on.stats.predicted_right()[3] < on.stats.predicted()[3]);
}
