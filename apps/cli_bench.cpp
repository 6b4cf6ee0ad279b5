// `moe-server bench ceiling|kernels|decode|prefill|beam|server|latency|placement|cache|gpu|suite`:
// benchmarks print JSON lines holding each figure beside the machine's
// ceiling measured in the same run, so the ratios hold on a noisy shared
// machine (for placement the ceiling is the best static plan for the
// evaluated workload itself). Not tests.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "apps/cli.h"
#include "apps/cli_calibrate.h"
#include "apps/serve.h"
#include "base/errors.h"
#include "base/files.h"
#include "chat/json_schema.h"
#include "cpu_kernels/bench.h"
#include "cpu_kernels/kernels.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/devices/calibration_key.h"
#include "engine/model/cost.h"
#include "engine/model/fingerprint.h"
#include "engine/model/model_source.h"
#include "engine/model/synth_model.h"
#include "engine/runtime/beam_search.h"
#include "engine/runtime/session.h"
#include "placement/cache_replay.h"
#include "placement/residency.h"
#include "profiles/calibration.h"
#include "profiles/profile.h"
#include "profiles/routing_trace.h"
#include "server/placement_text.h"
#ifdef MOE_HAVE_CUDA
#include "gpu_kernels/bench_gpu.h"
#include "gpu_kernels/device.h"
#include "gpu_kernels/gpu_runtime.h"
#endif

using json = nlohmann::json;


int bench_threads_flag(Args& args) {
    int t = int(args.get_int("--threads", 0, 0, 1024));
    return t > 0 ? t : physical_core_count();
}

namespace {

// A prompt of n ordinary-text token ids (BOS first when the tokenizer adds
// one), the same every run.
std::vector<int> bench_prompt(const Session& engine, int n) {
    const std::string text = "The quick brown fox jumps over the lazy dog while the band plays on. ";
    std::vector<int> ids = engine.model().tokenizer().encode_prompt(text);
    while (int(ids.size()) < n) {
        std::vector<int> more = engine.model().tokenizer().encode(text);
        ids.insert(ids.end(), more.begin(), more.end());
    }
    ids.resize(n);
    return ids;
}

// The machine's ceilings with the engine's thread count, measured on a pool
// of its own that is gone before the engine runs (idle workers spin a while
// after each job and would compete with the engine's threads).
Ceiling engine_ceiling(const Session& engine) {
    ThreadPool pool(engine.threads());
    return bench_ceiling(pool, true);
}

// On a CUDA device: its ceilings measured now, beside the figure (64 MiB
// copies, a 4096-cubed GEMM: about a second).
void add_gpu_ceilings(json& line, const Session& engine) {
#ifdef MOE_HAVE_CUDA
    if (engine.placement().device != DeviceKind::CUDA) return;
    GpuCeilings g = gpu_measure_ceilings(size_t(64) << 20, 4096);
    line["gpu"] = placement_device_name(engine.placement());
    line["h2d_pinned_gbs"] = g.h2d_pinned_gbs;
    line["h2d_pageable_gbs"] = g.h2d_pageable_gbs;
    line["device_gbs"] = g.device_gbs;
    line["bf16_tflops"] = g.bf16_tflops;
#else
    (void)line, (void)engine;
#endif
}

// The execution figures of s as bench fields, walking
// execution_stats_fields(): the per-site ones as "expert_KEY": {SITE:
// value}, the other counts and times as "KEY", the per-layer counts as
// "per_layer_KEY": [count per layer] (the per-layer times are /v1/experts'),
// and the share of routed tokens computed on the device; each divided by
// `steps` when given (per step).
json execution_fields(const ExecutionStats& s, std::optional<int> steps = std::nullopt) {
    auto value = [&](auto v) { return steps ? json(double(v) / *steps) : json(v); };
    json out{{"device_share", s.device_share()}};
    for (const ExecutionField& f : execution_stats_fields()) {
        if (auto* site_value = std::get_if<ExecutionField::PerSite>(&f.value))
            for (int i = 0; i < EXPERT_SITE_COUNT; i++)
                out[std::string("expert_") + f.key][expert_site_name(ExpertSite(i))] =
                    value((*site_value)(s, ExpertSite(i)));
        if (auto* count = std::get_if<ExecutionField::Count>(&f.value)) out[f.key] = value(s.*count->member);
        if (auto* ms = std::get_if<ExecutionField::Ms>(&f.value)) out[f.key] = value(s.*(*ms));
        if (auto* layer = std::get_if<ExecutionField::PerLayerCount>(&f.value)) {
            json& per_layer = out[std::string("per_layer_") + f.key] = json::array();
            for (uint64_t v : s.*layer->counts) per_layer.push_back(value(v));
        }
    }
    return out;
}

// With a device (CUDA, or --emulate-gpu's dry run): the placement and where
// the last run's experts went (the speed of an emulated device means
// nothing), and a GPU's ceilings.
void add_placement_fields(json& line, const Session& engine) {
    const PlacementInfo& p = engine.placement();
    if (p.device == DeviceKind::NONE) return;
    add_gpu_ceilings(line, engine);
    ExecutionStats s = engine.execution_stats().last;
    line["device"] = device_kind_name(p.device);
    line["resident_experts"] = p.capacity;
    line["plan"] = plan_kind_name(p.plan);
    line["cache_policy"] = placement_cache_policy(p);
    line["cache_slots"] = p.cache_slots;
    line["prefetch"] = p.prefetch;
    line["hit_rate"] = s.hit_rate();
    line.update(execution_fields(s));
    if (p.prefetch) {
        // Per layer: the share of the prefetches made for it that it then routed to.
        json useful = json::array();
        for (size_t l = 0; l < s.layer_prefetch_copies.size(); l++)
            useful.push_back(s.layer_prefetch_copies[l]
                                 ? json(double(s.layer_prefetch_useful[l]) / double(s.layer_prefetch_copies[l]))
                                 : json(nullptr));
        line["prefetch_useful_share"] =
            s.prefetch_copies ? json(double(s.prefetch_useful) / double(s.prefetch_copies)) : json(nullptr);
        line["per_layer_prefetch_useful_share"] = useful;
    }
}

// --predict-next-layer (or --prefetch on, which predicts too): how often
// each MoE layer's experts, predicted when the previous layer routed, were
// the ones it routed to, over the last request (prefill and decode). A
// random router of a synthetic model is a poor stand-in for a trained one
// here.
void add_prediction_fields(json& line, const Session& engine) {
    const RoutingCounts r = engine.routing_counts();
    uint64_t predicted = 0, right = 0;
    json per_layer = json::array();
    for (size_t l = 0; l < r.predicted_last.size(); l++) {
        predicted += r.predicted_last[l];
        right += r.predicted_right_last[l];
        per_layer.push_back(r.predicted_last[l] ? json(double(r.predicted_right_last[l]) / r.predicted_last[l])
                                                : json(nullptr));
    }
    line["next_layer_prediction"] = {{"predicted", predicted},
                                     {"right", right},
                                     {"accuracy", predicted ? json(double(right) / predicted) : json(nullptr)},
                                     {"per_layer_accuracy", per_layer}};
}

int bench_decode(Args& args, bool prefill, std::shared_ptr<const ModelWeights> loaded = nullptr) {
    ModelOptions m{parse_model_flag(args).text, 0, std::move(loaded)};
    SessionOptions o;
    o.threads = m.threads = bench_threads_flag(args);
    int n_tokens = int(args.get_int("--tokens", prefill ? 512 : 64, 1, 1 << 16));
    int repeats = int(args.get_int("--repeat", 3, 1, 100));
    o.device = parse_device_flags(args);
    o.predict_next_layer = args.flag("--predict-next-layer");
    const std::string grammar_flag = prefill ? "" : args.get("--grammar", "");
    apply_isa_flag(args);
    args.finish();
    o.ctx = std::max(256, n_tokens + 64);
    o.max_batch = prefill ? std::max(512, n_tokens) : 512;
    Session engine(load_model(m), o);
    Ceiling ceiling = engine_ceiling(engine);
    const ModelConfig& c = engine.model().config();

    GenerateRequest req;
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    req.reuse_prefix = false;
    double best = 0, best_ttft_ms = 0;
    if (prefill) {
        req.prompt = bench_prompt(engine, n_tokens);
        req.max_tokens = 1;
        for (int r = 0; r < repeats; r++) {
            GenerateResult res = engine.generate(req, [](const TokenEvent&) { return true; });
            best = std::max(best, res.prefill_tok_s());
            best_ttft_ms = r == 0 ? res.ttft_ms : std::min(best_ttft_ms, res.ttft_ms);
        }
        StageCost cost = cost_prefill(c, n_tokens, engine.model().weight_format());
        double gflops = cost.flops / (n_tokens / best) / 1e9;
        json line{{"bench", "prefill"},
                  {"model", engine.model().model_id()},
                  {"isa", isa_name(isa_active())},
                  {"threads", engine.threads()},
                  {"tokens", n_tokens},
                  {"prefill_tok_s", best},
                  {"ttft_ms", best_ttft_ms},
                  {"weight_bytes", cost.bytes},
                  {"gflops", gflops},
                  {"fma_peak_gflops", ceiling.fma_gflops},
                  {"ratio_to_peak", gflops / ceiling.fma_gflops}};
        add_placement_fields(line, engine);
        if (o.predict_next_layer || o.device.prefetch) add_prediction_fields(line, engine);
        std::printf("%s\n", line.dump().c_str());
    } else {
        req.prompt = bench_prompt(engine, 16);
        req.max_tokens = n_tokens;
        // --grammar: the same decode under a grammar, alternating with the
        // plain one, so both see the same machine.
        GenerateRequest constrained = req;
        if (!grammar_flag.empty())
            constrained.grammar = grammar_flag == "json" ? engine.model().grammar(json_object_gbnf(), "json")
                                                         : engine.model().grammar(file_read_text(grammar_flag), grammar_flag);
        double best_constrained = 0, cold_constrained = 0;  // cold: the first run, its token-mask cache empty
        int constrained_tokens = 0;
        for (int r = 0; r < repeats; r++) {
            GenerateResult res = engine.generate(req, [](const TokenEvent&) { return true; });
            best = std::max(best, res.decode_tok_s());
            if (!constrained.grammar) continue;
            res = engine.generate(constrained, [](const TokenEvent&) { return true; });
            best_constrained = std::max(best_constrained, res.decode_tok_s());
            if (r == 0) cold_constrained = res.decode_tok_s();
            constrained_tokens = res.n_generated;
        }
        double bytes = cost_decode_token(c, engine.model().weight_format()).bytes;
        double roofline = roofline_decode_tok_s(bytes, ceiling);
        json line{{"bench", "decode"}, {"model", engine.model().model_id()}, {"isa", isa_name(isa_active())},
                  {"threads", engine.threads()}, {"tokens", n_tokens}, {"decode_tok_s", best},
                  {"weight_bytes_per_token", bytes}, {"read_gbs", ceiling.read_gbs},
                  {"roofline_tok_s", roofline}, {"ratio_to_roofline", best / roofline}};
        if (constrained.grammar) {
            // The grammar's cost per token: masking before each draw, advancing after it.
            line["grammar"] = grammar_flag;
            line["grammar_tokens"] = constrained_tokens;
            line["grammar_decode_tok_s"] = best_constrained;
            line["grammar_cold_decode_tok_s"] = cold_constrained;
            line["grammar_overhead"] = best_constrained > 0 ? json(1 - best_constrained / best) : json(nullptr);
            line["grammar_ms_per_token"] =
                best_constrained > 0 && best > 0 ? json(1e3 / best_constrained - 1e3 / best) : json(nullptr);
        }
        add_placement_fields(line, engine);
        if (o.predict_next_layer || o.device.prefetch) add_prediction_fields(line, engine);
        std::printf("%s\n", line.dump().c_str());
    }
    return 0;
}

// Where the experts of `steps` decode steps ran, per step: the difference
// of the request's execution statistics after and before them (the prompt's
// prefill and the first step excluded).
json placement_per_step(const ExecutionStats& before, const ExecutionStats& after, int steps) {
    ExecutionStats delta = after;
    delta.subtract(before);
    return execution_fields(delta, steps);
}

// "1,4,8,16" -> {1, 4, 8, 16}, each a beam width.
std::vector<int> parse_widths(const std::string& text) {
    std::vector<int> widths;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t end = text.find(',', pos);
        if (end == std::string::npos) end = text.size();
        std::string item = text.substr(pos, end - pos);
        std::optional<long> w = Args::integer(item);
        if (!w || *w < 1 || *w > BEAM_WIDTH_MAX)
            throw MoeError("--widths: '" + item + "' is not a beam width in [1, " + std::to_string(BEAM_WIDTH_MAX) +
                           "] (give a list like 1,4,8,16)");
        widths.push_back(int(*w));
        pos = end + 1;
    }
    return widths;
}

// `bench beam`: per width, the returned sequence's tok/s, forward passes per
// second against the roofline of the weights one pass reads (its routed
// experts counted once each), and the tokens per routed expert per step.
int bench_beam(Args& args, std::shared_ptr<const ModelWeights> loaded = nullptr) {
    ModelOptions m{parse_model_flag(args).text, 0, std::move(loaded)};
    SessionOptions o;
    o.threads = m.threads = bench_threads_flag(args);
    std::vector<int> widths = parse_widths(args.get("--widths", "1,4,8,16"));
    int n_tokens = int(args.get_int("--tokens", 32, 2, 1 << 14));
    int repeats = int(args.get_int("--repeat", 2, 1, 100));
    auto prompt_text = args.get("--prompt");
    o.device = parse_device_flags(args);
    apply_isa_flag(args);
    args.finish();
    o.ctx = std::max(256, n_tokens + 512);
    Session engine(load_model(m), o);
    Ceiling ceiling = engine_ceiling(engine);
    const ModelConfig& c = engine.model().config();
    BeamRequest req;
    if (prompt_text) {
        req.prompt = engine.model().tokenizer().encode_prompt(*prompt_text);
    } else {
        req.prompt = bench_prompt(engine, 16);
    }
    req.max_tokens = n_tokens;
    req.ignore_eos = true;
    req.reuse_prefix = false;
    for (int width : widths) {
        req.beam_width = width;
        BeamResult best;
        ExecutionStats after_first, after_last;  // of the best run: after its first and its last step
        for (int r = 0; r < repeats; r++) {
            ExecutionStats first;
            BeamResult res = engine.beam_search(req, [&](const BeamStep& s) {
                if (s.step == 0) first = engine.execution_stats().last;
                return true;
            });
            if (r == 0 || res.decode_ms < best.decode_ms) {
                best = std::move(res);
                after_first = first;
                after_last = engine.execution_stats().last;
            }
        }
        const ExpertLoad& load = best.expert_load;
        uint64_t pairs = 0;
        for (uint64_t h : load.histogram) pairs += h;
        double experts_per_step = best.n_steps ? double(pairs) / best.n_steps : 0;
        double tokens_per_step = best.n_steps ? double(best.n_beam_tokens) / best.n_steps : 0;
        StageCost step =
            cost_decode_step(c, int(std::lround(tokens_per_step)), experts_per_step, engine.model().weight_format());
        // Hierarchical roofline of one pass: the weight bytes at the read
        // bandwidth, or its FLOPs at the fp32 FMA peak, whichever is slower
        // (the AVX512_BF16 path can beat the fp32 peak).
        double memory_passes = ceiling.read_gbs * 1e9 / step.bytes;
        double compute_passes = ceiling.fma_gflops * 1e9 / step.flops;
        double roofline_passes = std::min(memory_passes, compute_passes);
        json line{{"bench", "beam"},
                  {"model", engine.model().model_id()},
                  {"isa", isa_name(isa_active())},
                  {"threads", engine.threads()},
                  {"width", width},
                  {"prompt_tokens", int(req.prompt.size())},
                  {"tokens", best.n_generated()},
                  {"steps", best.n_steps},
                  {"beam_tokens_per_step", tokens_per_step},
                  {"best_tok_s", best.best_tok_s()},
                  {"passes_s", best.steps_per_s()},
                  {"beam_tok_s", per_second(best.n_beam_tokens, best.decode_ms)},
                  {"routed_experts_per_step", experts_per_step},
                  {"weight_bytes_per_pass", step.bytes},
                  {"flops_per_pass", step.flops},
                  {"read_gbs", ceiling.read_gbs},
                  {"fma_gflops", ceiling.fma_gflops},
                  {"memory_roofline_passes_s", memory_passes},
                  {"compute_roofline_passes_s", compute_passes},
                  {"roofline_passes_s", roofline_passes},
                  {"ratio_to_roofline", best.steps_per_s() / roofline_passes},
                  {"expert_tokens_per_step",
                   {{"max", load.max()}, {"mean", load.mean()}, {"histogram", load.histogram}}}};
        add_placement_fields(line, engine);
        if (line.contains("device") && best.n_steps > 1) {
            line["per_step"] = placement_per_step(after_first, after_last, best.n_steps - 1);
            // The planner's share of a decode step (and so of each layer's time).
            line["planner_share_of_step"] = line["per_step"]["planner_ms"].get<double>() * best.steps_per_s() / 1e3;
        }
        std::printf("%s\n", line.dump().c_str());
        std::fflush(stdout);
    }
    return 0;
}

json workload_json(const Profile& p, const std::string& path) {
    const ProfileWorkload& w = p.workload;
    return {{"file", path},
            {"source", w.source},
            {"prompts", w.prompt_indices.size()},
            {"prefill_tokens", w.prefill_tokens},
            {"decode_tokens", w.decode_tokens},
            {"gen_tokens", w.gen_tokens}};
}

// Hit rates on the eval workload (B) of static plans at 10, 25 and 50 % of
// all experts: popularity from the profile (A), random (over --seeds seeds),
// even spread, and the oracle, the popularity plan built from B itself (the
// best any static plan can do on B). One line per budget and token phase
// (all routed tokens; decode tokens only).
int bench_placement(Args& args) {
    const ModelSource source = parse_model_flag(args);
    const std::string& model = source.text;
    const std::string a_path = args.required("--profile");
    const std::string b_path = args.required("--eval");
    const int n_seeds = int(args.get_int("--seeds", 100, 2, 100000));
    args.finish();
    ModelConfig config = model_source_config(source);
    if (!config.is_moe()) throw MoeError(model + ": a dense model (no experts): nothing to place");
    const ModelFingerprint fp = model_fingerprint(config);
    Profile a = profile_read(a_path);
    profile_check(a, fp, a_path);
    Profile b = profile_read(b_path);
    profile_check(b, fp, b_path);
    if (!b.has_phases())
        throw MoeError(b_path + ": --eval needs a profile written by `moe-server profile` (prefill and decode counts)");
    // The plans and rates over the MoE layers only: a dense layer has no experts to place.
    const std::vector<int> moe = fp.moe_layers();
    const int n_layers = int(moe.size()), n_experts = config.n_experts;
    const auto rows = [&](const std::vector<uint64_t>& t) { return t.empty() ? t : table_rows(t, n_experts, moe); };
    const std::vector<uint64_t> a_counts = rows(a.counts), a_decode = rows(a.decode);
    const std::vector<uint64_t> b_counts = rows(b.counts), b_decode = rows(b.decode);
    std::printf("%s\n", json{{"bench", "placement_workloads"},
                             {"model", model},
                             {"fingerprint", fingerprint_describe(fp)},
                             {"profile", workload_json(a, a_path)},
                             {"eval", workload_json(b, b_path)}}
                            .dump()
                            .c_str());

    struct Phase {
        const char* name;
        const std::vector<uint64_t>& in_sample;  // A's counts of this phase (empty for a Fiddler import's decode)
        const std::vector<uint64_t>& eval;       // B's counts of this phase
    };
    const Phase phases[] = {{"all", a_counts, b_counts}, {"decode", a_decode, b_decode}};
    for (double frac : {0.10, 0.25, 0.50}) {
        const int capacity = int(std::lround(frac * n_layers * n_experts));
        // Serving ranks by all of A's tokens, so one plan is scored on both phases.
        const Residency popularity = static_plan_popularity(a_counts, n_layers, n_experts, capacity);
        const Residency even = static_plan_even(n_layers, n_experts, capacity);
        for (const Phase& ph : phases) {
            std::vector<double> random_rates(static_cast<size_t>(n_seeds));
            for (int s = 0; s < n_seeds; s++)
                random_rates[size_t(s)] =
                    hit_rate(static_plan_random(n_layers, n_experts, capacity, uint64_t(s)), ph.eval);
            double mean = 0, var = 0;
            for (double x : random_rates) mean += x / n_seeds;
            for (double x : random_rates) var += (x - mean) * (x - mean) / (n_seeds - 1);
            const double pop = hit_rate(popularity, ph.eval);
            const double oracle = hit_rate(static_plan_popularity(ph.eval, n_layers, n_experts, capacity), ph.eval);
            uint64_t routed = 0;
            for (uint64_t x : ph.eval) routed += x;
            json line{{"bench", "placement"},
                      {"phase", ph.name},
                      {"budget_frac", frac},
                      {"capacity", capacity},
                      {"experts", n_layers * n_experts},
                      {"eval_routed", routed},
                      {"popularity", pop},
                      {"random_mean", mean},
                      {"random_sd", std::sqrt(var)},
                      {"random_min", *std::min_element(random_rates.begin(), random_rates.end())},
                      {"random_max", *std::max_element(random_rates.begin(), random_rates.end())},
                      {"random_seeds", n_seeds},
                      {"even", hit_rate(even, ph.eval)},
                      {"oracle", oracle},
                      {"popularity_minus_random_points", 100 * (pop - mean)},
                      {"popularity_to_oracle", oracle > 0 ? pop / oracle : 0.0}};
            line["popularity_in_sample"] =
                ph.in_sample.empty() ? json(nullptr) : json(hit_rate(popularity, ph.in_sample));
            std::printf("%s\n", line.dump().c_str());
        }
    }
    return 0;
}

// "10,25,50%" -> {0.10, 0.25, 0.50}: shares of all experts (the % optional).
std::vector<double> parse_budgets(const std::string& text) {
    std::string list = text;
    if (!list.empty() && list.back() == '%') list.pop_back();
    std::vector<double> out;
    size_t pos = 0;
    while (pos <= list.size()) {
        size_t end = list.find(',', pos);
        if (end == std::string::npos) end = list.size();
        const std::string item = list.substr(pos, end - pos);
        char* stop = nullptr;
        const double v = std::strtod(item.c_str(), &stop);
        if (item.empty() || stop != item.c_str() + item.size() || !(v > 0) || v > 100)
            throw MoeError("--budgets: '" + item + "' is not a percentage in (0, 100] (give a list like 10,25,50%)");
        out.push_back(v / 100);
        pos = end + 1;
    }
    return out;
}

json trace_json(const RoutingTrace& t, const std::string& path) {
    uint64_t requests = 0, decode = 0;
    for (size_t i = 0; i < t.n_tokens(); i++) {
        requests += i == 0 || t.request[i] != t.request[i - 1];
        decode += t.phase[i] == TracePhase::DECODE;
    }
    return {{"file", path}, {"requests", requests}, {"tokens", t.n_tokens()}, {"decode_tokens", decode}};
}

// The latency model the replays price with, and a line saying where it came
// from: `calibrate`'s cached file for this machine and expert shape (bf16
// experts) when there is one (with its device curves when it measured a
// device), else the CPU roofline of this machine's ceiling measured now;
// the device is the nominal GPU unless the file measured one.
LatencyModel replay_latency_model(const ModelConfig& c, int threads, std::string& source) {
    const double bytes = cost_expert(c, 0).bytes, flops = cost_expert(c, 1).flops;
    const std::string key = engine_calibration_key(c, "bf16", threads, GPU_DEVICE_DEFAULT);
    std::optional<Calibration> cal;
    try {
        cal = calibration_find_cached(key);
    } catch (const MoeError& e) {
        std::fprintf(stderr, "moe-server: warning: ignoring the cached calibration: %s (run 'moe-server calibrate --force')\n",
                     e.what());
    }
    const std::string file = calibration_cache_path(key).string();
    if (cal && cal->has_device) {
        source = "calibrated (" + file + "): CPU and device measured";
        return latency_model_from_calibration(*cal);
    }
    LatencyCurve cpu;
    if (cal) {
        cpu = latency_model_from_calibration(*cal).cpu;
        source = "CPU calibrated (" + file + "); device: nominal GPU (placement/README.md)";
    } else {
        ThreadPool pool(threads);
        const Ceiling ceiling = bench_ceiling(pool, false);
        cpu = latency_curve_roofline(bytes, flops, ceiling.read_gbs, ceiling.fma_gflops);
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "default: CPU roofline of this machine's ceiling measured now (%.1f GB/s, %.0f GFLOP/s, %d "
                      "threads; no calibration file %s); device: nominal GPU (placement/README.md)",
                      ceiling.read_gbs, ceiling.fma_gflops, threads, file.c_str());
        source = buf;
    }
    return latency_model_nominal_gpu(cpu, bytes, flops);
}

// `bench cache`: the eval trace replayed against static popularity and each
// cache policy, for each budget (a share of all experts on the device),
// popularity from --profile or else from --trace. The eval trace is
// --eval-trace, or drawn from --eval-profile's counts (routing_trace_draw:
// i.i.d. per token, so no temporal locality). One JSON line per budget and
// policy (placement/README.md "Replaying a trace"). From the model's shape
// alone: its config.json or a synth: preset; weights are never read.
int bench_cache(Args& args) {
    const ModelSource source = parse_model_flag(args);
    const std::optional<std::string> trace_path = args.get("--trace");
    const std::optional<std::string> eval_trace_path = args.get("--eval-trace");
    const std::optional<std::string> eval_profile_path = args.get("--eval-profile");
    const std::optional<std::string> profile_path = args.get("--profile");
    TraceDrawShape draw;
    const char* draw_flags[] = {"--sample-requests", "--sample-prefill", "--sample-decode", "--seed"};
    if (!eval_profile_path)
        for (const char* flag : draw_flags)
            if (args.get(flag)) throw MoeError(std::string(flag) + ": only with --eval-profile");
    draw.requests = int(args.get_int("--sample-requests", draw.requests, 1, 100000));
    draw.prefill = int(args.get_int("--sample-prefill", draw.prefill, 1, 100000));
    draw.decode = int(args.get_int("--sample-decode", draw.decode, 0, 100000));
    const uint64_t seed = uint64_t(args.get_int("--seed", 0, 0, INT64_MAX));
    const std::vector<double> budgets = parse_budgets(args.get("--budgets", "10,25,50%"));
    const double share = args.get_double("--cache-share", 0.25, 0, 1);
    const std::string scope_name = args.get("--scope", "layer");
    const int threads = bench_threads_flag(args);
    args.finish();
    if (!trace_path && !profile_path)
        throw MoeError("bench cache: give --profile P.json or --trace A.jsonl (the popularity that pins experts)");
    if (bool(eval_trace_path) == bool(eval_profile_path))
        throw MoeError(
            "bench cache: give one of --eval-trace B.jsonl or --eval-profile B.json (the workload replayed)");
    CacheOptions options;
    if (scope_name == "global") {
        options.scope = CacheScope::GLOBAL;
    } else if (scope_name == "layer") {
        options.scope = CacheScope::PER_LAYER;
    } else {
        throw MoeError("--scope: expected global or layer, got '" + scope_name + "'");
    }
    const ModelConfig config = model_source_config(source);
    if (!config.is_moe()) throw MoeError(source.text + ": a dense model (no experts): nothing to cache");
    const ModelFingerprint fp = model_fingerprint(config);
    std::optional<RoutingTrace> trace;
    if (trace_path) trace = routing_trace_read(*trace_path);
    const RoutingTrace eval =
        eval_trace_path ? routing_trace_read(*eval_trace_path)
                        : routing_trace_draw(profile_read(*eval_profile_path), fp, draw, seed, *eval_profile_path);
    const std::string eval_path = eval_trace_path ? *eval_trace_path : *eval_profile_path;
    using Named = std::pair<const RoutingTrace*, const std::string*>;
    for (const auto& [t, path] :
         {Named{trace ? &*trace : nullptr, trace_path ? &*trace_path : nullptr}, Named{&eval, &eval_path}})
        if (t && !(t->model == fp))
            throw MoeError(*path + ": a routing trace of another model (" + fingerprint_describe(t->model) +
                           "; --model is " + fingerprint_describe(fp) + ")");
    const std::vector<int> moe = fp.moe_layers();
    const int n_layers = int(moe.size()), n_experts = config.n_experts;
    std::vector<uint64_t> popularity;
    if (profile_path) {
        Profile p = profile_read(*profile_path);
        profile_check(p, fp, *profile_path);
        popularity = table_rows(p.counts, n_experts, moe);
    } else {
        popularity = table_rows(routing_trace_profile(*trace).counts, n_experts, moe);
    }
    std::string latency_source;
    const LatencyModel model = replay_latency_model(config, threads, latency_source);
    const double expert_bytes = cost_expert(config, 0).bytes;
    const double dense_bytes = cost_dense_bytes(config);
    // Dense weights on the device, read at the device's streaming rate (its
    // curve's stream_ms for one expert's bytes; the whole one-token time when
    // the fit left stream_ms at 0). Attention over the KV cache is not counted.
    const double device_stream_ms = model.device.stream_ms > 0 ? model.device.stream_ms : model.device_ms(1);
    const double dense_ms = dense_bytes * device_stream_ms / expert_bytes;
    const char* caveat =
        "routing from a synthetic model's random router is a poor stand-in for a trained router: its experts "
        "repeat across tokens far less, so cache hit rates here say little about a real model's";
    const char* iid_note =
        "the eval trace is an i.i.d. draw from aggregate counts: each token's experts are drawn afresh, with no "
        "temporal locality, so this compares static placement with a cache under realistic marginals and says "
        "nothing about recency or prefetch on a real router";
    // A recorded trace's routing is in the figures when the eval trace or the
    // pinning popularity came from one (here: synthetic models' routers).
    const bool from_trace = eval_trace_path || !profile_path;
    std::string note = eval_profile_path ? iid_note : "";
    if (from_trace) note += std::string(note.empty() ? "" : "; ") + caveat;
    std::string row_note = eval_profile_path ? "i.i.d. draw from aggregate counts: no temporal locality" : "";
    if (from_trace && source.synthetic)
        row_note += std::string(row_note.empty() ? "" : "; ") + "synthetic router: a poor stand-in for a trained one";
    json setup{{"bench", "cache_setup"},
               {"model", source.text},
               {"fingerprint", fingerprint_describe(fp)},
               {"trace", trace ? trace_json(*trace, *trace_path) : json(nullptr)},
               {"eval", trace_json(eval, eval_path)},
               {"popularity_from", profile_path ? "profile " + *profile_path : "trace " + *trace_path},
               {"latency_model", latency_source},
               {"expert_bytes", expert_bytes},
               {"dense_bytes", dense_bytes},
               {"dense_ms_per_token", dense_ms},
               {"cache_share", share},
               {"scope", cache_scope_name(options.scope)}};
    if (eval_profile_path) {
        setup["eval_from"] = "drawn from profile " + *eval_profile_path + ": " + std::to_string(draw.requests) +
                             " requests x (" + std::to_string(draw.prefill) + " prefill + " +
                             std::to_string(draw.decode) + " decode) tokens, seed " + std::to_string(seed) +
                             ", experts i.i.d. per token and layer with the profile's per-layer shares";
    } else {
        setup["eval_from"] = "trace " + *eval_trace_path;
    }
    setup["note"] = note;
    std::printf("%s\n", setup.dump().c_str());
    for (double frac : budgets) {
        const int capacity = int(std::lround(frac * n_layers * n_experts));
        const int slots = int(std::lround(share * capacity));
        std::vector<std::optional<CachePolicy>> policies = {std::nullopt};
        for (int p = 0; p < CACHE_POLICY_COUNT; p++) policies.push_back(CachePolicy(p));
        for (const std::optional<CachePolicy>& policy : policies) {
            CacheReplayConfig rc{policy, capacity, policy ? slots : 0, options};
            const CacheReplayResult r = cache_replay(eval, popularity, rc, model, expert_bytes);
            const double per_token = r.decode_expert_ms_per_token();
            json line{{"bench", "cache"},
                      {"budget_frac", frac},
                      {"capacity", capacity},
                      {"experts", n_layers * n_experts},
                      {"policy", policy ? cache_policy_name(*policy) : "static"},
                      {"pinned", capacity - rc.cache_slots},
                      {"cache_slots", rc.cache_slots},
                      {"hit_rate", r.hit_rate()},
                      {"decode_hit_rate", r.decode_hit_rate()},
                      {"token_hit_rate", r.token_hit_rate()},
                      {"evictions", r.cache.evictions},
                      {"copies", r.copies},
                      {"bytes_copied", r.bytes_copied},
                      {"expert_ms_per_decode_token", per_token},
                      {"decode_tok_s", r.decode_steps ? 1e3 / (dense_ms + per_token) : 0.0},
                      {"expert_ms_total", r.expert_ms},
                      {"decode_tokens", r.decode_steps}};
            if (!row_note.empty()) line["note"] = row_note;
            std::printf("%s\n", line.dump().c_str());
        }
    }
    return 0;
}

// bench gpu: the CUDA device's raw rates (copies, memory, GEMM) and the
// expert FFN at n = 1..256 with its weights resident, beside the roofline
// from those rates; the expert shape of --model (default Mixtral-8x7B's).
int bench_gpu(Args& args, std::shared_ptr<const ModelWeights> loaded = nullptr) {
    std::optional<ModelSource> source = parse_optional_model_flag(args);
    const int gpu_device = parse_gpu_device_flag(args);
    int reps = int(args.get_int("--reps", 7, 1, 1000));
    // --type: the random expert quantized as a GGUF of that type holds it
    // (q8_0: Q8_0_R8; q4_k_m: Q4_K_R8 gate and up, Q6_K_R8 down).
    const std::string type = args.get("--type", "bf16");
    if (type != "bf16" && type != "q8_0" && type != "q4_k_m")
        throw MoeError("bench gpu: --type " + type + ": use bf16, q8_0 or q4_k_m");
    args.finish();
#ifdef MOE_HAVE_CUDA
    std::vector<GpuDevice> devices = gpu_devices();
    if (gpu_device < 0 || gpu_device >= int(devices.size()))
        throw MoeError("bench gpu: no CUDA device " + std::to_string(gpu_device) + " (" +
                       std::to_string(devices.size()) + " found)");
    gpu_set_device(gpu_device);
    // The expert timed: --model's first one in its own types when the model
    // is read from files, else random bf16 weights of its shape (default
    // Mixtral-8x7B's).
    int dim = 4096, hidden = 14336;
    std::shared_ptr<const ModelWeights> weights = std::make_shared<const ModelWeights>();
    if (source) {
        ModelConfig c = model_source_config(*source);
        dim = c.dim;
        hidden = c.hidden_dim;
        if (!source->synthetic) weights = model_source_shared_weights(*source, c, 1, std::move(loaded));
    }
    std::vector<bf16> random;
    ExpertWeights expert;
    // The first layer with experts (a MoE model's dense layers have none).
    auto with_experts = std::find_if(weights->layers.begin(), weights->layers.end(),
                                     [](const LayerWeights& L) { return !L.experts.empty(); });
    if (with_experts != weights->layers.end()) {
        expert = with_experts->experts[0];
    } else {
        const size_t mat = size_t(dim) * hidden;
        random.resize(3 * mat);
        uint32_t h = 12345;
        for (bf16& v : random) {
            h = h * 1664525u + 1013904223u;
            v = f32_to_bf16((float(h >> 16) / 65536.0f - 0.5f) * 0.05f);
        }
        expert = {weight_view(DType::BF16, random.data(), hidden, dim),
                  weight_view(DType::BF16, random.data() + mat, hidden, dim),
                  weight_view(DType::BF16, random.data() + 2 * mat, dim, hidden), {}};
    }
    std::vector<std::vector<uint8_t>> quantized;
    if (type != "bf16") {
        if (with_experts != weights->layers.end() || dtype_quantized(expert.w1.type))
            throw MoeError("bench gpu: --type quantizes the random expert of a synthetic or default shape; " +
                           std::string("this model's own expert is timed in its own types"));
        ThreadPool pool(std::max(1, int(std::thread::hardware_concurrency())));
        auto quantize = [&](WeightView& w, DType held) {
            quantized.emplace_back(w.rows * *dtype_row_bytes(held, w.cols));
            quantize_matrix(held, w, quantized.back().data(), pool);
            w = weight_view(held, quantized.back().data(), w.rows, w.cols);
        };
        quantized.reserve(3);
        const bool q8 = type == "q8_0";
        quantize(expert.w1, q8 ? DType::Q8_0_R8 : DType::Q4_K_R8);
        quantize(expert.w3, q8 ? DType::Q8_0_R8 : DType::Q4_K_R8);
        quantize(expert.w2, q8 ? DType::Q8_0_R8 : DType::Q6_K_R8);
    }
    GpuCeilings g = gpu_measure_ceilings();
    const std::string name = devices[size_t(gpu_device)].name;
    std::printf("%s\n", json{{"bench", "gpu"}, {"what", "ceilings"}, {"gpu", name},
                             {"h2d_pinned_gbs", g.h2d_pinned_gbs}, {"h2d_pageable_gbs", g.h2d_pageable_gbs},
                             {"h2d_registered_gbs", g.h2d_registered_gbs}, {"d2h_pinned_gbs", g.d2h_pinned_gbs},
                             {"device_gbs", g.device_gbs}, {"bf16_tflops", g.bf16_tflops},
                             {"copy_bytes", g.copy_bytes}, {"gemm_size", g.gemm_size}}
                            .dump()
                            .c_str());
    const double bytes = double(expert.bytes()), flops_per_token = 6.0 * dim * hidden;
    std::vector<int> ns;
    for (int n = 1; n <= 256; n *= 2) ns.push_back(n);
    std::vector<double> ms = gpu_time_expert_ffn(expert.w1, expert.w3, expert.w2, ns, reps);
    const std::string types =
        std::string(dtype_name(expert.w1.type)) + "+" + dtype_name(expert.w3.type) + "+" + dtype_name(expert.w2.type);
    for (size_t i = 0; i < ns.size(); i++) {
        const double roofline = std::max(bytes / (g.device_gbs * 1e6), flops_per_token * ns[i] / (g.bf16_tflops * 1e9));
        std::printf("%s\n", json{{"bench", "gpu"},
                                 {"what", "expert_ffn"},
                                 {"gpu", name},
                                 {"dim", dim},
                                 {"hidden_dim", hidden},
                                 {"types", types},
                                 {"bytes", bytes},
                                 {"n", ns[i]},
                                 {"ms", ms[i]},
                                 {"roofline_ms", roofline},
                                 {"ratio_to_roofline", roofline / ms[i]},
                                 {"device_gbs", g.device_gbs},
                                 {"bf16_tflops", g.bf16_tflops}}
                                .dump()
                                .c_str());
    }
    std::vector<double> copy = gpu_time_h2d_pinned({size_t(bytes)}, reps);
    std::printf("%s\n", json{{"bench", "gpu"}, {"what", "expert_copy"}, {"gpu", name}, {"bytes", bytes},
                             {"ms", copy[0]}, {"gbs", bytes / (copy[0] * 1e6)}, {"h2d_pinned_gbs", g.h2d_pinned_gbs}}
                            .dump()
                            .c_str());
    return 0;
#else
    (void)source, (void)gpu_device, (void)reps, (void)loaded, (void)type;
    throw MoeError("bench gpu: this build has no CUDA (configure with a CUDA toolkit present)");
#endif
}

// The shapes `bench kernels` times: --model's (its delta-rule shape when it
// has Gated DeltaNet layers), or by default the experts of the mixtral-8x7b
// and mixtral-mini presets and the delta rule of qwen3.6-35b-a3b and
// qwen35-moe-mini.
struct KernelShapes {
    std::vector<BenchExpertShape> experts;
    std::vector<BenchDeltaShape> delta;
    std::vector<BenchAttentionShape> attention;
};

BenchAttentionShape attention_shape(const std::string& label, const ModelConfig& c) {
    return {label, c.n_heads, c.n_kv_heads, c.head_dim, c.sliding_window};
}

BenchDeltaShape delta_shape(const std::string& label, const ModelConfig& c) {
    const LinearAttentionShape& s = c.linear;
    return {label, s.n_k_heads, s.n_v_heads, s.head_k_dim, s.head_v_dim};
}

KernelShapes bench_kernel_shapes(Args& args) {
    KernelShapes shapes;
    if (std::optional<ModelSource> source = parse_optional_model_flag(args)) {
        ModelConfig c = model_source_config(*source);
        shapes.experts = {{source->text, c.dim, c.hidden_dim}};
        if (c.n_linear_layers() > 0) shapes.delta = {delta_shape(source->text, c)};
        if (c.n_attention_layers() > 0) shapes.attention = {attention_shape(source->text, c)};
        return shapes;
    }
    for (SynthPreset preset : {SynthPreset::MIXTRAL_8X7B, SynthPreset::MIXTRAL_MINI}) {
        ModelConfig c = synth_preset(preset);
        shapes.experts.push_back({synth_preset_name(preset), c.dim, c.hidden_dim});
    }
    for (SynthPreset preset : {SynthPreset::QWEN36_35B_A3B, SynthPreset::QWEN35_MOE_MINI})
        shapes.delta.push_back(delta_shape(synth_preset_name(preset), synth_preset(preset)));
    for (SynthPreset preset : {SynthPreset::MIXTRAL_8X7B, SynthPreset::QWEN36_35B_A3B, SynthPreset::QWEN35_MOE_MINI})
        shapes.attention.push_back(attention_shape(synth_preset_name(preset), synth_preset(preset)));
    return shapes;
}

// The benchmarks a `bench suite` step may be, each given the suite's loaded
// weights (calibrate is the subcommand of that name).
struct SuiteStep {
    const char* name;
    int (*run)(Args&, std::shared_ptr<const ModelWeights>);
    bool threads;  // takes --threads (the suite's, unless the step gives its own)
};
constexpr SuiteStep SUITE_STEPS[] = {
    {"decode", [](Args& a, std::shared_ptr<const ModelWeights> w) { return bench_decode(a, false, std::move(w)); },
     true},
    {"prefill", [](Args& a, std::shared_ptr<const ModelWeights> w) { return bench_decode(a, true, std::move(w)); },
     true},
    {"beam", bench_beam, true},
    {"latency", bench_latency, true},
    {"gpu", bench_gpu, false},
    {"calibrate", calibrate_run, true},
};

// "decode --tokens 32" -> {"decode", "--tokens", "32"}: words between spaces
// (no quoting: no step flag takes a value with a space).
std::vector<std::string> split_words(const std::string& text) {
    std::vector<std::string> words;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t start = text.find_first_not_of(" \t", pos);
        if (start == std::string::npos) break;
        size_t end = text.find_first_of(" \t", start);
        if (end == std::string::npos) end = text.size();
        words.push_back(text.substr(start, end - start));
        pos = end;
    }
    return words;
}

// bench suite: benchmarks of one model in one process, its weights loaded
// once and read by every step (a step's engine loads nothing): building
// synth:mixtral-8x7b's 93 GB takes longer than most of its benchmarks.
// Each --step is one benchmark's words without --model; the steps run in
// order, one after another (each one's engine gone before the next), and a
// failed step is reported on stderr without stopping the rest.
int bench_suite(Args& args) {
    ModelSource source = parse_model_flag(args, "bench suite: ");
    const int threads = bench_threads_flag(args);
    std::vector<std::string> step_texts = args.get_all("--step");
    args.finish();
    if (step_texts.empty())
        throw MoeError(
            "bench suite: give at least one --step, e.g. --step \"decode --tokens 32\" (one of decode, "
            "prefill, beam, latency, gpu, calibrate)");
    // Every step's name checked before the model loads.
    std::vector<std::pair<const SuiteStep*, std::vector<std::string>>> steps;
    for (const std::string& text : step_texts) {
        std::vector<std::string> words = split_words(text);
        const SuiteStep* step = nullptr;
        for (const SuiteStep& s : SUITE_STEPS)
            if (!words.empty() && words[0] == s.name) step = &s;
        if (!step)
            throw MoeError("bench suite: --step '" + text +
                           "' is not one of decode, prefill, beam, latency, gpu, calibrate with its flags");
        auto gives = [&](const std::string& flag) {
            return std::any_of(words.begin(), words.end(),
                               [&](const std::string& w) { return w == flag || w.rfind(flag + "=", 0) == 0; });
        };
        if (gives("--model"))
            throw MoeError("bench suite: --step '" + text + "' names a model: the suite's --model is every step's");
        if (step->threads && !gives("--threads")) words.insert(words.end(), {"--threads", std::to_string(threads)});
        words.erase(words.begin());
        words.insert(words.end(), {"--model", source.text});
        steps.emplace_back(step, std::move(words));
    }

    auto t0 = std::chrono::steady_clock::now();
    auto seconds_since = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    };
    ModelConfig config = model_source_config(source);
    std::shared_ptr<const ModelWeights> weights = model_source_shared_weights(source, config, threads);
    std::fprintf(stderr, "bench suite: %s loaded in %.1f s\n", model_source_id(source).c_str(), seconds_since(t0));
    int failed = 0;
    for (size_t i = 0; i < steps.size(); i++) {
        auto t = std::chrono::steady_clock::now();
        std::string outcome = "ok";
        try {
            Args step_args(steps[i].second);
            if (steps[i].first->run(step_args, weights) != 0) outcome = "failed";
        } catch (const std::exception& e) {
            outcome = "failed: " + engine_error_text(e);
        }
        std::fflush(stdout);
        if (outcome != "ok") failed++;
        std::fprintf(stderr, "bench suite: step %zu/%zu '%s' %s (%.1f s)\n", i + 1, steps.size(), step_texts[i].c_str(),
                     outcome.c_str(), seconds_since(t));
    }
    if (failed)
        throw MoeError("bench suite: " + std::to_string(failed) + " of " + std::to_string(steps.size()) +
                       " steps failed (their lines above)");
    return 0;
}

}  // namespace

int cli_bench(const std::vector<std::string>& words) {
    if (words.empty())
        throw MoeError(
            "bench: give one of ceiling, kernels, decode, prefill, beam, server, latency, placement, cache, gpu, "
            "suite");
    const std::string& what = words[0];
    std::vector<std::string> rest(words.begin() + 1, words.end());
    if (what == "server") return bench_server_main(rest);
    Args args(rest);
    if (what == "decode") return bench_decode(args, false);
    if (what == "prefill") return bench_decode(args, true);
    if (what == "latency") return bench_latency(args);
    if (what == "beam") return bench_beam(args);
    if (what == "placement") return bench_placement(args);
    if (what == "cache") return bench_cache(args);
    if (what == "gpu") return bench_gpu(args);
    if (what == "suite") return bench_suite(args);
    if (what != "ceiling" && what != "kernels") throw MoeError("bench: unknown benchmark '" + what + "'");
    int threads = bench_threads_flag(args);
    auto isa = args.get("--cpu-isa");
    KernelShapes shapes = bench_kernel_shapes(args);
    const std::string only = args.get("--kernel").value_or("all");
    args.finish();
    if (only != "all" && only != "expert" && only != "delta_rule" && only != "attention")
        throw MoeError("bench kernels: --kernel: '" + only + "' is not one of all, expert, delta_rule, attention");
    std::vector<Isa> isas = bench_supported_isas();
    if (isa) {
        isas = {parse_isa("--cpu-isa", *isa)};
    }
    ThreadPool pool(threads);
    Ceiling ceiling = bench_ceiling(pool, true);
    if (what == "kernels" && (only == "all" || only == "expert")) bench_kernels(pool, ceiling, isas, shapes.experts);
    if (what == "kernels" && (only == "all" || only == "delta_rule")) bench_delta_rule(pool, ceiling, isas, shapes.delta);
    if (what == "kernels" && (only == "all" || only == "attention")) bench_attention(pool, ceiling, isas, shapes.attention);
    return 0;
}
