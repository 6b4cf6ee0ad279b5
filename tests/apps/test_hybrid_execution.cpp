// Hybrid expert execution: any placement of experts (all on the CPU,
// resident on the emulated device, copied to it per layer, or a mix the
// planner chooses, with or without the cache and prefetch) gives the
// all-CPU logits on prefill and decode. The emulated device computes on
// another kernel path than the CPU side (kernel_paths below), so, as with a
// real GPU, its experts sum in another order and the logits agree within a
// tolerance derived from the arithmetic (logit_tolerance), not bitwise; one
// case checks that they really differ. What must still hold exactly: the
// routing decisions (every token's experts in every MoE layer), the greedy
// tokens, and the statistics adding up (tokens and runs by site, copied
// bytes). Also: the emulated device counts the bytes it copies, and the
// engine, CLI and flags behave (`--emulate-gpu` gives the device the CPU's
// own path, so the engine test's tokens are the CPU's).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "base/errors.h"
#include "checkpoint_writer.h"
#include "cpu_kernels/isa.h"
#include "cpu_kernels/kernels.h"
#include "engine/devices/emulated_device.h"
#include "engine/devices/expert_executor.h"
#include "engine/devices/hybrid_executor.h"
#include "engine/model/cost.h"
#include "engine/model/fingerprint.h"
#include "engine/model/weights.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/session.h"
#include "engine/runtime/token_mixer.h"
#include "placement/cache_replay.h"
#include "placement/residency.h"
#include "profiles/routing_trace.h"
#include "server/placement_text.h"
#include "test_support.h"

namespace {

// Latency models that force the planner's hand, and ones that make it mix.
LatencyModel device_model(LatencyCurve cpu, LatencyCurve device, CopyCurve copy) {
    LatencyModel m;
    m.cpu = cpu;
    m.device = device;
    m.copy = copy;
    m.has_device = true;
    return m;
}

LatencyModel model_cpu_slow() {  // every non-resident expert is copied
    return device_model({0, 1000, 1000}, {0, 0.001, 0.0001}, {0.001, 1e12});
}

LatencyModel model_device_slow() {  // every non-resident expert stays on the CPU
    return device_model({0, 0.001, 0.0001}, {0, 1000, 1000}, {1000, 1});
}

LatencyModel model_mixed(double expert_bytes) {  // copying pays off only for busy experts
    return device_model({0.01, 1.0, 0.2}, {0.01, 0.05, 0.002}, {0.05, expert_bytes / 2.0});  // 2 ms per expert
}

LatencyModel model_fill() {  // a lone miss stays on the CPU (2 ms < 1.6 + 0.5) and a copy fits beside it
    return device_model({0, 2.0, 0}, {0, 0.5, 0}, {1.6, 1e12});
}

// The kernel paths of the two sides. Both multiply bf16 weights by fp32
// activations and accumulate in fp32, in different orders. cpu: the active
// path, or avx512 where that is avx512bf16 (which rounds the activations to
// bf16, a far larger difference than the order of sums, enough to flip
// near-tied routing); device: scalar (one sequential sum per dot product,
// std::exp), or avx2 when the CPU side is scalar. The same only on a CPU
// without AVX2 running the scalar path.
struct KernelPaths {
    Isa cpu;
    Isa device;
};

// Block-quantized experts (gpt-oss's MXFP4) take the kernel table's own
// crossover between int8 activations and dequantized bf16 weights, which
// differs between paths by design: there both sides run the CPU's path, and
// the placement is what the comparison sees.
KernelPaths kernel_paths(bool quantized_experts = false) {
    const Isa cpu = isa_active() == Isa::AVX512BF16 ? Isa::AVX512 : isa_active();
    const Isa device = quantized_experts  ? cpu
                       : cpu != Isa::SCALAR ? Isa::SCALAR
                       : isa_supported(Isa::AVX2) ? Isa::AVX2
                                                  : Isa::SCALAR;
    return {cpu, device};
}

bool quantized_experts(const ModelWeights& w) {
    for (const LayerWeights& L : w.layers)
        if (!L.experts.empty() && dtype_quantized(L.experts[0].w1.type)) return true;
    return false;
}

// The CPU side's kernel path while it lives (isa_select is process-wide).
class CpuPath {
public:
    explicit CpuPath(Isa isa) : saved_(isa_active()) {
        if (!isa_select(isa)) throw std::runtime_error(std::string("cannot select ") + isa_name(isa));
    }
    ~CpuPath() { isa_select(saved_); }
    CpuPath(const CpuPath&) = delete;
    CpuPath& operator=(const CpuPath&) = delete;

private:
    Isa saved_;
};

// The device's threads: fewer than the CPU side's 2, so it also splits every
// matrix's rows differently (which must change nothing: a row's sum never
// depends on which thread's range holds it).
constexpr int DEVICE_THREADS = 1;

// Every routing decision of a run, in order: per pass and MoE layer, each
// entry's experts, sorted (their order only orders the token's sum). Passes
// each call on to `next` (a trace recorder) when there is one.
class RoutingLog final : public RoutingObserver {
public:
    explicit RoutingLog(RoutingObserver* next) : next_(next) {}
    void on_pass(std::span<const int> positions) override {
        if (next_) next_->on_pass(positions);
    }
    void on_route(int layer, int n, int k, const int* experts, const float* weights) override {
        for (int i = 0; i < n; i++) {
            const size_t at = choices.size();
            choices.insert(choices.end(), experts + size_t(i) * k, experts + size_t(i + 1) * k);
            std::sort(choices.begin() + long(at), choices.end());
        }
        if (next_) next_->on_route(layer, n, k, experts, weights);
    }
    std::vector<int> choices;

private:
    RoutingObserver* next_;
};

struct Run {
    std::vector<float> logits;  // every position of the prefill, then each decode step
    std::vector<int> tokens;    // the greedy token after the prefill and after each decode step
    std::vector<int> routes;    // RoutingLog::choices
    ExecutionStats exec;
    RoutingStats routing{0, 0};
    uint64_t device_copied = 0;
    CachedPlacementStats placement;
    Isa device_isa = Isa::SCALAR;  // the path the device reports
    int device_threads = 0;
};

// The device's placement beyond the pinned experts: a cache policy with
// its slots, prefetch, the popularity the pinned were chosen by (model
// layers; warm-starts the cache), and a recorder of the routing.
struct CacheSetup {
    CachedPlacementConfig cache;
    std::vector<uint64_t> popularity;
    RoutingTraceRecorder* recorder = nullptr;
};

// Prefill of n_prompt tokens in one batch (all logits), then n_decode
// greedy steps; residency null = no device, else its experts pinned. The
// CPU side runs on kernel_paths().cpu, the device on .device.
Run run_model(const std::filesystem::path& dir, const Residency* residency, const LatencyModel& model, int n_prompt,
              int n_decode, const CacheSetup& setup = {}) {
    ModelConfig c = model_config_load(dir);
    ModelWeights w = weights_load(c, dir);
    const KernelPaths paths = kernel_paths(quantized_experts(w));
    const CpuPath cpu_path(paths.cpu);
    ThreadPool pool(2);
    const int max_batch = 512;
    const double eb = cost_expert(c, 0, weight_format(w)).bytes;
    auto state = make_sequence_state(c, 1, n_prompt + n_decode + 1, host_state_memory());
    SequenceState& cache = *state;
    CpuExpertExecutor cpu(c, w, pool, max_batch);
    const Residency none(c.n_layers, c.n_experts);
    std::unique_ptr<CachedPlacement> placement = make_cached_placement(
        c, residency ? model : LatencyModel{}, eb, residency ? *residency : none, setup.popularity, setup.cache);
    std::unique_ptr<EmulatedDevice> device;
    if (residency)
        device = std::make_unique<EmulatedDevice>(c, w, device_slots(c, *placement),
                                                  double(placement->n_slots() + DEFAULT_STAGING_SLOTS) *
                                                      double(expert_slot_bytes(w)),
                                                  max_batch,
                                                  DEVICE_THREADS, paths.device);
    std::unique_ptr<Backend> backend = make_cpu_backend(c, w, pool, cache.ctx(), max_batch * c.n_experts_active);
    HybridExpertExecutor hybrid(c, *backend, cpu, device.get(), std::move(placement));
    ForwardPass forward(c, *backend, cache, hybrid, max_batch, max_batch);
    RoutingLog log(setup.recorder);
    forward.set_routing_observer(&log);

    Run r;
    r.routing = RoutingStats(c.n_layers, c.n_experts);
    Batch batch;
    batch.reserve(max_batch);
    for (int i = 0; i < n_prompt; i++) batch.add(1 + (i * 7919 + 13) % (c.vocab_size - 1), i, 0, true);
    if (setup.recorder) setup.recorder->set(0, TracePhase::PREFILL);
    const float* logits = forward.run(batch, &r.routing);
    r.logits.assign(logits, logits + size_t(n_prompt) * c.vocab_size);
    int token = int(std::max_element(logits + size_t(n_prompt - 1) * c.vocab_size, logits + size_t(n_prompt) * c.vocab_size) -
                    (logits + size_t(n_prompt - 1) * c.vocab_size));
    r.tokens.push_back(token);
    if (setup.recorder) setup.recorder->set(0, TracePhase::DECODE);
    for (int s = 0; s < n_decode; s++) {
        batch.clear();
        batch.add(token, n_prompt + s, 0, true);
        logits = forward.run(batch, &r.routing);
        r.logits.insert(r.logits.end(), logits, logits + c.vocab_size);
        token = int(std::max_element(logits, logits + c.vocab_size) - logits);
        r.tokens.push_back(token);
    }
    r.routes = std::move(log.choices);
    r.exec = hybrid.step();
    r.placement = hybrid.placement().stats();
    if (device) {
        r.device_copied = device->copied_bytes();
        r.device_isa = device->isa();
        r.device_threads = device->threads();
    }
    return r;
}

// How far a placement's logits may be from the all-CPU ones, relative to a
// position's scale 1 + max |CPU logit|. Both sides multiply the same bf16
// weights (exact in fp32) by the same fp32 activations and accumulate in
// fp32; only the order of the sums differs (and the vector paths' exp in
// silu, within a few ulp). A dot product of length k summed in any order is
// within k u sum |w_i x_i| of the exact one (u = 2^-24, Higham's gamma_k),
// so two orders differ by at most 2 k u of the terms' magnitude. An expert
// is two such stages, k = dim (w1, w3) and k = hidden_dim (w2): its output
// moves by at most 2 (dim + hidden_dim) u relative. Everything else (norms,
// attention, routing weights, the LM head) is the same arithmetic on both
// sides and carries a relative difference on at a gain near 1 (the norms
// rescale it; these random weights neither grow nor shrink it on average),
// and each MoE layer adds its own: 2 n_moe_layers (dim + hidden_dim) u
// (small: 3.7e-4). The bound is a worst case: rounding errors add up like
// sqrt(k), not k, so the differences measured (avx2 against scalar, either
// side) stay at 0.003 of it on small and at most 0.05 of it on the arch
// configs (k = 96): no flake. A device on a wrong expert, rows or slot
// moves logits by whole units; one that rounds the experts' inputs to bf16
// (2^-9 relative) measured 4.4 times it on small, 45 times and more on the
// arch configs.
double logit_tolerance(const ModelConfig& c) {
    return 2.0 * c.n_moe_layers() * (c.dim + c.hidden_dim) * 0x1p-24;
}

// Every position's logits within logit_tolerance of the CPU's, all finite.
void require_logits_close(const Run& r, const Run& cpu, const ModelConfig& c) {
    REQUIRE(r.logits.size() == cpu.logits.size());
    const double tol = logit_tolerance(c);
    const size_t vocab = size_t(c.vocab_size);
    double worst = 0;  // max over positions of max |r - cpu| / (tol * scale)
    int over = 0, first_over = -1;
    for (size_t p = 0; p < cpu.logits.size() / vocab; p++) {
        const float* a = r.logits.data() + p * vocab;
        const float* b = cpu.logits.data() + p * vocab;
        double scale = 1, err = 0;
        bool finite = true;
        for (size_t v = 0; v < vocab; v++) {
            scale = std::max(scale, 1.0 + std::fabs(double(b[v])));
            err = std::max(err, std::fabs(double(a[v]) - double(b[v])));
            finite = finite && std::isfinite(a[v]);
        }
        const double ratio = finite ? err / (tol * scale) : INFINITY;
        worst = std::max(worst, ratio);
        if (!(ratio <= 1)) {
            over++;
            if (first_over < 0) first_over = int(p);
        }
    }
    INFO("tolerance " << tol << " x (1 + max |logit|); the worst position at " << worst << " of it; " << over
                      << " positions over, the first " << first_over);
    REQUIRE(over == 0);
}

// What the device must give exactly: the same greedy tokens and routing.
// Neither can flip here: the closest greedy choice of these runs is over 2
// tolerances wide (so no difference within the tolerance flips it), and the
// closest routing choice (the k-th expert's router probability against the
// best one left out) 1.5e-4 relative, a hundred times the differences.
void require_same_decisions(const Run& r, const Run& cpu) {
    REQUIRE(r.tokens == cpu.tokens);
    REQUIRE(r.routes == cpu.routes);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

uint64_t total_runs(const ExecutionStats& s) {
    uint64_t sum = 0;
    for (uint64_t r : s.runs) sum += r;
    return sum;
}

// Tokens by site add up to the routed tokens of every (layer, expert), runs
// by site to the routing's runs.
void check_stats_add_up(const Run& r, int n_layers, int n_experts) {
    for (int l = 0; l < n_layers; l++)
        for (int e = 0; e < n_experts; e++) {
            uint64_t sum = r.exec.tokens_at(ExpertSite::CPU, l, e) + r.exec.tokens_at(ExpertSite::DEVICE, l, e) +
                           r.exec.tokens_at(ExpertSite::COPY, l, e);
            REQUIRE(sum == r.routing.get(l, e));
        }
    REQUIRE(total_runs(r.exec) == r.routing.runs());
    REQUIRE(r.exec.copy_bytes == r.device_copied);
}

}  // namespace

TEST_CASE("any placement gives the all-CPU logits within the tolerance, prefill and decode", "[hybrid]") {
    // small: 8 experts per layer; a 300-token prefill sends over 128 tokens to
    // busy experts, so the CPU side's large-batch (packed) paths run too.
    const auto dir = test_model_dir("small", 3);
    ModelConfig c = model_config_load(dir);
    const int n_prompt = 300, n_decode = 6;
    const double eb = cost_expert(c, 0).bytes;
    const KernelPaths paths = kernel_paths();
    INFO("CPU side on " << isa_name(paths.cpu) << ", device on " << isa_name(paths.device));
    if (paths.device == paths.cpu) WARN("no second kernel path on this CPU: the device sums in the CPU's order");
    Run reference = run_model(dir, nullptr, LatencyModel{}, n_prompt, n_decode);
    REQUIRE(reference.exec.runs[int(ExpertSite::DEVICE)] + reference.exec.runs[int(ExpertSite::COPY)] == 0);

    const int total = c.n_layers * c.n_experts;
    struct Case {
        const char* name;
        Residency residency;
        LatencyModel model;
    } cases[] = {
        {"nothing resident, every expert copied", static_plan_even(c.n_layers, c.n_experts, 0), model_cpu_slow()},
        {"half resident (even), rest on the CPU", static_plan_even(c.n_layers, c.n_experts, total / 2), model_device_slow()},
        {"quarter resident (random), rest copied", static_plan_random(c.n_layers, c.n_experts, total / 4, 7), model_cpu_slow()},
        {"a quarter resident, the planner mixes", static_plan_random(c.n_layers, c.n_experts, total / 4, 11), model_mixed(eb)},
        {"all resident", static_plan_even(c.n_layers, c.n_experts, total), model_device_slow()},
    };
    for (const Case& k : cases) {
        INFO(k.name);
        Run r = run_model(dir, &k.residency, k.model, n_prompt, n_decode);
        REQUIRE(r.device_isa == paths.device);
        REQUIRE(r.device_threads == DEVICE_THREADS);
        require_logits_close(r, reference, c);
        require_same_decisions(r, reference);
        check_stats_add_up(r, c.n_layers, c.n_experts);
        const ExecutionStats& s = r.exec;
        if (k.residency.n_resident() == 0) REQUIRE(s.runs[int(ExpertSite::DEVICE)] == 0);
        if (k.residency.n_resident() == total) {
            REQUIRE(s.runs[int(ExpertSite::DEVICE)] == total_runs(s));
            // Every expert on the device's path: the logits are not the
            // CPU's bit for bit, so the tolerance above is not vacuous (the
            // same inputs, the same paths: never a flake).
            if (paths.device != paths.cpu) REQUIRE(!bitwise_equal(r.logits, reference.logits));
        }
        if (k.model.cpu.stream_ms == 1000) REQUIRE(s.runs[int(ExpertSite::CPU)] == 0);
        if (k.model.device.stream_ms == 1000) REQUIRE(s.runs[int(ExpertSite::COPY)] == 0);
        REQUIRE(s.layers == uint64_t(c.n_layers) * (1 + n_decode));
    }
}

TEST_CASE("new architectures: any placement gives the all-CPU logits within the tolerance", "[hybrid][hybrid_arch]") {
    // Qwen3-MoE, OLMoE, Qwen2-MoE (its shared expert, a dense weight, always
    // on the CPU side) and dense layers among sparse ones: 16 experts of top-4,
    // a 150-token prefill (busy experts take the large-batch paths) and decode.
    for (const auto& [name, config] : all_arch_configs()) {
        SECTION(name) {
            const auto dir = test_checkpoint_dir("arch", config);
            ModelConfig c = model_config_load(dir);
            const int n_prompt = 150, n_decode = 4;
            const int total = c.n_layers * c.n_experts;
            Run cpu = run_model(dir, nullptr, LatencyModel{}, n_prompt, n_decode);
            Residency plans[] = {static_plan_even(c.n_layers, c.n_experts, 0),
                                 static_plan_random(c.n_layers, c.n_experts, total / 4, 5),
                                 static_plan_even(c.n_layers, c.n_experts, total)};
            int moe_total = 0;
            for (int l = 0; l < c.n_layers; l++) moe_total += c.layer_is_moe(l) ? c.n_experts : 0;
            for (Residency& plan : plans) {
                // A dense layer has no experts to place (the CLI refuses
                // --emulate-gpu for such models for now; see below).
                for (int l = 0; l < c.n_layers; l++) {
                    for (int e = 0; e < c.n_experts && !c.layer_is_moe(l); e++) plan.set(l, e, false);
                }
                for (const LatencyModel& model :
                     {model_cpu_slow(), model_device_slow(), model_mixed(cost_expert(c, 0).bytes)}) {
                    INFO(plan.n_resident() << " of " << total << " resident, cpu stream " << model.cpu.stream_ms);
                    Run r = run_model(dir, &plan, model, n_prompt, n_decode);
                    require_logits_close(r, cpu, c);
                    require_same_decisions(r, cpu);
                    check_stats_add_up(r, c.n_layers, c.n_experts);
                    if (plan.n_resident() == moe_total)
                        REQUIRE(r.exec.runs[int(ExpertSite::DEVICE)] == total_runs(r.exec));
                    if (model.cpu.stream_ms == 1000) REQUIRE(r.exec.runs[int(ExpertSite::CPU)] == 0);
                }
            }
        }
    }
}

TEST_CASE("the mixed plan copies busy experts and leaves single tokens on the CPU", "[hybrid]") {
    const auto dir = test_model_dir("small", 3);
    ModelConfig c = model_config_load(dir);
    Residency none = static_plan_even(c.n_layers, c.n_experts, 0);
    Run prefill = run_model(dir, &none, model_mixed(cost_expert(c, 0).bytes), 300, 0);
    REQUIRE(prefill.exec.runs[int(ExpertSite::COPY)] > 0);
    Run decode_only = run_model(dir, &none, model_mixed(cost_expert(c, 0).bytes), 1, 8);
    // One token per expert: 2 ms copy + device never beats ~1 ms on the CPU.
    REQUIRE(decode_only.exec.runs[int(ExpertSite::COPY)] == 0);
    REQUIRE(decode_only.exec.runs[int(ExpertSite::CPU)] > 0);
}

TEST_CASE("the emulated device refuses a budget without room for its experts and staging slots", "[hybrid]") {
    const auto dir = test_model_dir("tiny", 1);
    ModelConfig c = model_config_load(dir);
    ModelWeights w = weights_load(c, dir);
    Residency half = static_plan_even(c.n_layers, c.n_experts, 4);
    double eb = cost_expert(c, 0).bytes;
    REQUIRE_THROWS_AS(EmulatedDevice(c, w, half, 5 * eb, 16, 2, Isa::SCALAR), MoeError);  // one of two staging slots
    EmulatedDevice ok(c, w, half, 6 * eb, 16, 2, Isa::SCALAR);
    REQUIRE(ok.resident_bytes() == 4 * eb);
}

TEST_CASE("the engine with --emulate-gpu generates the same tokens and reports placement", "[hybrid]") {
    const auto dir = test_model_dir("tiny", 1);
    GenerateRequest req;
    req.prompt = {1, 415, 2936, 9060, 285, 1142, 754, 28705};
    req.max_tokens = 24;
    req.sampling.temperature = 0;
    req.ignore_eos = true;

    SessionOptions plain;
    plain.threads = 2;
    Session a(load_model({dir, plain.threads}), plain);
    GenerateResult ra = a.generate(req, [](const TokenEvent&) { return true; });
    REQUIRE(a.placement().device == DeviceKind::NONE);
    // Without a device the statistics are the routing counts, untimed: one
    // prefill pass and a decode pass per generated token but the last.
    ExecutionStats cpu = a.execution_stats().last;
    REQUIRE(cpu.runs[int(ExpertSite::CPU)] > 0);
    REQUIRE(cpu.runs[int(ExpertSite::CPU)] == total_runs(cpu));
    REQUIRE(cpu.tokens[int(ExpertSite::CPU)] == a.routing_counts().last);
    REQUIRE(cpu.layers == uint64_t(ra.n_generated) * 2);
    REQUIRE(cpu.measured_ms == 0);

    SessionOptions emulated = plain;
    emulated.device.emulate_gpu_expert_share = 0.5;
    Session b(a.shared_model(), emulated);
    GenerateResult rb = b.generate(req, [](const TokenEvent&) { return true; });
    REQUIRE(rb.tokens == ra.tokens);
    const PlacementInfo& p = b.placement();
    REQUIRE(p.device == DeviceKind::EMULATED);
    REQUIRE(p.capacity == (p.n_layers * p.n_experts) / 2);
    // The default cache: a quarter of the device's experts are cache slots,
    // the rest pinned (p.resident: pinned at load).
    int resident = 0;
    for (uint8_t r : p.resident) resident += r;
    REQUIRE(p.cache_policy == CachePolicy::LFU);
    REQUIRE(placement_cache_policy(p) == "lfu");
    REQUIRE(p.cache_slots == 1);
    REQUIRE(resident + p.cache_slots == p.capacity);
    ExecutionStats last = b.execution_stats().last;
    REQUIRE(last.total_tokens() == uint64_t(req.prompt.size() + ra.n_generated - 1) * 2 * 2);  // tokens x top-2 x 2 layers
    REQUIRE(last.hit_rate() > 0);
    REQUIRE(last.hit_rate() < 1);
    // The same routing: the device's engine ran as many experts and layers.
    REQUIRE(total_runs(last) == cpu.runs[int(ExpertSite::CPU)]);
    REQUIRE(last.layers == cpu.layers);
    REQUIRE(last.measured_ms > 0);
    REQUIRE(placement_summary(b.placement()).find("emulated") != std::string::npos);
}

TEST_CASE("emulate-gpu flag: a dry run with a stats line, bad values refused", "[hybrid][cli]") {
    const auto dir = test_model_dir("tiny", 1).string();
    auto bin = moe_server_binary().string();
    CommandResult ok = run_command({bin, "generate", "--model", dir, "--prompt", "Hello", "--max-tokens", "8",
                                    "--greedy", "--emulate-gpu", "50%"});
    INFO(ok.err);
    REQUIRE(ok.exit_code == 0);
    REQUIRE(ok.err.find("device: emulated") != std::string::npos);
    REQUIRE(ok.err.find("hit rate") != std::string::npos);
    REQUIRE(ok.err.find("furthest layer: ") != std::string::npos);  // per-layer predicted vs measured

    for (const char* bad : {"abc", "0", "-1", "150%", "%", "12GB"}) {
        CommandResult r = run_command({bin, "generate", "--model", dir, "--prompt", "Hi", "--emulate-gpu", bad});
        INFO(bad << ": " << r.err);
        REQUIRE(r.exit_code == 2);
        REQUIRE(r.err.find("--emulate-gpu") != std::string::npos);
    }
    // 1 MiB is less than the tiny model's dense weights and KV cache.
    CommandResult small = run_command({bin, "generate", "--model", dir, "--prompt", "Hi", "--emulate-gpu", "0.001"});
    REQUIRE(small.exit_code == 2);
    REQUIRE(small.err.find("leaves no room for 2 staging slots of one expert") != std::string::npos);
}

TEST_CASE("cache flags: the placement line names the cache, bad values refused", "[hybrid][cli][cache]") {
    const auto dir = test_model_dir("tiny", 1).string();
    auto bin = moe_server_binary().string();
    const std::vector<std::string> generate = {
        bin, "generate", "--model", dir, "--prompt", "Hello", "--max-tokens", "8", "--greedy", "--emulate-gpu", "50%"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> words = generate;
        words.insert(words.end(), extra.begin(), extra.end());
        return run_command(words);
    };
    // 4 of the tiny model's 8 experts on the device; --cache-share's default
    // quarter of them, 1, is a cache slot.
    CommandResult ok = with({"--cache-policy", "lru", "--prefetch", "on"});
    INFO(ok.err);
    REQUIRE(ok.exit_code == 0);
    REQUIRE(ok.err.find("; cache: lru, 1 of the 4 slots, prefetch on") != std::string::npos);
    CommandResult share = with({"--cache-policy", "score", "--cache-share", "0.5"});
    INFO(share.err);
    REQUIRE(share.exit_code == 0);
    REQUIRE(share.err.find("; cache: score, 2 of the 4 slots, prefetch on") != std::string::npos);
    // The default: LFU, prefetch on.
    CommandResult defaults = with({});
    REQUIRE(defaults.exit_code == 0);
    REQUIRE(defaults.err.find("; cache: lfu, 1 of the 4 slots, prefetch on") != std::string::npos);
    CommandResult no_prefetch = with({"--prefetch", "off"});
    REQUIRE(no_prefetch.err.find("; cache: lfu, 1 of the 4 slots, prefetch off") != std::string::npos);
    // The static plan names no cache.
    CommandResult plain = with({"--cache-policy", "static"});
    REQUIRE(plain.exit_code == 0);
    REQUIRE(plain.err.find("device: emulated") != std::string::npos);
    REQUIRE(plain.err.find("; cache: ") == std::string::npos);

    const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
        {{"--cache-policy", "belady"}, "--cache-policy"},
        {{"--cache-policy", "x"}, "--cache-policy"},
        {{"--cache-policy", ""}, "--cache-policy"},
        {{"--prefetch", "maybe"}, "--prefetch"},
        {{"--cache-policy", "static", "--prefetch", "on"}, "--prefetch"},  // no cache to prefetch into
        {{"--cache-scope", "both"}, "--cache-scope"},
        {{"--cache-policy", "lru", "--cache-share", "2"}, "--cache-share"},
        {{"--cache-policy", "lru", "--cache-share", "-0.5"}, "--cache-share"},
        {{"--cache-policy", "lru", "--cache-share", "nan"}, "--cache-share"},
    };
    for (const auto& [extra, flag] : bad) {
        CommandResult r = with(extra);
        INFO(extra.front() << " " << extra.back() << ": " << r.err);
        REQUIRE(r.exit_code == 2);
        REQUIRE(r.err.find("moe-server: error: " + flag) == 0);
        REQUIRE(r.err.find('\n') == r.err.size() - 1);  // one line
    }
}

TEST_CASE("profile flag places the most popular experts and reports the expected hit rate", "[hybrid][cli]") {
    const auto tiny = test_model_dir("tiny", 1).string();
    const auto small = test_model_dir("small", 3).string();
    auto bin = moe_server_binary().string();
    auto dir = test_temp_dir("hybrid-profile");
    std::string prof = (dir / "tiny.json").string();
    std::string prompts = (shared_data_dir() / "prompts" / "mt_bench_question.jsonl").string();
    CommandResult p = run_command({bin, "profile", "--model", tiny, "--prompts", prompts, "--limit", "3", "--gen-tokens",
                                   "4", "--out", prof});
    INFO(p.err);
    REQUIRE(p.exit_code == 0);

    CommandResult g = run_command({bin, "generate", "--model", tiny, "--prompt", "Hello", "--max-tokens", "4", "--greedy",
                                   "--emulate-gpu", "25%", "--profile", prof});
    INFO(g.err);
    REQUIRE(g.exit_code == 0);
    REQUIRE(g.err.find("plan: popularity") != std::string::npos);
    REQUIRE(g.err.find("expected hit rate") != std::string::npos);

    // The same profile on another model: refused, naming the fingerprints.
    CommandResult m = run_command({bin, "generate", "--model", small, "--prompt", "Hello", "--max-tokens", "2",
                                   "--emulate-gpu", "25%", "--profile", prof});
    REQUIRE(m.exit_code == 2);
    REQUIRE(m.err.find(prof) != std::string::npos);
    // A profile needs a device to place experts on.
    CommandResult n = run_command({bin, "generate", "--model", tiny, "--prompt", "Hello", "--profile", prof});
    REQUIRE(n.exit_code == 2);
    REQUIRE(n.err.find("--profile") != std::string::npos);

    // A hybrid model (Gated DeltaNet layers, Qwen3.5's template): profiled
    // through its chat template, then placed from the profile with the cache
    // and prefetch on the emulated device.
    const std::string hybrid_prof = (dir / "qwen35.json").string();
    CommandResult hp = run_command({bin, "profile", "--model", "synth:qwen35-moe-mini", "--prompts", prompts, "--limit",
                                    "2", "--gen-tokens", "3", "--out", hybrid_prof});
    INFO(hp.err);
    REQUIRE(hp.exit_code == 0);
    CommandResult hg = run_command({bin, "generate", "--model", "synth:qwen35-moe-mini", "--prompt", "Hello",
                                    "--max-tokens", "4", "--greedy", "--emulate-gpu", "25%", "--profile", hybrid_prof});
    INFO(hg.err);
    REQUIRE(hg.exit_code == 0);
    CHECK(hg.err.find("plan: popularity") != std::string::npos);
    CHECK(hg.err.find("prefetched") != std::string::npos);
}

namespace {

// The small model's own routing on the test's prompt: the popularity the
// pinned experts and the warm cache come from.
std::vector<uint64_t> own_popularity(const std::filesystem::path& dir, int n_prompt, int n_decode) {
    return run_model(dir, nullptr, LatencyModel{}, n_prompt, n_decode).routing.counts();
}

}  // namespace

TEST_CASE(
    "with the cache and prefetch on, every policy gives the all-CPU logits within the tolerance, evictions "
    "included",
    "[hybrid][cache]") {
    const auto dir = test_model_dir("small", 3);
    const ModelConfig c = model_config_load(dir);
    const int n_prompt = 40, n_decode = 24;
    const Run reference = run_model(dir, nullptr, LatencyModel{}, n_prompt, n_decode);
    const std::vector<uint64_t> popularity = reference.routing.counts();
    // A quarter of the experts on the device, half of them cache slots:
    // few enough that the cache evicts.
    const int capacity = c.n_layers * c.n_experts / 4, slots = capacity / 2;
    const Residency pinned = static_plan_popularity(popularity, c.n_layers, c.n_experts, capacity - slots);
    uint64_t prefetched = 0, useful = 0, fills = 0;
    for (CacheScope scope : {CacheScope::PER_LAYER, CacheScope::GLOBAL})
        for (CachePolicy policy : {CachePolicy::LRU, CachePolicy::LFU, CachePolicy::SCORE})
            for (bool prefetch : {false, true})
                for (const LatencyModel& model :
                     {model_cpu_slow(), model_mixed(cost_expert(c, 0).bytes), model_fill()}) {
                    INFO(cache_scope_name(scope) << ", " << cache_policy_name(policy) << ", prefetch " << prefetch
                                                 << ", cpu stream " << model.cpu.stream_ms);
                    CacheSetup setup;
                    setup.cache.policy = policy;
                    setup.cache.cache_slots = slots;
                    setup.cache.options.scope = scope;
                    setup.cache.prefetch = prefetch;
                    setup.popularity = popularity;
                    const Run r = run_model(dir, &pinned, model, n_prompt, n_decode, setup);
                    require_logits_close(r, reference, c);
                    require_same_decisions(r, reference);
                    check_stats_add_up(r, c.n_layers, c.n_experts);
                    const ExecutionStats& s = r.exec;
                    REQUIRE(s.cache_hits == r.placement.cache.cache_hits);
                    REQUIRE(s.cache_hits > 0);
                    // Copying every miss into few slots: the cache evicts.
                    if (model.cpu.stream_ms == 1000) REQUIRE(s.cache_evictions > 0);
                    if (!prefetch) REQUIRE(s.prefetch_copies == 0);
                    REQUIRE(s.prefetch_useful <= s.prefetch_copies);
                    prefetched += s.prefetch_copies;
                    useful += s.prefetch_useful;
                    fills += s.cache_fills;
                }
    REQUIRE(prefetched > 0);
    REQUIRE(useful > 0);
    REQUIRE(fills > 0);
}

TEST_CASE("the device copies as many bytes as the replay simulator on the same trace", "[hybrid][cache]") {
    // The run records its routing; cache_replay replays that trace with
    // the same latency model, pinned experts and cache: the same plans, the
    // same admissions and fills, so the same bytes and hits.
    const auto dir = test_model_dir("small", 3);
    const ModelConfig c = model_config_load(dir);
    const int n_prompt = 40, n_decode = 24;
    const std::vector<uint64_t> popularity = own_popularity(dir, n_prompt, n_decode);
    const double eb = cost_expert(c, 0).bytes;
    const int capacity = c.n_layers * c.n_experts / 4, slots = capacity / 2;
    uint64_t fills = 0;
    for (CacheScope scope : {CacheScope::PER_LAYER, CacheScope::GLOBAL})
        for (std::optional<CachePolicy> policy : {std::optional<CachePolicy>{}, std::optional(CachePolicy::LRU),
                                                  std::optional(CachePolicy::LFU), std::optional(CachePolicy::SCORE)})
            for (const LatencyModel& model : {model_cpu_slow(), model_mixed(eb), model_fill()}) {
                INFO(cache_scope_name(scope) << ", " << (policy ? cache_policy_name(*policy) : "static")
                                             << ", cpu stream " << model.cpu.stream_ms);
                const int n_cache = policy ? slots : 0;
                const Residency pinned =
                    static_plan_popularity(popularity, c.n_layers, c.n_experts, capacity - n_cache);
                RoutingTraceRecorder recorder(model_fingerprint(c));
                CacheSetup setup;
                setup.cache.policy = policy;
                setup.cache.cache_slots = n_cache;
                setup.cache.options.scope = scope;
                setup.popularity = popularity;
                setup.recorder = &recorder;
                const Run r = run_model(dir, &pinned, model, n_prompt, n_decode, setup);

                CacheReplayConfig rc;
                rc.policy = policy;
                rc.capacity = capacity;
                rc.cache_slots = n_cache;
                rc.options.scope = scope;
                const CacheReplayResult replay = cache_replay(recorder.trace(), popularity, rc, model, eb);
                REQUIRE(r.device_copied > 0);
                REQUIRE(double(r.device_copied) == replay.bytes_copied);
                REQUIRE(r.exec.copy_bytes == r.device_copied);
                REQUIRE(r.placement.cache.cache_hits == replay.cache.cache_hits);
                REQUIRE(r.placement.cache.pinned_hits == replay.cache.pinned_hits);
                REQUIRE(r.placement.cache.evictions == replay.cache.evictions);
                fills += r.placement.fills;
            }
    REQUIRE(fills > 0);
}
