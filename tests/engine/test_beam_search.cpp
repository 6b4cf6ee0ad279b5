// Beam search on synthetic models: width 1 is greedy decoding exactly; on
// vocabulary-restricted cases small enough to enumerate, a wide enough beam
// returns the best-scoring sequence a brute force finds (with and without
// EOS, several length penalties) and narrower beams never score below
// greedy; runs are deterministic; KV memory stays within the live beams'
// blocks; forked beams give the same logits as separate sequences; bad
// parameters are refused by name. On the small Qwen3-MoE, OLMoE and
// Qwen2-MoE checkpoints (dense layers among MoE layers too), width 1 is
// greedy decoding and the hypotheses' scores are the double-precision
// reference model's log-probabilities of their tokens, the best one the best
// a brute force over the reference finds.
//
// The brute force scores sequences with its own forward passes (one fresh
// prefill of prompt + prefix per prefix) and its own log-softmax in double,
// so it shares only the forward pass with the engine. Batches of other
// sizes round differently in the last bits: scores are compared to 1e-5.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>

#include "base/errors.h"
#include "checkpoint_writer.h"
#include "cpu_kernels/isa.h"
#include "engine/devices/expert_executor.h"
#include "engine/model/weights.h"
#include "engine/runtime/beam_search.h"
#include "engine/runtime/forward.h"
#include "engine/state/kv_cache.h"
#include "engine/runtime/session.h"
#include "engine/runtime/token_mixer.h"
#include "reference_model.h"
#include "test_support.h"

namespace {

constexpr double SCORE_TOL = 1e-5;

std::vector<int> prompt_tokens(int n, int salt) {
    std::vector<int> t{1};
    for (int i = 1; i < n; i++) t.push_back(100 + (i * 7919 + salt * 104729) % 31000);
    return t;
}

// device_share > 0: that share of the experts on the emulated device.
Session make_engine(const char* preset, int ctx = 256, double device_share = 0) {
    SessionOptions o;
    o.threads = 2;
    o.ctx = ctx;
    o.device.emulate_gpu_expert_share = device_share;
    return Session(load_model({test_model_dir(preset), o.threads}), o);
}

// A request whose hypotheses all end by length (EOS ignored), unless
// allowed tokens and EOS say otherwise.
BeamRequest beam_request(std::vector<int> prompt, int width, int max_tokens, int num_return = 1,
                         float length_penalty = 1.0f, std::vector<int> allowed = {}, bool ignore_eos = true) {
    BeamRequest r;
    r.prompt = std::move(prompt);
    r.beam_width = width;
    r.max_tokens = max_tokens;
    r.num_return = num_return;
    r.length_penalty = length_penalty;
    r.allowed_tokens = std::move(allowed);
    r.ignore_eos = ignore_eos;
    return r;
}

// Same tokens and bitwise the same scores, in the same order.
void require_same_hypotheses(const BeamResult& a, const BeamResult& b) {
    REQUIRE(b.hypotheses.size() == a.hypotheses.size());
    for (size_t i = 0; i < a.hypotheses.size(); i++) {
        REQUIRE(b.hypotheses[i].tokens == a.hypotheses[i].tokens);
        REQUIRE(b.hypotheses[i].score == a.hypotheses[i].score);
    }
}

BeamResult beam(Session& e, const BeamRequest& r, const std::function<bool(const BeamStep&)>& on_step = nullptr) {
    return e.beam_search(
        r, on_step ? on_step : [](const BeamStep&) { return true; });
}

// log p(next token | prompt + prefix) for every token, from a fresh
// prefill through the model's own forward pass.
class BruteForce {
public:
    explicit BruteForce(const std::filesystem::path& dir)
        : config_(model_config_load(dir)),
          weights_(weights_load(config_, dir)),
          backend_(make_cpu_backend(config_, weights_, pool_, 128, 128 * config_.n_experts_active)),
          state_(make_sequence_state(config_, 1, 128, host_state_memory())),
          executor_(config_, weights_, pool_, 128),
          forward_(config_, *backend_, *state_, executor_, 128, 1) {}

    const std::vector<double>& next_logprobs(const std::vector<int>& prompt, const std::vector<int>& prefix) {
        std::vector<int> key = prompt;
        key.insert(key.end(), prefix.begin(), prefix.end());
        auto it = memo_.find(key);
        if (it != memo_.end()) return it->second;
        Batch batch;
        for (int i = 0; i < int(key.size()); i++) batch.add(key[i], i, 0, i + 1 == int(key.size()));
        const float* l = forward_.run(batch);
        const int vocab = config_.vocab_size;
        double mx = *std::max_element(l, l + vocab), sum = 0;
        for (int v = 0; v < vocab; v++) sum += std::exp(double(l[v]) - mx);
        std::vector<double> lp(vocab);
        for (int v = 0; v < vocab; v++) lp[v] = double(l[v]) - mx - std::log(sum);
        return memo_[key] = lp;
    }

    int eos() const { return config_.eos_token_ids.at(0); }

private:
    ModelConfig config_;
    ModelWeights weights_;
    ThreadPool pool_{2};
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<SequenceState> state_;
    CpuExpertExecutor executor_;
    ForwardPass forward_;
    std::map<std::vector<int>, std::vector<double>> memo_;
};

struct Scored {
    std::vector<int> tokens;  // EOS excluded
    double logprob = 0;
    int length = 0;  // EOS included
    double score = 0;
};

double penalised(double logprob, int length, double alpha) {
    return logprob / std::pow(double(length), alpha);
}

// Every sequence beam search could return: up to max_len tokens from
// `allowed`, ended by EOS (when allowed and not ignored) or by the length.
std::vector<Scored> enumerate(BruteForce& bf, const std::vector<int>& prompt, const std::vector<int>& allowed,
                              int max_len, double alpha, bool eos_ends) {
    std::vector<Scored> all;
    std::function<void(std::vector<int>&, double)> walk = [&](std::vector<int>& prefix, double lp) {
        const std::vector<double> next = bf.next_logprobs(prompt, prefix);
        for (int t : allowed) {
            double l = lp + next[t];
            int length = int(prefix.size()) + 1;
            if (eos_ends && t == bf.eos()) {
                all.push_back({prefix, l, length, penalised(l, length, alpha)});
                continue;
            }
            prefix.push_back(t);
            if (length == max_len)
                all.push_back({prefix, l, length, penalised(l, length, alpha)});
            else
                walk(prefix, l);
            prefix.pop_back();
        }
    };
    std::vector<int> prefix;
    walk(prefix, 0.0);
    std::sort(all.begin(), all.end(), [](const Scored& a, const Scored& b) { return a.score > b.score; });
    return all;
}

// Greedy decoding restricted to `allowed` (argmax, ties to the lower id).
Scored greedy(BruteForce& bf, const std::vector<int>& prompt, const std::vector<int>& allowed, int max_len,
              double alpha, bool eos_ends) {
    Scored g;
    for (;;) {
        const std::vector<double>& next = bf.next_logprobs(prompt, g.tokens);
        int best = allowed[0];
        for (int t : allowed)
            if (next[t] > next[best] || (next[t] == next[best] && t < best)) best = t;
        g.logprob += next[best];
        g.length++;
        if (eos_ends && best == bf.eos()) break;
        g.tokens.push_back(best);
        if (g.length == max_len) break;
    }
    g.score = penalised(g.logprob, g.length, alpha);
    return g;
}

}  // namespace

TEST_CASE("beam search of width 1 is greedy decoding exactly", "[beam]") {
    for (const char* preset : {"tiny", "small"}) {
        SECTION(preset) {
            Session engine = make_engine(preset);
            for (int salt : {1, 2, 3}) {
                INFO("prompt " << salt);
                GenerateRequest g;
                g.prompt = prompt_tokens(5 + salt, salt);
                g.sampling.temperature = 0;
                g.max_tokens = 20;
                GenerateResult want = engine.generate(g, [](const TokenEvent&) { return true; });

                BeamRequest b;
                b.prompt = g.prompt;
                b.beam_width = 1;
                b.max_tokens = 20;
                BeamResult got = beam(engine, b);
                REQUIRE(got.hypotheses.size() == 1);
                REQUIRE(got.hypotheses[0].tokens == want.tokens);
                REQUIRE(got.hypotheses[0].text == want.text);
                REQUIRE(got.hypotheses[0].finish_reason == want.finish_reason);
                REQUIRE(got.n_steps == want.n_generated - 1);  // one pass per token but the last

                // A stop string ends both at the same place.
                REQUIRE(want.text.size() > 8);
                g.stop = b.stop = {want.text.substr(want.text.size() / 2, 3)};
                GenerateResult want_stop = engine.generate(g, [](const TokenEvent&) { return true; });
                BeamHypothesis got_stop = beam(engine, b).hypotheses.at(0);
                REQUIRE(want_stop.finish_reason == FinishReason::STOP);
                REQUIRE(got_stop.finish_reason == FinishReason::STOP);
                REQUIRE(got_stop.tokens == want_stop.tokens);
                REQUIRE(got_stop.text == want_stop.text);
            }
        }
    }
}

TEST_CASE("a wide enough beam finds the best sequence a brute force finds", "[beam]") {
    std::filesystem::path dir = test_model_dir("tiny");
    Session engine = make_engine("tiny");
    BruteForce bf(dir);
    const int eos = bf.eos();
    const int LEAST = -1;  // stands for the prompt's least likely token
    struct Case {
        std::vector<int> allowed;
        int length, width;
        float alpha;
        bool ignore_eos;
    };
    // Exhaustive widths: without EOS, every prefix of length L-1 stays live
    // (w >= V^(L-1)); with EOS among V tokens, every candidate of the steps
    // before the last is kept (w >= V (V-1)^(L-2)), and at the last step all
    // candidates have one length, so ranking by log-probability is ranking
    // by score. Live beams dropped by early stopping must not matter.
    const std::vector<Case> cases = {
        {{300, 1000, 2000, 9000}, 3, 16, 1.0f, true},
        {{300, 1000, 2000}, 4, 27, 0.0f, true},
        {{450, 7000, 25000, 31000, 12}, 2, 5, 1.0f, true},
        {{eos, 1000, 2000}, 4, 12, 1.0f, false},
        {{eos, 1000, 2000}, 4, 16, 0.0f, false},
        {{eos, 300, 9000}, 4, 16, 2.0f, false},
        {{eos, 700, 5000, 20000}, 3, 12, 0.5f, false},
        // EOS and one token: the finished hypotheses fill the beam from the
        // second step on, so early stopping decides what survives. With the
        // prompt's least likely token (LEAST) and alpha > 1, the best
        // hypothesis is a long one although every live beam scores below
        // the finished ones at its current length.
        {{eos, 1000}, 7, 2, 1.0f, false},
        {{eos, 9000}, 7, 2, 0.5f, false},
        {{eos, LEAST}, 7, 2, 2.0f, false},
        {{eos, LEAST}, 7, 2, 3.0f, false},
    };
    for (size_t ci = 0; ci < cases.size(); ci++) {
        const Case& c = cases[ci];
        for (int salt : {4, 5}) {
            INFO("case " << ci << " prompt " << salt);
            std::vector<int> prompt = prompt_tokens(6, salt);
            std::vector<int> allowed = c.allowed;
            for (int& t : allowed) {
                if (t != LEAST) continue;
                const std::vector<double>& next = bf.next_logprobs(prompt, {});
                t = int(std::min_element(next.begin(), next.end()) - next.begin());
            }
            BeamRequest r =
                beam_request(prompt, c.width, c.length, std::min(c.width, 3), c.alpha, allowed, c.ignore_eos);
            BeamResult got = beam(engine, r);
            std::vector<Scored> all = enumerate(bf, prompt, allowed, c.length, c.alpha, !c.ignore_eos);
            REQUIRE(got.hypotheses.size() == size_t(r.num_return));

            // The best, and the runners-up, in order.
            for (int i = 0; i < r.num_return; i++) {
                const BeamHypothesis& h = got.hypotheses[i];
                INFO("hypothesis " << i);
                REQUIRE(h.score == Approx(all[i].score).margin(SCORE_TOL));
                if (i + 1 < int(all.size()) && all[i].score - all[i + 1].score > SCORE_TOL &&
                    (i == 0 || all[i - 1].score - all[i].score > SCORE_TOL)) {
                    REQUIRE(h.tokens == all[i].tokens);
                    REQUIRE(h.length == all[i].length);
                    REQUIRE(h.logprob == Approx(all[i].logprob).margin(SCORE_TOL));
                }
            }
            Scored g = greedy(bf, prompt, allowed, c.length, c.alpha, !c.ignore_eos);
            REQUIRE(got.hypotheses[0].score >= g.score - SCORE_TOL);
        }
    }
}

TEST_CASE("narrow beams never score below greedy decoding", "[beam]") {
    std::filesystem::path dir = test_model_dir("tiny");
    Session engine = make_engine("tiny");
    BruteForce bf(dir);
    const int eos = bf.eos();
    int strictly_better = 0;
    for (int salt = 10; salt < 16; salt++)
        for (int width : {2, 3, 5})
            for (float alpha : {0.0f, 1.0f})
                for (bool with_eos : {false, true}) {
                    INFO("prompt " << salt << " width " << width << " alpha " << alpha << " eos " << with_eos);
                    std::vector<int> allowed = {500 + salt, 1500, 2500 + 7 * salt, 3500, 4500, 8000 + salt};
                    if (with_eos) allowed.push_back(eos);
                    std::vector<int> prompt = prompt_tokens(4, salt);
                    BeamResult got = beam(engine, beam_request(prompt, width, 7, 1, alpha, allowed, !with_eos));
                    Scored g = greedy(bf, prompt, allowed, 7, alpha, with_eos);
                    REQUIRE(got.hypotheses.at(0).score >= g.score - SCORE_TOL);
                    if (got.hypotheses[0].score > g.score + SCORE_TOL) strictly_better++;
                    // Scores are what their definition says.
                    for (const BeamHypothesis& h : got.hypotheses)
                        REQUIRE(h.score == Approx(penalised(h.logprob, h.length, alpha)).epsilon(1e-12));
                }
    // The search does more than follow the greedy path.
    REQUIRE(strictly_better > 0);

    // A case (found by a scan on the tiny model) where width 2 without the
    // greedy-path protection drops the greedy prefix and ends at -96.9
    // against greedy's -94.6.
    std::vector<int> prompt = prompt_tokens(4, 11), allowed;
    for (int j = 0; j < 6; j++) allowed.push_back(300 + (j * 4909 + 11 * 811) % 31000);
    Scored g = greedy(bf, prompt, allowed, 8, 0.0, false);
    REQUIRE(beam(engine, beam_request(prompt, 2, 8, 1, 0.0f, allowed)).hypotheses.at(0).score >= g.score - SCORE_TOL);
}

TEST_CASE("beam search is deterministic and returns n distinct best hypotheses", "[beam]") {
    Session engine = make_engine("tiny");
    BeamRequest r = beam_request(prompt_tokens(9, 21), 6, 12, 4);
    BeamResult a = beam(engine, r);
    BeamResult b = beam(engine, r);  // prompt reused from the cache
    REQUIRE(b.n_cached == 8);
    r.reuse_prefix = false;
    BeamResult c = beam(engine, r);
    REQUIRE(a.hypotheses.size() == 4);
    require_same_hypotheses(a, c);
    // With the prefix reused, the last prompt token runs alone instead of in
    // the prompt's batch; the AVX2 and AVX-512 matmuls sum a token's dot
    // product in an order that depends on how many tokens share the call,
    // so scores may differ in their last bits.
    REQUIRE(b.hypotheses.size() == a.hypotheses.size());
    for (size_t i = 0; i < a.hypotheses.size(); i++) {
        REQUIRE(b.hypotheses[i].tokens == a.hypotheses[i].tokens);
        REQUIRE(b.hypotheses[i].score == Approx(a.hypotheses[i].score).epsilon(1e-6));
    }
    for (size_t i = 0; i < a.hypotheses.size(); i++) {
        REQUIRE(a.hypotheses[i].finish_reason == FinishReason::LENGTH);
        REQUIRE(a.hypotheses[i].tokens.size() == 12);
        if (i > 0) {
            REQUIRE(a.hypotheses[i].score <= a.hypotheses[i - 1].score);
            REQUIRE(a.hypotheses[i].tokens != a.hypotheses[i - 1].tokens);
        }
    }
}

TEST_CASE("all live beams run as one batch per step and expert load per step is recorded", "[beam]") {
    Session engine = make_engine("tiny");
    const ModelConfig& cfg = engine.model().config();
    std::vector<int> live;
    BeamResult res = beam(engine, beam_request(prompt_tokens(7, 30), 4, 10), [&](const BeamStep& s) {
        live.push_back(s.n_live);
        return true;
    });
    // No EOS, no stop: every step but the last runs one forward pass.
    REQUIRE(res.n_steps == 9);
    REQUIRE(int(live.size()) == res.n_steps);
    long tokens = 0;
    for (int n : live) tokens += n;
    REQUIRE(res.n_beam_tokens == tokens);
    REQUIRE(*std::max_element(live.begin(), live.end()) == 4);
    // Routing counts of the request: the prompt once plus every beam token
    // once, top-k experts each, per layer.
    RoutingCounts rc = engine.routing_counts();
    for (int l = 0; l < cfg.n_layers; l++) {
        uint64_t sum = 0;
        for (int e = 0; e < cfg.n_experts; e++) sum += rc.last[size_t(l) * cfg.n_experts + e];
        REQUIRE(sum == uint64_t((7 + tokens) * cfg.n_experts_active));
    }
    const ExpertLoad& load = res.expert_load;
    REQUIRE(int(load.step_max.size()) == res.n_steps);
    uint64_t routed = 0;
    for (size_t c = 0; c < load.histogram.size(); c++) routed += c * load.histogram[c];
    REQUIRE(routed == uint64_t(tokens * cfg.n_layers * cfg.n_experts_active));
    for (int s = 0; s < res.n_steps; s++) {
        REQUIRE(load.step_max[s] <= live[s]);
        REQUIRE(load.step_mean[s] <= load.step_max[s]);
        // 4 tokens x top-2 over 4 experts: some expert gets at least 2.
        if (live[s] == 4) REQUIRE(load.step_max[s] >= 2);
    }
    REQUIRE(load.max() == *std::max_element(load.step_max.begin(), load.step_max.end()));
    REQUIRE(load.mean() > 1.0);
}

TEST_CASE("beam search with experts on the emulated device returns the same hypotheses", "[beam]") {
    Session cpu = make_engine("small", 128);
    Session hybrid = make_engine("small", 128, 0.5);
    BeamRequest r = beam_request(prompt_tokens(11, 60), 8, 9, 8);
    BeamResult a = beam(cpu, r), b = beam(hybrid, r);
    REQUIRE(a.hypotheses.size() == 8);
    require_same_hypotheses(a, b);  // bitwise: placement never changes a sum
    // Every token routed to a pinned expert is computed there, and no
    // other's is but from a cache slot: per (layer, expert), the device's
    // tokens are the request's routed tokens when pinned; otherwise the
    // cache (on by default) may have run some of them. Whether a
    // non-resident expert runs on the CPU or is copied depends on this
    // machine's measured latency, so only the sum is asserted.
    ExecutionStats s = hybrid.execution_stats().last;
    const PlacementInfo& p = hybrid.placement();
    RoutingCounts rc = hybrid.routing_counts();
    uint64_t resident_tokens = 0;
    for (int l = 0; l < p.n_layers; l++)
        for (int e = 0; e < p.n_experts; e++) {
            const size_t cell = size_t(l) * p.n_experts + e;
            INFO("layer " << l << " expert " << e << (p.resident[cell] ? " (pinned)" : ""));
            const uint64_t routed = rc.last[cell];
            const uint64_t elsewhere = s.tokens_at(ExpertSite::CPU, l, e) + s.tokens_at(ExpertSite::COPY, l, e);
            if (p.resident[cell]) REQUIRE(s.tokens_at(ExpertSite::DEVICE, l, e) == routed);
            REQUIRE(s.tokens_at(ExpertSite::DEVICE, l, e) + elsewhere == routed);
            if (p.resident[cell]) resident_tokens += routed;
        }
    REQUIRE(resident_tokens > 0);  // half the experts resident: the check above saw device work
}

TEST_CASE("beam KV memory stays within the prompt's and the live beams' own blocks", "[beam]") {
    Session engine = make_engine("tiny", 512);
    const ModelConfig& c = engine.model().config();
    const size_t kv_bytes_per_position = size_t(2) * c.n_layers * c.n_kv_heads * c.head_dim * sizeof(float);
    for (int width : {1, 4, 16}) {
        INFO("width " << width);
        // 21 prompt tokens: a partial last block, shared by all beams.
        BeamRequest r = beam_request(prompt_tokens(21, 40 + width), width, 70);
        const int prompt_blocks = (21 + KV_BLOCK - 1) / KV_BLOCK;
        int steps = 0;
        BeamResult res = beam(engine, r, [&](const BeamStep& s) {
            int own = (s.length + KV_BLOCK - 1) / KV_BLOCK + 1;
            INFO("step " << s.step << " live " << s.n_live << " length " << s.length);
            REQUIRE(s.state_bytes <= size_t(prompt_blocks + s.n_live * own) * KV_BLOCK * kv_bytes_per_position);
            steps++;
            return true;
        });
        REQUIRE(steps == 69);
        REQUIRE(res.hypotheses.size() == 1);
    }
    // Afterwards only the prompt is held (kept for prefix reuse): a later
    // greedy request reuses it.
    GenerateRequest g;
    g.prompt = prompt_tokens(21, 56);
    g.sampling.temperature = 0;
    g.max_tokens = 2;
    REQUIRE(engine.generate(g, [](const TokenEvent&) { return true; }).n_cached == 20);
}

TEST_CASE("forked sequences in one batch give the logits of separate sequences", "[beam]") {
    std::filesystem::path dir = test_model_dir("small");
    ModelConfig config = model_config_load(dir);
    ModelWeights weights = weights_load(config, dir);
    ThreadPool pool(2);
    std::unique_ptr<SequenceState> state = make_sequence_state(config, 4, 128, host_state_memory());
    SequenceState& cache = *state;
    CpuExpertExecutor executor(config, weights, pool, 64);
    std::unique_ptr<Backend> backend = make_cpu_backend(config, weights, pool, 128, 64 * config.n_experts_active);
    ForwardPass forward(config, *backend, cache, executor, 64, 64);
    const int vocab = config.vocab_size;
    std::vector<int> prompt = prompt_tokens(19, 7);  // 19: the fork shares a partial block

    // Separately: prompt + [a, b] in sequence 3, each alone.
    auto alone = [&](std::vector<int> cont) {
        Batch batch;
        cache.clear(3);
        std::vector<int> all = prompt;
        all.insert(all.end(), cont.begin(), cont.end());
        for (int i = 0; i < int(all.size()); i++) batch.add(all[i], i, 3, i + 1 == int(all.size()));
        const float* l = forward.run(batch);
        return std::vector<float>(l, l + vocab);
    };
    std::vector<float> want_a = alone({500, 600}), want_b = alone({700, 800});

    // Prompt once in sequence 0, forked into 1 and 2, both decoded together.
    Batch batch;
    for (int i = 0; i < int(prompt.size()); i++) batch.add(prompt[i], i, 0, false);
    batch.want_logits.back() = 1;
    forward.run(batch);
    cache.fork(1, 0, 19);
    cache.fork(2, 0, 19);
    int n = int(prompt.size());
    std::vector<float> got_a, got_b;
    for (auto [ta, tb] : {std::pair{500, 700}, std::pair{600, 800}}) {
        batch.clear();
        batch.add(ta, n, 1, true);
        batch.add(tb, n, 2, true);
        const float* l = forward.run(batch);
        got_a.assign(l, l + vocab);
        got_b.assign(l + vocab, l + 2 * vocab);
        n++;
    }
    for (int v = 0; v < vocab; v++) {
        REQUIRE(got_a[v] == Approx(want_a[v]).margin(1e-4));
        REQUIRE(got_b[v] == Approx(want_b[v]).margin(1e-4));
    }
    REQUIRE(cache.kv()->cow_copies() == 2);  // one per forked sequence, of the shared partial block
}

TEST_CASE("bad beam parameters are refused by name", "[beam]") {
    Session engine = make_engine("tiny");
    BeamRequest ok;
    ok.prompt = prompt_tokens(4, 1);
    ok.max_tokens = 3;
    auto refused = [&](BeamRequest r, const std::string& what) {
        try {
            beam(engine, r);
            FAIL("accepted: " << what);
        } catch (const MoeError& e) {
            INFO(e.what());
            REQUIRE(std::string(e.what()).find(what) != std::string::npos);
        }
    };
    BeamRequest r = ok;
    r.beam_width = 0;
    refused(r, "beam_width");
    r.beam_width = 33;
    refused(r, "beam_width");
    r = ok;
    r.num_return = 5;
    refused(r, "num_return");
    r = ok;
    r.length_penalty = -0.5f;
    refused(r, "length_penalty");
    r.length_penalty = NAN;
    refused(r, "length_penalty");
    r = ok;
    r.allowed_tokens = {5, 32000};
    refused(r, "allowed token");
    r = ok;
    r.max_tokens = 0;
    refused(r, "max_tokens");
    r = ok;
    r.prompt.clear();
    refused(r, "prompt");
    // The engine still works afterwards.
    REQUIRE(beam(engine, ok).hypotheses.size() == 1);
}

namespace {

// log p(seq[i] | seq[..i]) summed over i >= from, under the reference.
double reference_logprob(const ReferenceModel& ref, const std::vector<int>& seq, size_t from) {
    const std::vector<std::vector<double>> logits = ref.forward(seq);
    double sum = 0;
    for (size_t i = from; i < seq.size(); i++) {
        const std::vector<double>& l = logits[i - 1];
        const double mx = *std::max_element(l.begin(), l.end());
        double z = 0;
        for (double x : l) z += std::exp(x - mx);
        sum += l[size_t(seq[i])] - mx - std::log(z);
    }
    return sum;
}

}  // namespace

TEST_CASE("beam search on the Qwen3-MoE OLMoE and Qwen2-MoE architectures matches the reference", "[beam]") {
    for (const auto& [name, config] : all_arch_configs()) {
        SECTION(name) {
            Session engine = arch_session(config);
            const ReferenceModel ref = ReferenceModel::load(test_checkpoint_dir("arch", config));
            std::vector<int> prompt = prompt_tokens(6, 7);
            for (int& t : prompt) t %= 256;  // the byte tokens of the 264-id vocabulary
            // A float forward pass against the reference's doubles: per token
            // log-probabilities agree to a few 1e-4, to a few 1e-3 with bf16
            // activations (the AVX512-BF16 path), as the logits do.
            // Block-quantized experts (gpt-oss's MXFP4 here) multiply int8
            // activations: as the bf16-activation path.
            bool quantized = false;
            for (const LayerWeights& L : engine.model().weights().layers)
                quantized = quantized || (!L.experts.empty() && dtype_quantized(L.experts[0].w1.type));
            const double per_token = isa_active() == Isa::AVX512BF16 || quantized ? 1e-2 : 2e-3;
            const auto tol = [&](size_t n) { return per_token * double(n); };

            // Width 1 is greedy decoding (which test_forward checks against the reference's).
            GenerateRequest g;
            g.prompt = prompt;
            g.sampling.temperature = 0;
            g.max_tokens = 10;
            g.ignore_eos = true;
            const GenerateResult want = engine.generate(g, [](const TokenEvent&) { return true; });
            const BeamResult one = beam(engine, beam_request(prompt, 1, 10));
            REQUIRE(one.hypotheses.size() == 1);
            REQUIRE(one.hypotheses[0].tokens == want.tokens);
            REQUIRE(one.n_steps == want.n_generated - 1);

            // Width 4: each hypothesis' log-probability is the reference's of its
            // tokens, its score that over its length, in order, none below greedy.
            const int len = 6;
            const BeamResult four = beam(engine, beam_request(prompt, 4, len, 3, 1.0f));
            REQUIRE(four.hypotheses.size() == 3);
            std::vector<int> greedy_seq = prompt;
            greedy_seq.insert(greedy_seq.end(), want.tokens.begin(), want.tokens.begin() + len);
            const double greedy_lp = reference_logprob(ref, greedy_seq, prompt.size());
            for (size_t i = 0; i < four.hypotheses.size(); i++) {
                const BeamHypothesis& h = four.hypotheses[i];
                INFO("hypothesis " << i);
                REQUIRE(h.length == len);
                std::vector<int> seq = prompt;
                seq.insert(seq.end(), h.tokens.begin(), h.tokens.end());
                REQUIRE(h.logprob == Approx(reference_logprob(ref, seq, prompt.size())).epsilon(0).margin(tol(len)));
                REQUIRE(h.score == Approx(h.logprob / len).epsilon(0).margin(1e-9));
                if (i > 0) REQUIRE(h.score <= four.hypotheses[i - 1].score);
            }
            REQUIRE(four.hypotheses[0].logprob >= greedy_lp - tol(len));

            // Restricted to four tokens, a beam of 16 keeps every prefix of two:
            // its best is the best of all 64 sequences under the reference.
            const std::vector<int> allowed = {want.tokens[0], 40, 101, 200};
            const BeamResult all = beam(engine, beam_request(prompt, 16, 3, 1, 0.0f, allowed));
            std::vector<std::pair<double, std::vector<int>>> scored;
            for (int a : allowed)
                for (int b : allowed)
                    for (int c : allowed) {
                        std::vector<int> seq = prompt;
                        seq.insert(seq.end(), {a, b, c});
                        scored.push_back({reference_logprob(ref, seq, prompt.size()), {a, b, c}});
                    }
            std::sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
            const BeamHypothesis& best = all.hypotheses.at(0);
            REQUIRE(best.score == Approx(scored[0].first).epsilon(0).margin(tol(3)));
            if (scored[0].first - scored[1].first > 2 * tol(3)) REQUIRE(best.tokens == scored[0].second);
        }
    }
}
