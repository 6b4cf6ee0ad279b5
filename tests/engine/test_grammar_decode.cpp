// Constrained decoding in the engine (GenerateRequest::grammar) on a
// random-weight model: every reply (of grammars whose texts are bounded)
// ends and parses, greedy and sampled, on the CPU and
// with experts on the emulated device; a reply ends where the grammar is
// complete (no end token needed); ignore_eos keeps end tokens out; a grammar
// is parsed once per text and refused, named, when it is malformed; the
// reply with a grammar equals the plain reply when the grammar allows what
// the model would say anyway.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "chat/json_schema.h"
#include "engine/runtime/session.h"
#include "test_support.h"

namespace {

Session make_engine(double device_share = 0) {
    SessionOptions o;
    o.threads = 2;
    o.ctx = 1024;
    o.device.emulate_gpu_expert_share = device_share;
    return Session(load_model({test_model_dir("tiny"), o.threads}), o);
}

GenerateResult run(Session& engine, std::shared_ptr<const Grammar> grammar, float temperature, uint64_t seed,
                   int max_tokens = 600, bool ignore_eos = false) {
    GenerateRequest r;
    r.prompt = engine.model().tokenizer().encode_prompt("Reply in JSON:");
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.max_tokens = max_tokens;
    r.ignore_eos = ignore_eos;
    r.grammar = std::move(grammar);
    return engine.generate(r, [](const TokenEvent&) { return true; });
}

}  // namespace

TEST_CASE("a grammar makes every reply parse, greedy and sampled, on the CPU and the emulated device", "[model]") {
    for (double share : {0.0, 0.5}) {
        INFO("emulated device share " << share);
        Session engine = make_engine(share);
        const auto object = engine.model().grammar(json_object_gbnf(), "json");
        CHECK(engine.model().grammar(json_object_gbnf(), "json") == object);  // parsed once, kept by its text
        // A JSON object of at most three short members: every reply ends
        // within max_tokens, none is skipped, and each parses.
        const auto small = engine.model().grammar(R"(root ::= "{" ws (member ("," ws member){0,2})? "}"
member ::= key ":" ws value ws
key ::= "\"" [a-z]{1,6} "\""
value ::= key | [0-9]{1,4} | "true" | "false" | "null"
ws ::= " "?)",
                                                  "small json");
        for (int i = 0; i < 6; i++) {
            const GenerateResult res = run(engine, small, i == 0 ? 0.0f : 1.0f, 100 + i);
            INFO("reply " << i << ": " << res.text);
            CHECK(res.finish_reason == FinishReason::STOP);
            CHECK(nlohmann::json::parse(res.text, nullptr, false).is_object());
        }
        // A schema whose every string is bounded: every reply ends, and fits the schema.
        const auto schema = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 8}, "n": {"type": "integer", "minimum": 0, "maximum": 99},
            "ok": {"type": "boolean"}}, "required": ["name", "n", "ok"]})");
        const auto fits = engine.model().grammar(json_schema_gbnf(schema, "schema"), "schema");
        for (int i = 0; i < 6; i++) {
            const GenerateResult res = run(engine, fits, i == 0 ? 0.0f : 1.0f, 200 + i);
            INFO("reply " << i << ": " << res.text);
            CHECK(res.finish_reason == FinishReason::STOP);
            const auto parsed = nlohmann::json::parse(res.text, nullptr, false);
            REQUIRE(parsed.is_object());
            CHECK(parsed["name"].is_string());
            CHECK(parsed["n"].is_number_integer());
            CHECK(parsed["ok"].is_boolean());
        }
    }
}

TEST_CASE("a reply ends where its grammar is complete, and ignore_eos keeps end tokens out", "[model]") {
    Session engine = make_engine();
    const auto digits = engine.model().grammar("root ::= [0-9]{3} \"!\"", "digits");
    for (bool ignore_eos : {false, true}) {
        const GenerateResult res = run(engine, digits, 1.0f, 7, 50, ignore_eos);
        INFO(res.text);
        CHECK(res.finish_reason == FinishReason::STOP);
        REQUIRE(res.text.size() == 4);
        CHECK(res.text.back() == '!');
        CHECK(res.n_generated == int(res.tokens.size()));  // no end token was sampled
    }
    // A grammar that may end early: an end token only once the text is complete.
    const auto optional = engine.model().grammar("root ::= \"a\" [b-z]*", "optional");
    for (uint64_t seed = 0; seed < 5; seed++) {
        const GenerateResult res = run(engine, optional, 1.0f, seed, 30);
        INFO(res.text);
        REQUIRE(!res.text.empty());
        CHECK(res.text[0] == 'a');
        for (char c : res.text.substr(1)) CHECK((c >= 'b' && c <= 'z'));
    }
}

TEST_CASE("a grammar that allows what the model says changes nothing", "[model]") {
    Session engine = make_engine();
    const GenerateResult plain = run(engine, nullptr, 0.0f, 1, 24, true);
    // Any text at all: the grammar allows every token with bytes, so greedy picks the same ones.
    const auto any = engine.model().grammar("root ::= [^\\x00]*", "any");
    const GenerateResult constrained = run(engine, any, 0.0f, 1, 24, true);
    CHECK(constrained.tokens == plain.tokens);
    CHECK(constrained.text == plain.text);
}

TEST_CASE("a malformed grammar is refused naming its line and column", "[model]") {
    Session engine = make_engine();
    const std::string err = moe_error_of([&] { engine.model().grammar("root ::= \"a\"\nb ::= (c", "my.gbnf"); });
    INFO(err);
    CHECK(err.rfind("my.gbnf: line 2", 0) == 0);
    CHECK(moe_error_of([&] { engine.model().grammar("x ::= \"a\"", "g"); }).find("root") != std::string::npos);
}
