// Tests for engine/sampler: determinism per seed, greedy, each truncation
// (top-k, top-p, min-p) against distributions whose answer is known, the
// empirical distribution of draws, every penalty and its window, logprobs,
// and stop-string matching across pushes. Must not need a model.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/errors.h"
#include "engine/runtime/sampler.h"

namespace {

SamplingParams sampling_off(float temperature, uint64_t seed = 1) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

std::vector<float> random_logits(int n, uint64_t seed, float scale = 3.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng);
    return v;
}

// Logits whose softmax is exactly probs (up to rounding).
std::vector<float> logits_of(const std::vector<double>& probs) {
    std::vector<float> v;
    for (double p : probs) v.push_back(p > 0 ? float(std::log(p)) : -INFINITY);
    return v;
}

std::vector<int> draw_many(Sampler& sampler, const std::vector<float>& logits, int n) {
    std::vector<int> out;
    for (int i = 0; i < n; ++i) {
        std::vector<float> copy = logits;
        out.push_back(sampler.sample(copy.data(), {}));
    }
    return out;
}

std::set<int> drawn_set(Sampler& sampler, const std::vector<float>& logits, int n) {
    auto tokens = draw_many(sampler, logits, n);
    return std::set<int>(tokens.begin(), tokens.end());
}

// Applies the sampler once (greedy, so no randomness) and returns the
// logits after penalties.
std::vector<float> penalised(const SamplingParams& params, std::vector<float> logits, const std::vector<int>& history) {
    Sampler s(params, int(logits.size()));
    s.sample(logits.data(), history);
    return logits;
}

}  // namespace

TEST_CASE("same seed gives the same tokens, different seeds differ", "[sampler]") {
    auto logits = random_logits(500, 7, 1.0f);
    SamplingParams p;  // defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05
    p.seed = 1234;
    Sampler a(p, 500), b(p, 500);
    auto ta = draw_many(a, logits, 1000);
    auto tb = draw_many(b, logits, 1000);
    REQUIRE(ta == tb);
    REQUIRE(std::set<int>(ta.begin(), ta.end()).size() > 5);  // really random, not greedy

    p.seed = 1235;
    Sampler c(p, 500);
    auto tc = draw_many(c, logits, 1000);
    REQUIRE(ta != tc);
    int same = 0;
    for (int i = 0; i < 1000; ++i) same += ta[i] == tc[i];
    REQUIRE(same < 500);
}

TEST_CASE("greedy is argmax with ties to the lowest id", "[sampler]") {
    for (uint64_t seed = 0; seed < 20; ++seed) {
        auto logits = random_logits(1000, seed);
        int expected = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
        for (float t : {0.0f, -1.0f}) {
            Sampler s(sampling_off(t, seed), 1000);
            auto copy = logits;
            REQUIRE(s.sample(copy.data(), {}) == expected);
        }
    }
    std::vector<float> ties = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
    Sampler s(sampling_off(0.0f), 5);
    REQUIRE(s.sample(ties.data(), {}) == 1);
}

TEST_CASE("top_k = 1 is greedy", "[sampler]") {
    for (uint64_t seed = 0; seed < 50; ++seed) {
        auto logits = random_logits(300, seed, 0.5f);
        int expected = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
        SamplingParams p = sampling_off(1.5f, seed);
        p.top_k = 1;
        Sampler s(p, 300);
        auto copy = logits;
        REQUIRE(s.sample(copy.data(), {}) == expected);
    }
}

TEST_CASE("top-k never leaves the k best", "[sampler]") {
    const int k = 7;
    auto logits = random_logits(2000, 3, 0.3f);  // flat-ish: many tokens would be drawn without top-k
    std::vector<int> order(2000);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    std::set<int> best(order.begin(), order.begin() + k);
    SamplingParams p = sampling_off(2.0f, 9);
    p.top_k = k;
    Sampler s(p, 2000);
    REQUIRE(drawn_set(s, logits, 3000) == best);  // every drawn token is a k-best one, and all k are reached
}

TEST_CASE("top-p keeps exactly the minimal nucleus", "[sampler]") {
    // Probabilities placed on shuffled ids, so id order says nothing.
    std::vector<double> probs(10, 0.0);
    const std::vector<int> ids = {7, 2, 9, 0, 5};
    const std::vector<double> mass = {0.45, 0.25, 0.15, 0.10, 0.05};
    for (size_t i = 0; i < ids.size(); ++i) probs[ids[i]] = mass[i];
    auto logits = logits_of(probs);

    struct Case {
        float top_p;
        size_t nucleus;
    };
    for (Case c : {Case{0.0f, 1}, Case{0.3f, 1}, Case{0.5f, 2}, Case{0.69f, 2}, Case{0.71f, 3}, Case{0.88f, 4},
                   Case{0.96f, 5}, Case{1.0f, 5}}) {
        SamplingParams p = sampling_off(1.0f, 11);
        p.top_p = c.top_p;
        Sampler s(p, 10);
        INFO("top_p " << c.top_p);
        REQUIRE(drawn_set(s, logits, 2000) == std::set<int>(ids.begin(), ids.begin() + c.nucleus));
    }
}

TEST_CASE("top-p over a large flat vocabulary keeps the lowest ids of the nucleus", "[sampler]") {
    // 1000 equal tokens: a nucleus of 151 (more than one partial-sort chunk);
    // ties are broken by token id.
    std::vector<float> logits(1000, 0.5f);
    SamplingParams p = sampling_off(1.0f, 5);
    p.top_p = 0.1505f;
    Sampler s(p, 1000);
    auto set = drawn_set(s, logits, 20000);
    std::set<int> expected;
    for (int i = 0; i < 151; ++i) expected.insert(i);
    REQUIRE(set == expected);

    // Two levels: 300 heavy tokens (scattered ids) hold 90% of the mass.
    std::vector<double> probs(1000, 0.1 / 700);
    std::set<int> heavy;
    for (int i = 0; i < 300; ++i) heavy.insert((i * 7919) % 1000);
    for (int id : heavy) probs[id] = 0.9 / 300;
    SamplingParams q = sampling_off(1.0f, 6);
    q.top_p = 0.85f;
    Sampler s2(q, 1000);
    // ceil(0.85 / 0.003) = 284 heavy tokens, the lowest ids among equals.
    std::set<int> expected2(heavy.begin(), std::next(heavy.begin(), 284));
    REQUIRE(drawn_set(s2, logits_of(probs), 20000) == expected2);
}

TEST_CASE("top-p renormalises over the top-k set", "[sampler]") {
    // top_k = 3 keeps {0.4, 0.24, 0.16}, renormalised {0.5, 0.3, 0.2}.
    std::vector<double> probs = {0.4, 0.24, 0.16, 0.1, 0.1};
    SamplingParams p = sampling_off(1.0f, 3);
    p.top_k = 3;
    p.top_p = 0.7f;  // renormalised: 0.5, 0.8 -> 2 tokens; unrenormalised: 0.4, 0.64, 0.8 -> 3 tokens
    Sampler s(p, 5);
    REQUIRE(drawn_set(s, logits_of(probs), 2000) == std::set<int>{0, 1});
}

TEST_CASE("min-p keeps tokens at least min_p times the best", "[sampler]") {
    std::vector<double> probs(20, 0.0);
    const std::vector<double> mass = {0.4, 0.3, 0.11, 0.09, 0.05, 0.05};
    const std::vector<int> ids = {3, 17, 8, 0, 12, 5};
    for (size_t i = 0; i < ids.size(); ++i) probs[ids[i]] = mass[i];
    SamplingParams p = sampling_off(1.0f, 4);
    p.min_p = 0.25f;  // threshold 0.1
    Sampler s(p, 20);
    REQUIRE(drawn_set(s, logits_of(probs), 3000) == std::set<int>{3, 17, 8});
    p.min_p = 0.2f;  // threshold 0.08
    Sampler s2(p, 20);
    REQUIRE(drawn_set(s2, logits_of(probs), 3000) == std::set<int>{3, 17, 8, 0});
}

TEST_CASE("draw frequencies follow the truncated, renormalised distribution", "[sampler]") {
    const std::vector<float> logits = {2.0f, 1.6f, 1.5f, 0.9f, 0.3f, -0.2f, -1.0f, 0.0f, 1.1f, -3.0f};
    const int n = int(logits.size());
    SamplingParams p = sampling_off(0.7f, 2024);
    // Each cut removes something: top-k drops ids 5, 6, 9; top-p (0.9458 <
    // 0.97 <= 0.9786) drops id 7; min-p (0.088 < 0.1 * p_max) drops id 4.
    p.top_k = 7;
    p.top_p = 0.97f;
    p.min_p = 0.1f;

    // Expected distribution, computed independently in double.
    std::vector<double> prob(n);
    double z = 0;
    for (int i = 0; i < n; ++i) z += prob[i] = std::exp(logits[i] / 0.7);
    for (auto& x : prob) x /= z;
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
    order.resize(7);
    double topk_mass = 0;
    for (int id : order) topk_mass += prob[id];
    std::vector<int> kept;
    double cum = 0;
    for (int id : order) {
        kept.push_back(id);
        cum += prob[id] / topk_mass;
        if (cum >= 0.97) break;
    }
    std::erase_if(kept, [&](int id) { return prob[id] < 0.1 * prob[order[0]]; });
    REQUIRE(kept == std::vector<int>{0, 1, 2, 8, 3});
    double kept_mass = 0;
    for (int id : kept) kept_mass += prob[id];

    const int draws = 200000;
    Sampler s(p, n);
    std::vector<int> count(n, 0);
    for (int t : draw_many(s, std::vector<float>(logits), draws)) count[t]++;
    double chi2 = 0;
    for (int id = 0; id < n; ++id) {
        bool in = std::find(kept.begin(), kept.end(), id) != kept.end();
        if (!in) {
            REQUIRE(count[id] == 0);
            continue;
        }
        double expected = draws * prob[id] / kept_mass;
        chi2 += (count[id] - expected) * (count[id] - expected) / expected;
    }
    // df = kept - 1 <= 5; P(chi2 > 25) < 1e-4 for df 5. A uniform or
    // unrenormalised draw is off by far more at 200000 draws.
    REQUIRE(chi2 < 25.0);
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits", "[sampler]") {
    SamplingParams p = sampling_off(0.0f);
    p.repetition_penalty = 2.0f;
    p.penalty_last_n = -1;
    std::vector<float> logits = {4.0f, -3.0f, 1.0f, 0.0f, 5.0f};
    auto out = penalised(p, logits, {0, 1, 1, 1, 3});  // once per distinct token, not per occurrence
    REQUIRE(out[0] == 2.0f);
    REQUIRE(out[1] == -6.0f);
    REQUIRE(out[2] == 1.0f);
    REQUIRE(out[3] == 0.0f);
    REQUIRE(out[4] == 5.0f);
}

TEST_CASE("presence and frequency penalties follow OpenAI", "[sampler]") {
    SamplingParams p = sampling_off(0.0f);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = -1;
    std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
    auto out = penalised(p, logits, {2, 0, 2, 2});
    REQUIRE(out[0] == Approx(1.0 - 0.5 - 0.25));
    REQUIRE(out[1] == 1.0f);
    REQUIRE(out[2] == Approx(1.0 - 0.5 - 0.75));
    REQUIRE(out[3] == 1.0f);

    // Repetition first, then presence / frequency: 3/2 - 0.5 - 0.25*2 = 0.5
    // (the other order would give (3 - 1) / 2 = 1).
    p.repetition_penalty = 2.0f;
    auto both = penalised(p, {3.0f, 0.0f}, {0, 0});
    REQUIRE(both[0] == Approx(0.5));
    REQUIRE(both[1] == 0.0f);

    // Penalties decide the greedy pick.
    SamplingParams g = sampling_off(0.0f);
    g.frequency_penalty = 1.0f;
    g.penalty_last_n = -1;
    std::vector<float> l = {2.0f, 1.5f};
    Sampler s(g, 2);
    REQUIRE(s.sample(l.data(), std::vector<int>{0}) == 1);
}

TEST_CASE("penalty_last_n limits the window", "[sampler]") {
    SamplingParams p = sampling_off(0.0f);
    p.frequency_penalty = 1.0f;
    const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
    const std::vector<int> history = {0, 0, 1, 2, 2};

    p.penalty_last_n = 2;  // sees {2, 2}
    REQUIRE(penalised(p, logits, history) == std::vector<float>{0.0f, 0.0f, -2.0f, 0.0f});
    p.penalty_last_n = 3;  // sees {1, 2, 2}
    REQUIRE(penalised(p, logits, history) == std::vector<float>{0.0f, -1.0f, -2.0f, 0.0f});
    p.penalty_last_n = -1;
    REQUIRE(penalised(p, logits, history) == std::vector<float>{-2.0f, -1.0f, -2.0f, 0.0f});
    p.penalty_last_n = 100;
    REQUIRE(penalised(p, logits, history) == std::vector<float>{-2.0f, -1.0f, -2.0f, 0.0f});
    p.penalty_last_n = 0;
    REQUIRE(penalised(p, logits, history) == logits);
}

TEST_CASE("penalty counts do not leak between calls", "[sampler]") {
    SamplingParams p = sampling_off(0.0f);
    p.frequency_penalty = 1.0f;
    p.penalty_last_n = -1;
    Sampler s(p, 4);
    std::vector<float> a = {0.0f, 0.0f, 0.0f, 0.0f};
    s.sample(a.data(), std::vector<int>{1, 1, 3});
    std::vector<float> b = {0.0f, 0.0f, 0.0f, 0.0f};
    s.sample(b.data(), std::vector<int>{2});
    REQUIRE(b == std::vector<float>{0.0f, 0.0f, -1.0f, 0.0f});
}

TEST_CASE("last_logprob is the log-softmax after penalties and temperature", "[sampler]") {
    const std::vector<float> logits = {1.0f, 2.0f, -0.5f, 0.25f};
    auto log_softmax = [](std::vector<double> x, double t) {
        double z = 0;
        for (auto& v : x) z += std::exp(v / t);
        for (auto& v : x) v = v / t - std::log(z);
        return x;
    };

    SamplingParams p = sampling_off(2.0f, 8);
    p.top_k = 1;  // truncation must not affect logprobs
    Sampler s(p, 4);
    auto copy = logits;
    REQUIRE(s.sample(copy.data(), {}) == 1);
    auto expected = log_softmax({1.0, 2.0, -0.5, 0.25}, 2.0);
    for (int i = 0; i < 4; ++i) REQUIRE(s.last_logprob(i) == Approx(expected[i]).epsilon(1e-5));

    SamplingParams g = sampling_off(0.0f);
    g.presence_penalty = 1.5f;
    g.penalty_last_n = -1;
    Sampler sg(g, 4);
    copy = logits;
    REQUIRE(sg.sample(copy.data(), std::vector<int>{1}) == 0);  // 2 - 1.5 = 0.5 < 1
    expected = log_softmax({1.0, 0.5, -0.5, 0.25}, 1.0);
    for (int i = 0; i < 4; ++i) REQUIRE(sg.last_logprob(i) == Approx(expected[i]).epsilon(1e-5));

    REQUIRE_THROWS_AS(sg.last_logprob(4), MoeError);
    Sampler fresh(g, 4);
    REQUIRE_THROWS_AS(fresh.last_logprob(0), MoeError);
}

TEST_CASE("last_top_logprobs are the k largest logprobs, best first, between draws", "[sampler]") {
    const int n = 1000;
    const std::vector<float> logits = random_logits(n, 5);
    SamplingParams p = sampling_off(0.7f, 3);
    p.top_k = 20;
    p.top_p = 0.9f;
    Sampler s(p, n);
    std::vector<std::pair<int, float>> top;
    REQUIRE_THROWS_AS(s.last_top_logprobs(3, top), MoeError);
    for (int round = 0; round < 3; ++round) {
        auto copy = logits;
        s.sample(copy.data(), {});
        std::vector<int> order(n);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int b) { return s.last_logprob(a) > s.last_logprob(b); });
        s.last_top_logprobs(5, top);
        REQUIRE(top.size() == 5);
        for (int i = 0; i < 5; ++i) {
            CHECK(top[size_t(i)].first == order[size_t(i)]);
            CHECK(top[size_t(i)].second == s.last_logprob(order[size_t(i)]));
        }
    }
    s.last_top_logprobs(0, top);
    CHECK(top.empty());
    s.last_top_logprobs(n + 5, top);  // capped at the vocabulary
    CHECK(top.size() == size_t(n));
}

TEST_CASE("logits of -inf are never drawn", "[sampler]") {
    std::vector<float> logits(50, -INFINITY);
    logits[10] = 0.0f;
    logits[20] = 0.0f;
    logits[33] = NAN;
    SamplingParams p = sampling_off(1.0f, 2);
    Sampler s(p, 50);
    REQUIRE(drawn_set(s, logits, 500) == std::set<int>{10, 20});
    std::vector<float> all(50, -INFINITY);
    REQUIRE_THROWS_AS(s.sample(all.data(), {}), MoeError);
}

TEST_CASE("sampler rejects bad parameters and history", "[sampler]") {
    auto make = [](auto edit) {
        SamplingParams p;
        edit(p);
        return Sampler(p, 10);
    };
    REQUIRE_THROWS_AS(make([](SamplingParams& p) { p.top_k = -1; }), MoeError);
    REQUIRE_THROWS_AS(make([](SamplingParams& p) { p.top_p = 1.5f; }), MoeError);
    REQUIRE_THROWS_AS(make([](SamplingParams& p) { p.min_p = -0.1f; }), MoeError);
    REQUIRE_THROWS_AS(make([](SamplingParams& p) { p.repetition_penalty = 0.0f; }), MoeError);
    REQUIRE_THROWS_AS(make([](SamplingParams& p) { p.temperature = NAN; }), MoeError);
    REQUIRE_THROWS_AS(make([](SamplingParams& p) { p.penalty_last_n = -2; }), MoeError);
    REQUIRE_THROWS_AS(Sampler(SamplingParams{}, 0), MoeError);

    SamplingParams p;
    p.repetition_penalty = 1.1f;
    Sampler s(p, 10);
    std::vector<float> logits(10, 0.0f);
    REQUIRE_THROWS_AS(s.sample(logits.data(), std::vector<int>{1, 10}), MoeError);
    // The failed call left no counts behind.
    SamplingParams q = sampling_off(0.0f);
    q.frequency_penalty = 1.0f;
    q.penalty_last_n = -1;
    Sampler s2(q, 4);
    std::vector<float> a(4, 0.0f);
    REQUIRE_THROWS_AS(s2.sample(a.data(), std::vector<int>{2, -1}), MoeError);
    std::vector<float> b(4, 0.0f);
    s2.sample(b.data(), {});
    REQUIRE(b == std::vector<float>(4, 0.0f));
}

TEST_CASE("StopMatcher without stops emits everything at once", "[sampler]") {
    StopMatcher m({});
    auto r = m.push("hello ");
    REQUIRE(r.emit == "hello ");
    REQUIRE_FALSE(r.stopped);
    REQUIRE(m.push("world").emit == "world");
    REQUIRE(m.flush().empty());
}

TEST_CASE("StopMatcher holds back a stop that spans many pushes", "[sampler]") {
    StopMatcher m({"<|end|>"});
    REQUIRE(m.push("Hello <").emit == "Hello ");
    auto r = m.push("|en");
    REQUIRE(r.emit.empty());
    REQUIRE_FALSE(r.stopped);
    REQUIRE(m.push("d|").emit.empty());
    r = m.push(">tail");
    REQUIRE(r.emit.empty());
    REQUIRE(r.stopped);
    REQUIRE(m.stopped());
    r = m.push("more");
    REQUIRE(r.emit.empty());
    REQUIRE(r.stopped);
    REQUIRE(m.flush().empty());
}

TEST_CASE("StopMatcher releases held text that turns out not to stop", "[sampler]") {
    StopMatcher m({"abc"});
    REQUIRE(m.push("xab").emit == "x");
    REQUIRE(m.push("d").emit == "abd");

    StopMatcher o({"aab"});  // overlapping prefix: "aaa" + "b" stops after one "a"
    REQUIRE(o.push("aaa").emit == "a");
    auto r = o.push("b");
    REQUIRE(r.stopped);
    REQUIRE(r.emit.empty());

    StopMatcher f({"END"});
    REQUIRE(f.push("abcEN").emit == "abc");
    REQUIRE(f.flush() == "EN");
}

TEST_CASE("StopMatcher emits the text before the stop in the same push", "[sampler]") {
    StopMatcher m({"###"});
    REQUIRE(m.push("one ").emit == "one ");
    auto r = m.push("two##");
    REQUIRE(r.emit == "two");
    r = m.push("# three");
    REQUIRE(r.stopped);
    REQUIRE(r.emit.empty());

    StopMatcher n({"###"});
    r = n.push("a###b");
    REQUIRE(r.stopped);
    REQUIRE(r.emit == "a");
}

TEST_CASE("StopMatcher picks the earliest of several stops", "[sampler]") {
    StopMatcher m({"world", "lo w", "", "hello!"});
    auto r = m.push("hello world");
    REQUIRE(r.stopped);
    REQUIRE(r.emit == "hel");

    StopMatcher n({"zzz", "b"});
    REQUIRE(n.push("aaz").emit == "aa");
    r = n.push("zb");  // "aazzb": "zzz" never completes, "b" stops
    REQUIRE(r.stopped);
    REQUIRE(r.emit == "zz");
}

TEST_CASE("StopMatcher matches across a split UTF-8 character", "[sampler]") {
    StopMatcher m({"\xC3\xA9!"});  // "é!"
    REQUIRE(m.push("caf\xC3").emit == "caf");
    auto r = m.push("\xA9!");
    REQUIRE(r.stopped);
    REQUIRE(r.emit.empty());

    // A split character that is not a stop comes out whole, never half.
    StopMatcher n({"x"});
    REQUIRE(n.push("caf\xC3").emit == "caf");
    REQUIRE(n.push("\xA9 ok").emit == "\xC3\xA9 ok");
    StopMatcher e({});
    REQUIRE(e.push("\xE2\x82").emit.empty());  // first two bytes of the euro sign
    REQUIRE(e.push("\xAC").emit == "\xE2\x82\xAC");
}

TEST_CASE("StopMatcher agrees with a plain search for any split", "[sampler]") {
    std::mt19937 rng(42);
    const std::vector<std::string> stops = {"ab", "bca", "\xC3\xA9\xC3\xA9"};
    const std::string alphabet[] = {"a", "b", "c", " ", "\xC3\xA9"};
    for (int trial = 0; trial < 2000; ++trial) {
        std::string text;
        int len = 1 + int(rng() % 12);
        for (int i = 0; i < len; ++i) text += alphabet[rng() % 5];
        size_t first = std::string::npos;
        for (const auto& s : stops) first = std::min(first, text.find(s));
        std::string expected = text.substr(0, first);

        StopMatcher m(stops);
        std::string got;
        bool stopped = false;
        size_t pos = 0;
        while (pos < text.size() && !stopped) {
            size_t n = 1 + rng() % 4;
            auto r = m.push(std::string_view(text).substr(pos, n));
            pos += n;
            got += r.emit;
            stopped = r.stopped;
        }
        if (!stopped) got += m.flush();
        INFO("text '" << text << "'");
        REQUIRE(stopped == (first != std::string::npos));
        REQUIRE(got == expected);
    }
}
