// Routing traces (profiles/routing_trace.h): the recorder fed as the forward
// pass feeds it, the file's round trip (weights to TRACE_WEIGHT_DECIMALS),
// the profile tables a trace sums to (dense layers left at 0), a dropped
// request, and every kind of malformed file refused in one line naming the
// file and line.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "profiles/errors.h"
#include "profiles/files.h"
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
