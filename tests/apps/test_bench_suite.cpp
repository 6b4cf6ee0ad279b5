// SessionOptions::weights and `bench suite`: engines made one after another
// on one loaded copy of a model's weights generate exactly what an engine
// that loads its own generates; the suite runs its steps on one load, goes
// on past a failed step and says so, and refuses a bad step before loading.
#include <catch2/catch.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/model_source.h"
#include "engine/model/weights.h"
#include "engine/runtime/session.h"
#include "test_support.h"

using json = nlohmann::json;

namespace {

std::vector<int> greedy_tokens(Session& engine) {
    GenerateRequest req;
    req.prompt = engine.model().tokenizer().encode_prompt("Once upon a time");
    req.sampling.temperature = 0;
    req.max_tokens = 12;
    req.ignore_eos = true;
    return engine.generate(req, [](const TokenEvent&) { return true; }).tokens;
}

// The benchmarks' JSON lines, less the machine ceilings each one prints first.
std::vector<json> json_lines(const std::string& out) {
    std::vector<json> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] != '{') continue;
        json j = json::parse(line);
        if (j["bench"] != "ceiling") lines.push_back(j);
    }
    return lines;
}

size_t count_of(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) n++;
    return n;
}

}  // namespace

TEST_CASE("an engine given loaded weights holds them and generates as one that loads its own", "[engine]") {
    const std::string model = test_model_dir("tiny").string();
    SessionOptions own;
    own.threads = 2;
    own.ctx = 128;
    std::vector<int> want;
    {
        Session loads(load_model({model, own.threads}), own);
        want = greedy_tokens(loads);
    }
    REQUIRE(want.size() == 12);

    const ModelSource source = model_source_parse(model);
    auto weights = std::make_shared<const ModelWeights>(model_source_weights(source, model_source_config(source), 2));
    for (int i = 0; i < 2; i++) {  // two engines, one after another, on the one copy
        ModelOptions shared{model, 2, weights};
        Session engine(load_model(shared), own);
        CHECK(weights.use_count() == 3);  // here, in `shared` and in the model: no copy of its own
        CHECK(greedy_tokens(engine) == want);
    }
    CHECK(weights.use_count() == 1);

    // Another model's weights are refused by name.
    const ModelSource small = model_source_parse("synth:small");
    ModelOptions wrong{model, 2,
                       std::make_shared<const ModelWeights>(model_source_weights(small, model_source_config(small), 2))};
    std::string error = moe_error_of([&] { Session engine(load_model(wrong), own); });
    CHECK(error.find("4 layers") != std::string::npos);
    CHECK(error.find("has 2") != std::string::npos);
}

TEST_CASE("bench suite runs its steps on one load of the model and prints each one's lines", "[cli][slow]") {
    CommandResult r = moe({"bench", "suite", "--model", "synth:tiny", "--threads", "2",
                           "--step", "decode --tokens 4 --repeat 1 --threads=1",
                           "--step", "prefill --tokens 32 --repeat 1",
                           "--step", "beam --widths 2 --tokens 3 --repeat 1",
                           "--step", "latency --reps 1"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(count_of(r.err, "bench suite: synth:tiny:0 loaded in") == 1);
    for (int i = 1; i <= 4; i++)
        CHECK(count_of(r.err, "bench suite: step " + std::to_string(i) + "/4 '") == 1);
    CHECK(count_of(r.err, "' ok (") == 4);
    std::vector<json> lines = json_lines(r.out);
    std::vector<std::string> benches;
    for (const json& l : lines) {
        if (l["bench"] != "latency") CHECK(l["model"].get<std::string>() == "synth:tiny:0");
        if (benches.empty() || benches.back() != l["bench"]) benches.push_back(l["bench"]);
    }
    CHECK(benches == std::vector<std::string>{"decode", "prefill", "beam", "latency"});
    for (const json& l : lines) {
        if (l["bench"] == "decode") CHECK(l["decode_tok_s"].get<double>() > 0);
        if (l["bench"] == "prefill") CHECK(l["tokens"] == 32);
        if (l["bench"] == "beam") CHECK(l["width"] == 2);
        // The suite's --threads reaches every step that does not give its own.
        CHECK(l["threads"] == (l["bench"] == "decode" ? 1 : 2));
    }
}

TEST_CASE("bench suite goes on past a failed step and exits 2 naming how many failed", "[cli]") {
    CommandResult r = moe({"bench", "suite", "--model", "synth:tiny", "--threads", "2",
                           "--step", "decode --tokens 0", "--step", "decode --tokens 2 --repeat 1"});
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(count_of(r.err, "step 1/2 'decode --tokens 0' failed: --tokens: 0 is out of range") == 1);
    CHECK(count_of(r.err, "step 2/2 'decode --tokens 2 --repeat 1' ok") == 1);
    CHECK(r.err.find("moe-server: error: bench suite: 1 of 2 steps failed") != std::string::npos);
    std::vector<json> lines = json_lines(r.out);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0]["bench"] == "decode");
}

TEST_CASE("bench suite refuses a bad step in one line before loading the model", "[cli]") {
    struct Case {
        std::vector<std::string> args;
        std::string says;
    };
    for (const Case& c : std::vector<Case>{
             {{"--step", "serve --port 1"}, "--step 'serve --port 1' is not one of decode, prefill"},
             {{"--step", "  "}, "--step '  ' is not one of"},
             {{"--step", "decode --model synth:small"}, "names a model: the suite's --model is every step's"},
             {{}, "give at least one --step"},
         }) {
        std::vector<std::string> args = {"bench", "suite", "--model", "synth:mixtral-8x7b"};
        args.insert(args.end(), c.args.begin(), c.args.end());
        CommandResult r = moe(args);
        INFO(r.err);
        CHECK(r.exit_code == 2);
        // One error line after the synthetic model's note, and nothing loaded
        // (mixtral-8x7b's 93 GB would not fit this machine).
        CHECK(count_of(r.err, "moe-server: error: bench suite: ") == 1);
        CHECK(r.err.find(c.says) != std::string::npos);
        CHECK(r.err.find("loaded in") == std::string::npos);
        CHECK(r.err.find("does not fit") == std::string::npos);
    }
    CommandResult no_model = moe({"bench", "suite", "--step", "decode"});
    CHECK(no_model.exit_code == 2);
    CHECK(no_model.err.find("--model") != std::string::npos);
}
