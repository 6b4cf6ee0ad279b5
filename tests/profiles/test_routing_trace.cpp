// Routing traces (profiles/routing_trace.h): the recorder fed as the forward
// pass feeds it, the file's round trip (weights to TRACE_WEIGHT_DECIMALS),
// the profile tables a trace sums to (dense layers left at 0), a dropped
// request, every kind of malformed file refused in one line naming the
// file and line, and a trace drawn from a profile's counts (its shares
// against Fiddler's Mixtral counts, capping, seeds, refusals).
#include <algorithm>
#include <catch2/catch.hpp>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/errors.h"
#include "base/files.h"
#include "profiles/routing_trace.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace {

// 3 layers (layer 1 dense) x 4 experts, top-2.
ModelFingerprint trace_fingerprint() {
    ModelFingerprint f{"Qwen2MoeForCausalLM", 3, 4, 2, 0x0123456789abcdefull};
    f.dense_layers = {1};
    return f;
}

// Two requests: a 3-token prefill and 2 decode tokens, then a 2-token
// prefill and 1 decode token, reported as the forward pass reports them.
RoutingTraceRecorder recorded() {
    RoutingTraceRecorder rec(trace_fingerprint());
    auto pass = [&](std::vector<int> positions, std::vector<int> l0, std::vector<int> l2) {
        rec.on_pass(positions);
        const int n = int(positions.size());
        std::vector<float> w;
        for (int i = 0; i < n; i++) w.insert(w.end(), {0.712345f, 0.287655f});
        rec.on_route(0, n, 2, l0.data(), w.data());
        rec.on_route(2, n, 2, l2.data(), w.data());
    };
    rec.set(0, TracePhase::PREFILL);
    pass({0, 1, 2}, {0, 1, 2, 3, 1, 0}, {3, 2, 2, 1, 0, 3});
    rec.set(0, TracePhase::DECODE);
    pass({3}, {0, 1}, {2, 3});
    pass({4}, {1, 2}, {3, 0});
    rec.set(1, TracePhase::PREFILL);
    pass({0, 1}, {3, 0, 0, 2}, {1, 2, 2, 0});
    rec.set(1, TracePhase::DECODE);
    pass({2}, {2, 3}, {0, 1});
    return rec;
}

std::string read(const fs::path& p) {
    return file_read_text(p);
}

void write(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
}

// The refusal of routing_trace_read on `text` written to p, or "" when it is accepted.
std::string refusal_at(const fs::path& p, const std::string& text) {
    write(p, text);
    try {
        routing_trace_read(p);
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("routing trace round trip keeps every token, expert and weight", "[profile][trace]") {
    const RoutingTrace t = recorded().trace();
    REQUIRE(t.n_tokens() == 8);
    REQUIRE(t.layers == std::vector<int>{0, 2});
    const fs::path path = test_temp_dir("trace-rt") / "t.jsonl";
    routing_trace_write(t, path);
    const RoutingTrace back = routing_trace_read(path);
    CHECK(back.model == t.model);
    CHECK(back.layers == t.layers);
    CHECK(back.top_k == 2);
    CHECK(back.request == t.request);
    CHECK(back.phase == t.phase);
    CHECK(back.position == t.position);
    CHECK(back.experts == t.experts);
    REQUIRE(back.weights.size() == t.weights.size());
    for (size_t i = 0; i < t.weights.size(); i++) CHECK(std::fabs(back.weights[i] - t.weights[i]) <= 0.5e-4 + 1e-7);
    CHECK(back.weights[0] == Approx(0.7123));
    // The token line as documented in profiles/README.md.
    const std::string text = read(path);
    CHECK(text.find("{\"e\":[[0,1],[3,2]],\"ph\":\"p\",\"pos\":0,\"r\":0,\"w\":[[0.7123,0.2877],[0.7123,0.2877]]}\n") !=
          std::string::npos);
    CHECK(text.ends_with("\n{\"end\":{\"tokens\":8}}\n"));
}

TEST_CASE("routing trace sums to the profile's tables, dense layers at 0", "[profile][trace]") {
    const Profile p = routing_trace_profile(recorded().trace());
    // Layer 0 prefill: experts 0 1 | 2 3 | 1 0 | 3 0 | 0 2 -> 0:4, 1:2, 2:2, 3:2.
    CHECK(std::vector<uint64_t>(p.prefill.begin(), p.prefill.begin() + 4) == std::vector<uint64_t>{4, 2, 2, 2});
    CHECK(std::vector<uint64_t>(p.prefill.begin() + 4, p.prefill.begin() + 8) == std::vector<uint64_t>{0, 0, 0, 0});
    // Layer 2 decode: 2 3 | 3 0 | 0 1 -> 0:2, 1:1, 2:1, 3:2.
    CHECK(std::vector<uint64_t>(p.decode.begin() + 8, p.decode.end()) == std::vector<uint64_t>{2, 1, 1, 2});
    CHECK(p.workload.prefill_tokens == 5);
    CHECK(p.workload.decode_tokens == 3);
    CHECK(p.workload.generated_tokens == 5);
    for (size_t i = 0; i < p.counts.size(); i++) CHECK(p.counts[i] == p.prefill[i] + p.decode[i]);
}

TEST_CASE("routing trace recorder drops an unfinished request", "[profile][trace]") {
    RoutingTraceRecorder rec = recorded();
    int experts[2] = {0, 1};
    float weights[2] = {0.5f, 0.5f};
    rec.set(2, TracePhase::PREFILL);
    const int positions[1] = {0};
    rec.on_pass(positions);
    rec.on_route(0, 1, 2, experts, weights);
    rec.on_route(2, 1, 2, experts, weights);
    REQUIRE(rec.trace().n_tokens() == 9);
    rec.drop_request();
    CHECK(rec.trace().n_tokens() == 8);
    CHECK(rec.trace().experts.size() == 8 * 2 * 2);
    // A report for a dense layer or of the wrong size is refused.
    CHECK_THROWS_AS(rec.on_route(1, 1, 2, experts, weights), MoeError);
}

TEST_CASE("routing trace validator refuses each kind of bad file naming the file and line", "[profile][trace]") {
    const fs::path path = test_temp_dir("trace-good") / "t.jsonl";
    routing_trace_write(recorded().trace(), path);
    const std::string good = read(path);
    REQUIRE(refusal_at(test_temp_dir("trace-good") / "copy.jsonl", good).empty());
    std::vector<std::string> lines;
    for (size_t at = 0; at < good.size();) {
        const size_t end = good.find('\n', at);
        lines.push_back(good.substr(at, end - at));
        at = end + 1;
    }
    REQUIRE(lines.size() == 10);
    auto with = [&](size_t i, const std::string& line) {
        std::string text;
        for (size_t k = 0; k < lines.size(); k++) text += (k == i ? line : lines[k]) + "\n";
        return text;
    };
    auto replaced = [&](size_t i, const std::string& from, const std::string& to) {
        std::string line = lines[i];
        const size_t at = line.find(from);
        REQUIRE(at != std::string::npos);
        return with(i, line.replace(at, from.size(), to));
    };
    const fs::path bad = test_temp_dir("trace-bad") / "t.jsonl";
    const std::string name = bad.string();
    auto refusal = [&](const std::string& text) { return refusal_at(bad, text); };
    // Truncated: cut inside a line, and cut at a line boundary before the end line.
    CHECK(refusal(good.substr(0, good.size() / 2)).find(name + ":") == 0);
    CHECK(refusal(good.substr(0, good.size() / 2)).find("truncated") != std::string::npos);
    std::string no_end = good.substr(0, good.rfind("{\"end\""));
    CHECK(refusal(no_end) == name + ":9: truncated: no end line after the last token line");
    CHECK(refusal("") == name + ":1: empty file (expected a routing trace header)");
    CHECK(refusal(replaced(0, "moe-server-routing-trace", "other")) ==
          name + ":1: format: expected 'moe-server-routing-trace'");
    CHECK(refusal(replaced(0, "\"version\":1", "\"version\":2")).find(name + ":1: version: 2 is not supported") == 0);
    CHECK(refusal(replaced(0, "\"top_k\":2", "\"top_k\":3")).find(name + ":1: top_k:") == 0);
    CHECK(refusal(replaced(0, "\"layers\":[0,2]", "\"layers\":[0,1,2]")).find(name + ":1: layers:") == 0);
    CHECK(refusal(replaced(0, "\"n_experts\":4", "\"n_experts\":0")).find(name + ":1: model.n_experts:") == 0);
    CHECK(refusal(replaced(1, "[0,1]", "[0,4]")) == name + ":2: e[0][1]: 4 is outside [0, 3]");
    CHECK(refusal(replaced(1, "[0,1]", "[1,1]")) == name + ":2: e[0][1]: expert 1 chosen twice");
    CHECK(refusal(replaced(1, "[0,1]", "[0]")) == name + ":2: e[0]: must be an array of 2 (top_k) entries");
    CHECK(refusal(replaced(1, "0.7123", "-0.5")) == name + ":2: w[0][0]: must be a finite non-negative weight");
    CHECK(refusal(replaced(1, "\"ph\":\"p\"", "\"ph\":\"x\"")) ==
          name + ":2: ph: must be \"p\" (prefill) or \"d\" (decode)");
    CHECK(refusal(replaced(5, "\"ph\":\"d\"", "\"ph\":\"p\"")) ==
          name + ":6: ph: a prefill token after the request's decode tokens");
    CHECK(refusal(replaced(8, "\"r\":1", "\"r\":0")) == name + ":9: r: 0 after request 1");
    CHECK(refusal(replaced(9, "\"tokens\":8", "\"tokens\":7")) ==
          name + ":10: end.tokens: 7, but the file holds 8 token lines");
    CHECK(refusal(good + "{}\n") == name + ":11: text after the end line");
    CHECK(refusal(with(3, "{\"r\":0,")) == name + ":4: not a JSON object (a damaged or truncated line?)");
    CHECK(refusal(replaced(2, "\"pos\":1", "\"pos\":-1")) == name + ":3: pos: -1 is outside [0, 2147483647]");
}

namespace {

// The error routing_trace_draw gives, or "" when it draws.
std::string draw_refusal(const Profile& p, const ModelFingerprint& m, TraceDrawShape shape) {
    try {
        routing_trace_draw(p, m, shape, 1, "p.json");
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

// Per trace layer and expert, the tokens that chose it.
std::vector<std::vector<uint64_t>> chosen_counts(const RoutingTrace& t) {
    std::vector<std::vector<uint64_t>> c(t.layers.size(), std::vector<uint64_t>(size_t(t.model.n_experts), 0));
    for (size_t i = 0; i < t.n_tokens(); i++)
        for (size_t l = 0; l < t.layers.size(); l++)
            for (int j = 0; j < t.top_k; j++) c[l][size_t(t.experts[t.row(i, l) + size_t(j)])]++;
    return c;
}

// Each expert's count against its expected inclusion probability pi over n
// tokens: the largest |z| and the mean z^2 (about 1 for a sampler with
// these marginals; experts at pi 0 or 1 must match exactly).
struct Deviation {
    double max_z = 0, mean_z2 = 0;
    bool exact_ends = true;
};
Deviation deviation(const std::vector<std::vector<uint64_t>>& chosen, const std::vector<std::vector<double>>& pi,
                    size_t n) {
    Deviation d;
    int cells = 0;
    for (size_t l = 0; l < pi.size(); l++)
        for (size_t e = 0; e < pi[l].size(); e++) {
            const double p = pi[l][e], x = double(chosen[l][e]);
            if (p == 0 || p == 1) {
                d.exact_ends &= x == p * double(n);
                continue;
            }
            const double z = (x - double(n) * p) / std::sqrt(double(n) * p * (1 - p));
            d.max_z = std::max(d.max_z, std::abs(z));
            d.mean_z2 += z * z;
            cells++;
        }
    d.mean_z2 /= std::max(cells, 1);
    return d;
}

}  // namespace

TEST_CASE("trace drawn from Fiddler's Mixtral counts has their per-layer shares, distinct experts",
          "[profile][trace]") {
    const fs::path path =
        shared_data_dir() / "profiles/fiddler-mixtral-8x7b-instruct/expert_popularity_college_computer_science.json";
    const Profile p = profile_read(path);
    REQUIRE(p.from_fiddler);
    const ModelFingerprint mixtral{"MixtralForCausalLM", 32, 8, 2, 0x1234ull};
    const TraceDrawShape shape{50, 48, 32};  // 4000 tokens
    const RoutingTrace t = routing_trace_draw(p, mixtral, shape, 7, path.string());
    REQUIRE(t.model == mixtral);
    REQUIRE(t.n_tokens() == 4000);
    REQUIRE(t.layers.size() == 32);
    for (size_t i = 0; i < t.n_tokens(); i++) {
        INFO("token " << i);
        REQUIRE(t.request[i] == int(i / 80));
        REQUIRE(t.position[i] == int(i % 80));
        REQUIRE(t.phase[i] == (i % 80 < 48 ? TracePhase::PREFILL : TracePhase::DECODE));
        for (size_t l = 0; l < t.layers.size(); l++) {
            const int a = t.experts[t.row(i, l)], b = t.experts[t.row(i, l) + 1];
            REQUIRE(a != b);
            REQUIRE((a >= 0 && a < 8 && b >= 0 && b < 8));
            REQUIRE(t.weights[t.row(i, l)] == 0.5f);
        }
    }
    // Expected: 2 x count / layer sum (no expert of these flat counts is over half its layer).
    std::vector<std::vector<double>> pi(32, std::vector<double>(8));
    for (size_t l = 0; l < 32; l++) {
        double sum = 0;
        for (size_t e = 0; e < 8; e++) sum += double(p.counts[l * 8 + e]);
        for (size_t e = 0; e < 8; e++) pi[l][e] = 2 * double(p.counts[l * 8 + e]) / sum;
    }
    const Deviation d = deviation(chosen_counts(t), pi, t.n_tokens());
    INFO("max |z| " << d.max_z << ", mean z^2 " << d.mean_z2);
    CHECK(d.max_z < 4.5);
    CHECK(d.mean_z2 < 1.5);
    // Uniform choices would be far off these counts: the check can fail.
    std::vector<std::vector<double>> uniform(32, std::vector<double>(8, 0.25));
    CHECK(deviation(chosen_counts(t), uniform, t.n_tokens()).max_z > 10);
    // The file it writes is a valid trace.
    const fs::path out = test_temp_dir("trace-draw") / "drawn.jsonl";
    routing_trace_write(t, out);
    const RoutingTrace back = routing_trace_read(out);
    CHECK(back.experts == t.experts);
    CHECK(back.request == t.request);
}

TEST_CASE("drawn trace: an expert over 1/top_k of its layer is in every token, one without counts in none",
          "[profile][trace]") {
    // Layer 0: 60 20 10 10 -> expert 0 capped at 1, the others share the second
    // pick 0.5, 0.25, 0.25 (successive draws without replacement would give
    // expert 1 0.544). Layer 2: 0 30 10 20 -> 0, 1, 1/3, 2/3. Layer 1 is dense.
    Profile p = profile_empty(trace_fingerprint());
    p.counts = {60, 20, 10, 10, 0, 0, 0, 0, 0, 30, 10, 20};
    const RoutingTrace t = routing_trace_draw(p, trace_fingerprint(), TraceDrawShape{100, 150, 50}, 3, "p.json");
    REQUIRE(t.n_tokens() == 20000);
    const std::vector<std::vector<double>> pi = {{1, 0.5, 0.25, 0.25}, {0, 1, 1.0 / 3, 2.0 / 3}};
    const Deviation d = deviation(chosen_counts(t), pi, t.n_tokens());
    INFO("max |z| " << d.max_z << ", mean z^2 " << d.mean_z2);
    CHECK(d.exact_ends);
    CHECK(d.max_z < 4.5);
    CHECK(d.mean_z2 < 2.0);
}

TEST_CASE("drawn trace: the same seed gives the same trace, another seed another", "[profile][trace]") {
    Profile p = profile_empty(trace_fingerprint());
    p.counts = {5, 4, 3, 2, 0, 0, 0, 0, 1, 2, 3, 4};
    const TraceDrawShape shape{3, 5, 4};
    const RoutingTrace a = routing_trace_draw(p, trace_fingerprint(), shape, 42, "p.json");
    const RoutingTrace b = routing_trace_draw(p, trace_fingerprint(), shape, 42, "p.json");
    const RoutingTrace c = routing_trace_draw(p, trace_fingerprint(), shape, 43, "p.json");
    CHECK(a.experts == b.experts);
    CHECK(a.weights == b.weights);
    CHECK(a.request == b.request);
    CHECK(a.experts != c.experts);
    CHECK(a.request == c.request);
    // A decode of 0 tokens: prefill only.
    const RoutingTrace d = routing_trace_draw(p, trace_fingerprint(), TraceDrawShape{2, 3, 0}, 1, "p.json");
    CHECK(d.n_tokens() == 6);
    CHECK(std::count(d.phase.begin(), d.phase.end(), TracePhase::DECODE) == 0);
}

TEST_CASE("drawn trace refuses another model's profile, a layer without enough counts, a bad shape",
          "[profile][trace]") {
    const ModelFingerprint m = trace_fingerprint();
    Profile p = profile_empty(m);
    p.counts = {5, 4, 3, 2, 0, 0, 0, 0, 1, 2, 3, 4};
    CHECK(draw_refusal(p, m, {}) == "");
    ModelFingerprint other = m;
    other.hash ^= 1;
    CHECK(draw_refusal(p, other, {}).find("p.json: profile is for another model") == 0);
    Profile fiddler = p;
    fiddler.from_fiddler = true;
    fiddler.model = ModelFingerprint{"", 3, 4, 0, 0};
    CHECK(draw_refusal(fiddler, m, {}) == "");
    ModelFingerprint wider = m;
    wider.n_experts = 8;
    CHECK(draw_refusal(fiddler, wider, {}) ==
          "p.json: Fiddler popularity table is 3 layers x 4 experts, the model has 3 x 8");

    Profile one = p;
    one.counts = {5, 4, 3, 2, 0, 0, 0, 0, 0, 0, 9, 0};
    CHECK(draw_refusal(one, m, {}) == "p.json: layer 2: 1 experts have counts, a top-2 draw needs at least 2");
    Profile none = p;
    none.counts = {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
    CHECK(draw_refusal(none, m, {}) == "p.json: layer 0: 0 experts have counts, a top-2 draw needs at least 2");
    // Exactly top_k experts with counts: both in every token.
    Profile two = p;
    two.counts = {0, 7, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4};
    const RoutingTrace t = routing_trace_draw(two, m, TraceDrawShape{2, 3, 2}, 5, "p.json");
    for (size_t i = 0; i < t.n_tokens(); i++)
        CHECK(std::min(t.experts[t.row(i, 0)], t.experts[t.row(i, 0) + 1]) * 10 +
                  std::max(t.experts[t.row(i, 0)], t.experts[t.row(i, 0) + 1]) ==
              13);

    CHECK(draw_refusal(p, m, {0, 64, 64}).find("needs requests >= 1, prefill >= 1 and decode >= 0") !=
          std::string::npos);
    CHECK(draw_refusal(p, m, {1, 0, 64}).find("needs requests >= 1") != std::string::npos);
    CHECK(draw_refusal(p, m, {1, 64, -1}).find("needs requests >= 1") != std::string::npos);
    CHECK(draw_refusal(p, m, {1 << 12, 1 << 8, 1}).find("over the limit of 1048576") != std::string::npos);
    CHECK(draw_refusal(p, m, {INT32_MAX, INT32_MAX, INT32_MAX}).find("over the limit") != std::string::npos);
}
