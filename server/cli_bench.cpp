// `moe-server bench ceiling|kernels|decode|prefill|server|latency|placement`:
// benchmarks print JSON lines holding each figure beside the machine's
// ceiling measured in the same run, so the ratios hold on a noisy shared
// machine (for placement the ceiling is the best static plan for the
// evaluated workload itself). Not tests.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cpu_kernels/bench.h"
#include "cpu_kernels/kernels.h"
#include "engine/cost.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/fingerprint.h"
#include "placement/residency.h"
#include "profiles/profile.h"
#include "server/cli.h"
#include "server/cli_calibrate.h"
#include "server/serve.h"

using json = nlohmann::json;


int bench_threads_flag(Args& args) {
    int t = int(args.get_int("--threads", 0, 0, 1024));
    return t > 0 ? t : physical_core_count();
}

namespace {

// A prompt of n ordinary-text token ids (BOS first), the same every run.
std::vector<int> bench_prompt(const Engine& engine, int n) {
    std::string text;
    std::vector<int> ids{engine.config().bos_token_id};
    while (int(ids.size()) < n) {
        text = "The quick brown fox jumps over the lazy dog while the band plays on. ";
        std::vector<int> more = engine.tokenizer().encode(text);
        ids.insert(ids.end(), more.begin(), more.end());
    }
    ids.resize(n);
    return ids;
}

// With --emulate-gpu: the dry run's placement and where the last run's
// experts went (the speed of an emulated device means nothing).
void add_placement_fields(json& line, const Engine& engine) {
    const PlacementInfo& p = engine.placement();
    if (p.device == "none") return;
    ExecutionStats s = engine.execution_stats().last;
    line["device"] = p.device;
    line["resident_experts"] = p.capacity;
    line["plan"] = p.plan;
    line["hit_rate"] = s.hit_rate();
    line["device_share"] = s.device_share();
    line["expert_runs"] = {{"cpu", s.runs[int(ExpertSite::CPU)]},
                           {"device", s.runs[int(ExpertSite::DEVICE)]},
                           {"copy", s.runs[int(ExpertSite::COPY)]}};
    line["copy_bytes"] = s.copy_bytes;
}

int bench_decode(Args& args, bool prefill) {
    EngineOptions o;
    auto model = args.get("--model");
    if (!model) throw MoeError("--model is required");
    o.model_dir = *model;
    o.threads = bench_threads_flag(args);
    int n_tokens = int(args.get_int("--tokens", prefill ? 512 : 64, 1, 1 << 16));
    int repeats = int(args.get_int("--repeat", 3, 1, 100));
    o.device = parse_device_flags(args);
    apply_isa_flag(args);
    args.finish();
    o.ctx = std::max(256, n_tokens + 64);
    o.max_batch = prefill ? std::max(512, n_tokens) : 512;
    Engine engine(o);
    Ceiling ceiling;
    {
        // Its own pool, gone before the engine runs: idle workers spin a
        // while after each job and would compete with the engine's threads.
        ThreadPool pool(engine.threads());
        ceiling = bench_ceiling(pool, true);
    }
    const ModelConfig& c = engine.config();

    GenerateRequest req;
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    req.reuse_prefix = false;
    double best = 0;
    if (prefill) {
        req.prompt = bench_prompt(engine, n_tokens);
        req.max_tokens = 1;
        for (int r = 0; r < repeats; r++) {
            GenerateResult res = engine.generate(req, [](const TokenEvent&) { return true; });
            best = std::max(best, res.prefill_tok_s());
        }
        StageCost cost = cost_prefill(c, n_tokens);
        double gflops = cost.flops / (n_tokens / best) / 1e9;
        json line{{"bench", "prefill"}, {"model", engine.model_id()}, {"isa", isa_name(isa_active())},
                  {"threads", engine.threads()}, {"tokens", n_tokens}, {"prefill_tok_s", best},
                  {"gflops", gflops}, {"fma_peak_gflops", ceiling.fma_gflops},
                  {"ratio_to_peak", gflops / ceiling.fma_gflops}};
        add_placement_fields(line, engine);
        std::printf("%s\n", line.dump().c_str());
    } else {
        req.prompt = bench_prompt(engine, 16);
        req.max_tokens = n_tokens;
        for (int r = 0; r < repeats; r++) {
            GenerateResult res = engine.generate(req, [](const TokenEvent&) { return true; });
            best = std::max(best, res.decode_tok_s());
        }
        double bytes = cost_decode_token(c).bytes;
        double roofline = roofline_decode_tok_s(bytes, ceiling);
        json line{{"bench", "decode"}, {"model", engine.model_id()}, {"isa", isa_name(isa_active())},
                  {"threads", engine.threads()}, {"tokens", n_tokens}, {"decode_tok_s", best},
                  {"weight_bytes_per_token", bytes}, {"read_gbs", ceiling.read_gbs},
                  {"roofline_tok_s", roofline}, {"ratio_to_roofline", best / roofline}};
        add_placement_fields(line, engine);
        std::printf("%s\n", line.dump().c_str());
    }
    return 0;
}

std::string required_flag(Args& args, const std::string& flag) {
    auto v = args.get(flag);
    if (!v) throw MoeError(flag + " is required");
    return *v;
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
    const std::string model = required_flag(args, "--model");
    const std::string a_path = required_flag(args, "--profile");
    const std::string b_path = required_flag(args, "--eval");
    const int n_seeds = int(args.get_int("--seeds", 100, 2, 100000));
    args.finish();
    ModelConfig config = model_config_load(model);
    if (!config.is_moe()) throw MoeError(model + ": a dense model (no experts): nothing to place");
    const ModelFingerprint fp = model_fingerprint(config);
    Profile a = profile_read(a_path);
    profile_check(a, fp, a_path);
    Profile b = profile_read(b_path);
    profile_check(b, fp, b_path);
    if (!b.has_phases())
        throw MoeError(b_path + ": --eval needs a profile written by `moe-server profile` (prefill and decode counts)");
    const int n_layers = config.n_layers, n_experts = config.n_experts;
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
    const Phase phases[] = {{"all", a.counts, b.counts}, {"decode", a.decode, b.decode}};
    for (double frac : {0.10, 0.25, 0.50}) {
        const int capacity = int(std::lround(frac * n_layers * n_experts));
        // Serving ranks by all of A's tokens, so one plan is scored on both phases.
        const Residency popularity = static_plan_popularity(a.counts, n_layers, n_experts, capacity);
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

}  // namespace

int cli_bench(const std::vector<std::string>& words) {
    if (words.empty())
        throw MoeError("bench: give one of ceiling, kernels, decode, prefill, server, latency, placement");
    const std::string& what = words[0];
    std::vector<std::string> rest(words.begin() + 1, words.end());
    if (what == "server") return bench_server_main(rest);
    Args args(rest);
    if (what == "decode") return bench_decode(args, false);
    if (what == "prefill") return bench_decode(args, true);
    if (what == "latency") return bench_latency(args);
    if (what == "placement") return bench_placement(args);
    if (what != "ceiling" && what != "kernels") throw MoeError("bench: unknown benchmark '" + what + "'");
    int threads = bench_threads_flag(args);
    auto isa = args.get("--cpu-isa");
    args.finish();
    std::vector<Isa> isas = bench_supported_isas();
    if (isa) {
        auto parsed = isa_parse(*isa);
        if (!parsed || !isa_supported(*parsed)) throw MoeError("--cpu-isa: '" + *isa + "' is not a path this CPU runs");
        isas = {*parsed};
    }
    ThreadPool pool(threads);
    Ceiling ceiling = bench_ceiling(pool, true);
    if (what == "kernels") bench_kernels(pool, ceiling, isas);
    return 0;
}
