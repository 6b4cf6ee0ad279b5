// The whole model on a CUDA device against the CPU (label gpu): logits of
// prefill, decode and forked beams on tiny, small and mixtral-mini (and the
// Qwen3-MoE, OLMoE and Qwen2-MoE presets: q/k norms, biases, the shared
// expert on the device's dense path; gpt-oss-mini: MXFP4 experts with their
// biases in the device slots, sinks, sliding windows, YaRN), under
// three placements (nothing resident with every expert copied; half
// resident with the rest on the CPU; the planner's own plan), and Q8_0 and
// Q4_K_M GGUFs of small written by `quantize` (quantized weights on the
// device; the GPU machine carries no reference files), decoding
// teacher-forced on the CPU's greedy tokens; perplexity through the Session;
// device memory flat over 100 requests. Each test reports itself skipped
// where no CUDA device exists.
//
// Tolerance: support/logit_compare.h, one criterion per position (the
// device's bf16 rounding of GEMM inputs may flip a router near-tie at a few
// positions); tests/engine/test_device_rounding.cpp checks the criterion
// holds for the CPU with the device's rounding.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/devices/cuda_backend.h"
#include "engine/devices/cuda_expert_device.h"
#include "engine/devices/hybrid_executor.h"
#include "engine/model/cost.h"
#include "engine/model/model_source.h"
#include "engine/model/weights.h"
#include "engine/runtime/session.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/token_mixer.h"
#include "gpu_support.h"
#include "logit_compare.h"
#include "placement/latency_model.h"
#include "placement/residency.h"
#include "test_support.h"

namespace {

constexpr int MAX_BATCH = 128;
constexpr int CTX = 256;

// Latency models that force the planner's hand, and a realistic one.
LatencyModel model_copy_all() {
    LatencyModel m;
    m.cpu = {0, 1000, 1000};
    m.device = {0, 0.001, 0.0001};
    m.copy = {0.001, 1e12};
    m.has_device = true;
    m.staging_slots = DEFAULT_STAGING_SLOTS;
    return m;
}

LatencyModel model_cpu_rest() {
    LatencyModel m;
    m.cpu = {0, 0.001, 0.0001};
    m.device = {0, 1000, 1000};
    m.copy = {1000, 1};
    m.has_device = true;
    m.staging_slots = DEFAULT_STAGING_SLOTS;
    return m;
}

LatencyModel model_planner(const ModelConfig& c) {
    LatencyModel m =
        latency_model_nominal_gpu(LatencyCurve{0.05, 0.6, 0.05}, cost_expert(c, 0).bytes, 6.0 * c.dim * c.hidden_dim);
    m.staging_slots = DEFAULT_STAGING_SLOTS;
    return m;
}

// One forward-pass stack: CPU only, or CUDA with a residency and a model.
struct Stack {
    ModelConfig config;
    ModelWeights weights;
    ThreadPool pool{2};
    std::unique_ptr<Backend> backend;
    std::unique_ptr<SequenceState> cache;
    std::unique_ptr<CpuExpertExecutor> cpu;
    std::unique_ptr<ExpertDevice> device;
    std::unique_ptr<HybridExpertExecutor> hybrid;
    std::unique_ptr<ForwardPass> forward;

    // model: a folder or a GGUF file (model_source.h).
    // residency: the pinned experts (null: no device); cache: the cache
    // slots beyond them, their policy and prefetch.
    Stack(const std::filesystem::path& model, const Residency* residency, const LatencyModel& model_latency,
          int n_seqs = 1, const CachedPlacementConfig& cache_config = {})
        : config(model_source_config(model_source_parse(model.string()))),
          weights(model_source_weights(model_source_parse(model.string()), config, 2)) {
        const int max_rows = MAX_BATCH * config.n_experts_active;
        const double expert_bytes = cost_expert(config, 0, weight_format(weights)).bytes;
        const Residency no_pinned(config.n_layers, std::max(1, config.n_experts));
        std::unique_ptr<CachedPlacement> placement =
            make_cached_placement(config, residency ? model_latency : LatencyModel{}, expert_bytes,
                                  residency ? *residency : no_pinned, {}, cache_config);
        if (residency) {
            auto cuda = std::make_unique<CudaBackend>(config, weights, 0, CTX, MAX_BATCH, max_rows);
            size_t slot = 0;  // the device's slot: the largest layer's expert
            for (const LayerWeights& L : weights.layers) slot = std::max(slot, L.experts[0].bytes());
            const double budget = double(placement->n_slots() + DEFAULT_STAGING_SLOTS) * double(slot);
            device = std::make_unique<CudaExpertDevice>(config, weights, device_slots(config, *placement),
                                                        placement->n_pinned(), budget, MAX_BATCH, cuda->stream(),
                                                        cuda->blas(), DEFAULT_STAGING_SLOTS);
            backend = std::move(cuda);
        } else {
            backend = make_cpu_backend(config, weights, pool, CTX, max_rows);
        }
        cache = make_sequence_state(config, n_seqs, CTX, backend->state_memory());
        cpu = std::make_unique<CpuExpertExecutor>(config, weights, pool, MAX_BATCH);
        hybrid = std::make_unique<HybridExpertExecutor>(config, *backend, *cpu, device.get(), std::move(placement));
        forward = std::make_unique<ForwardPass>(config, *backend, *cache, *hybrid, MAX_BATCH, MAX_BATCH);
    }
};

std::vector<int> prompt_tokens(int n, int vocab) {
    std::vector<int> t{1};
    for (int i = 1; i < n; i++) t.push_back(1 + (i * 7919 + 13) % (vocab - 1));
    return t;
}

// Prefill of the prompt (every position's logits), then greedy decoding
// that follows `tokens` when given (teacher forcing) or its own argmax.
struct Trace {
    std::vector<float> logits;  // (positions, vocab)
    std::vector<int> tokens;    // chosen after the prompt
};

Trace run(Stack& s, const std::vector<int>& prompt, int n_decode, const std::vector<int>* follow) {
    const int vocab = s.config.vocab_size;
    Trace t;
    Batch batch;
    batch.reserve(MAX_BATCH);
    for (int i = 0; i < int(prompt.size()); i++) batch.add(prompt[i], i, 0, true);
    const float* l = s.forward->run(batch);
    t.logits.assign(l, l + prompt.size() * size_t(vocab));
    const float* last = l + (prompt.size() - 1) * size_t(vocab);
    for (int step = 0; step < n_decode; step++) {
        int token = follow ? (*follow)[step] : int(std::max_element(last, last + vocab) - last);
        t.tokens.push_back(token);
        batch.clear();
        batch.add(token, int(prompt.size()) + step, 0, true);
        last = s.forward->run(batch);
        t.logits.insert(t.logits.end(), last, last + vocab);
    }
    return t;
}

}  // namespace

TEST_CASE("whole-model logits match the CPU under every placement", "[gpu]") {
    GPU_TEST_OR_SKIP();
    for (const char* preset :
         {"tiny", "small", "mixtral-mini", "qwen3-moe-mini", "olmoe-mini", "qwen2-moe-mini", "gpt-oss-mini"}) {
        std::filesystem::path dir = test_model_dir(preset);
        Stack cpu(dir, nullptr, {});
        const ModelConfig& c = cpu.config;
        const std::vector<int> prompt = prompt_tokens(preset == std::string("mixtral-mini") ? 100 : 40, c.vocab_size);
        const int n_decode = 16;
        Trace want = run(cpu, prompt, n_decode, nullptr);

        const int total = c.n_layers * c.n_experts;
        Residency none(c.n_layers, c.n_experts);
        Residency half = static_plan_even(c.n_layers, c.n_experts, total / 2);
        Residency quarter = static_plan_even(c.n_layers, c.n_experts, total / 4);
        struct Placement {
            const char* name;
            const Residency* residency;
            LatencyModel model;
        };
        for (const Placement& p : {Placement{"nothing resident, every expert copied", &none, model_copy_all()},
                                   Placement{"half resident, the rest on the CPU", &half, model_cpu_rest()},
                                   Placement{"a quarter resident, the planner's plan", &quarter, model_planner(c)}}) {
            INFO(preset << ": " << p.name);
            Stack gpu(dir, p.residency, p.model);
            Trace got = run(gpu, prompt, n_decode, &want.tokens);
            require_logits_close(got.logits, want.logits, c.vocab_size);
            const ExecutionStats& st = gpu.hybrid->step();
            if (p.residency == &none) REQUIRE(st.runs[int(ExpertSite::COPY)] > 0);
            if (p.residency == &half) REQUIRE(st.runs[int(ExpertSite::CPU)] > 0);
            REQUIRE(st.runs[int(ExpertSite::DEVICE)] + st.runs[int(ExpertSite::COPY)] > 0);
        }
    }
}

TEST_CASE("the device with the expert cache and prefetch gives the CPU's logits", "[gpu]") {
    // A quarter of the experts pinned and an eighth as cache slots, every
    // policy with prefetch: copies land in cache slots and evict, prefetches
    // and fills run on the copy stream beside the layers.
    GPU_TEST_OR_SKIP();
    for (const char* preset : {"small", "mixtral-mini"}) {
        std::filesystem::path dir = test_model_dir(preset);
        Stack cpu(dir, nullptr, {});
        const ModelConfig& c = cpu.config;
        const std::vector<int> prompt = prompt_tokens(60, c.vocab_size);
        const int n_decode = 24;
        Trace want = run(cpu, prompt, n_decode, nullptr);
        const int total = c.n_layers * c.n_experts;
        Residency quarter = static_plan_even(c.n_layers, c.n_experts, total / 4);
        for (CachePolicy policy : {CachePolicy::LRU, CachePolicy::LFU, CachePolicy::SCORE})
            for (const LatencyModel& model : {model_copy_all(), model_planner(c)}) {
                INFO(preset << ": " << cache_policy_name(policy) << ", cpu stream " << model.cpu.stream_ms);
                CachedPlacementConfig cache;
                cache.policy = policy;
                cache.cache_slots = std::max(1, total / 8);
                cache.prefetch = true;
                Stack gpu(dir, &quarter, model, 1, cache);
                Trace got = run(gpu, prompt, n_decode, &want.tokens);
                require_logits_close(got.logits, want.logits, c.vocab_size);
                const ExecutionStats& st = gpu.hybrid->step();
                REQUIRE(st.copy_bytes == gpu.device->copied_bytes());
                REQUIRE(st.cache_hits + st.prefetch_copies + st.cache_fills > 0);
            }
    }
}

TEST_CASE("quantized GGUF weights on the device give the CPU's logits", "[gpu]") {
    GPU_TEST_OR_SKIP();
    for (const char* file : {"q8_0", "q4_k_m"}) {
        // Which tool wrote the file does not matter here: the CPU and the
        // device read the same loaded weights (the loader is checked against
        // llama.cpp's own files in test_gguf_model.cpp).
        const std::filesystem::path path = test_temp_dir("gpu-gguf") / (std::string("small-") + file + ".gguf");
        CommandResult q = moe({"quantize", "--model", test_model_dir("small").string(), "--type", file, "--out",
                               path.string(), "--threads", "2"});
        INFO(q.err);
        REQUIRE(q.exit_code == 0);
        Stack cpu(path, nullptr, {});
        const ModelConfig& c = cpu.config;
        const std::vector<int> prompt = prompt_tokens(100, c.vocab_size);  // as test_device_rounding.cpp
        Trace want = run(cpu, prompt, 16, nullptr);
        Residency none(c.n_layers, c.n_experts);
        Residency half = static_plan_even(c.n_layers, c.n_experts, c.n_layers * c.n_experts / 2);
        for (auto [name, residency, model] :
             {std::tuple{"nothing resident, every expert copied", &none, model_copy_all()},
              std::tuple{"half resident, the planner's plan", &half, model_planner(c)}}) {
            INFO(file << ": " << name);
            Stack gpu(path, residency, model);
            Trace got = run(gpu, prompt, 16, &want.tokens);
            require_logits_close(got.logits, want.logits, c.vocab_size);
            const ExecutionStats& st = gpu.hybrid->step();
            REQUIRE(st.runs[int(ExpertSite::DEVICE)] + st.runs[int(ExpertSite::COPY)] > 0);
        }
    }
}

TEST_CASE("forked beams on the device give the CPU's logits", "[gpu]") {
    GPU_TEST_OR_SKIP();
    std::filesystem::path dir = test_model_dir("small");
    auto beams = [&](Stack& s) {
        const int vocab = s.config.vocab_size;
        std::vector<int> prompt = prompt_tokens(19, vocab);  // 19: the forks share a partial block
        Batch batch;
        for (int i = 0; i < int(prompt.size()); i++) batch.add(prompt[i], i, 0, false);
        s.forward->run(batch);
        batch.clear();
        for (int b = 1; b <= 4; b++) {
            s.cache->fork(b, 0, int(prompt.size()));
            batch.add(500 + 100 * b, int(prompt.size()), b, true);  // each beam writes into the shared block
        }
        const float* l = s.forward->run(batch);
        std::vector<float> out(l, l + 4 * size_t(vocab));
        batch.clear();
        for (int b = 1; b <= 4; b++) batch.add(900 + b, int(prompt.size()) + 1, b, true);
        l = s.forward->run(batch);
        out.insert(out.end(), l, l + 4 * size_t(vocab));
        return out;
    };
    Stack cpu(dir, nullptr, {}, 5);
    std::vector<float> want = beams(cpu);
    const ModelConfig& c = cpu.config;
    Residency quarter = static_plan_even(c.n_layers, c.n_experts, c.n_layers * c.n_experts / 4);
    Stack gpu(dir, &quarter, model_planner(c), 5);
    require_logits_close(beams(gpu), want, c.vocab_size);
}

TEST_CASE("the engine on the device scores text like the CPU and keeps device memory flat", "[gpu]") {
    GPU_TEST_OR_SKIP();
    std::filesystem::path dir = test_model_dir("small");
    auto engine_for = [&](bool gpu) {
        SessionOptions o;
        o.threads = 2;
        o.ctx = CTX;
        o.device.gpu_device = gpu ? 0 : -1;
        o.device.gpu_required = gpu;
        if (gpu) o.device.gpu_memory_bytes = 2.0 * double(1u << 30);
        return std::make_unique<Session>(load_model({dir, o.threads}), o);
    };
    auto cpu = engine_for(false);
    auto gpu = engine_for(true);
    REQUIRE(gpu->placement().device == DeviceKind::CUDA);
    std::vector<int> tokens = prompt_tokens(120, cpu->model().config().vocab_size);
    Session::Score a = cpu->score(tokens, 64), b = gpu->score(tokens, 64);
    REQUIRE(a.n_scored == b.n_scored);
    INFO("nll cpu " << a.nll_sum << ", gpu " << b.nll_sum);
    REQUIRE(std::fabs(a.nll_sum - b.nll_sum) <= 0.01 * std::fabs(a.nll_sum));

    GenerateRequest g;
    g.prompt = prompt_tokens(30, gpu->model().config().vocab_size);
    g.sampling.temperature = 0;
    g.max_tokens = 8;
    g.reuse_prefix = false;
    auto ignore = [](const TokenEvent&) { return true; };
    gpu->generate(g, ignore);
    size_t free_after_first = gpu_free_bytes();
    for (int i = 0; i < 100; i++) {
        g.prompt[1 + i % 20] = 100 + i;
        gpu->generate(g, ignore);
    }
    INFO("device free bytes after request 1: " << free_after_first << ", after 101: " << gpu_free_bytes());
    REQUIRE(gpu_free_bytes() == free_after_first);
}

