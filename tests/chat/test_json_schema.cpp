// Tests of JSON Schema to GBNF (engine/text/json_schema.*). The ten schemas
// of tests/data/json_schemas/NN_*.json (what clients send: flat and nested
// objects, arrays, enums, anyOf/oneOf, recursive $defs, patterns, numbers,
// nullable types, additionalProperties) are compiled through the grammar
// engine (engine/text/grammar.h) against Mistral's vocabulary: the valid
// instances of tests/data/json_schemas/instances.json are accepted token by
// token, the invalid ones are not, and random walks (a uniformly random
// allowed token at each step, seeded) give texts that Python's jsonschema
// (tests/support/validate_json_schema.py) validates. The instances
// themselves are checked by jsonschema first, so the test data cannot drift
// from the schemas. Patterns, integer ranges, the json_object grammar and
// the builder are checked the same way; each refusal on its own.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <random>

#include "base/errors.h"
#include "chat/json_schema.h"
#include "engine/text/grammar.h"
#include "engine/text/tokenizer.h"
#include "test_support.h"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

fs::path schemas_dir() {
    return fs::path(MOE_TESTS_SOURCE_DIR) / "data" / "json_schemas";
}

// The ten schemas, by file name without ".json", in order.
std::vector<std::pair<std::string, ojson>> client_schemas() {
    std::vector<std::pair<std::string, ojson>> out;
    for (const auto& e : fs::directory_iterator(schemas_dir())) {
        std::string name = e.path().stem().string();
        if (name.size() > 3 && std::isdigit(static_cast<unsigned char>(name[0])) && name[2] == '_') {
            out.push_back({name, ojson::parse(read_file(e.path()))});
        }
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
}

// Debian's python3 (python3-jsonschema) when installed there, else the PATH's.
std::string python() {
    return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

struct Verdict {
    bool valid = false;
    std::string error;
};

// jsonschema's verdict on each text, per (schema, texts) case.
std::vector<std::vector<Verdict>> jsonschema_verdicts(
    const std::vector<std::pair<ojson, std::vector<std::string>>>& cases) {
    fs::path dir = test_temp_dir("json_schema_validate");
    ojson in = ojson::array();
    for (const auto& [schema, texts] : cases) in.push_back({{"schema", schema}, {"instances", texts}});
    std::ofstream(dir / "in.json") << in.dump();
    CommandResult r =
        run_command({python(), (fs::path(MOE_TESTS_SOURCE_DIR) / "support" / "validate_json_schema.py").string(),
                     (dir / "in.json").string(), (dir / "out.json").string()});
    INFO(
        "validate_json_schema.py needs Python's jsonschema (Debian python3-jsonschema; scripts/setup_test_tools.sh "
        "installs it): "
        << r.err);
    REQUIRE(r.exit_code == 0);
    ojson out = ojson::parse(read_file(dir / "out.json"));
    std::vector<std::vector<Verdict>> verdicts;
    for (const ojson& c : out) {
        verdicts.emplace_back();
        for (const ojson& v : c) verdicts.back().push_back({v.at("valid").get<bool>(), v.value("error", "")});
    }
    return verdicts;
}

const Tokenizer& tokenizer() {
    static const Tokenizer tok = Tokenizer::load(shared_data_dir() / "tokenizers/mistral-v1.model");
    return tok;
}

std::shared_ptr<const GrammarVocab> vocab() {
    static const std::shared_ptr<const GrammarVocab> v = std::make_shared<const GrammarVocab>(tokenizer());
    return v;
}

std::shared_ptr<const Grammar> compile(const std::string& gbnf) {
    INFO(gbnf);
    std::shared_ptr<const Grammar> g;
    REQUIRE_NOTHROW(g = Grammar::parse(gbnf, vocab(), "schema grammar"));
    return g;
}

// Whether the grammar takes `text` whole: its tokens (encoded with no dummy
// prefix, so they decode to exactly the text) one by one, then an end.
bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
    std::vector<int> ids = tokenizer().encode(text, false);
    std::string back;
    for (int id : ids) back += tokenizer().token_bytes(id);
    REQUIRE(back == text);
    std::vector<int> ends = {tokenizer().eos_id()};
    GrammarMatcher m(g, ends, false);
    for (int id : ids) {
        if (!m.allows(id)) return false;
        m.accept(id);
    }
    return m.can_end();
}

// A text the grammar allows, one uniformly random allowed token at a time
// (the end token among them when the text can end), until it must end or
// `max_tokens` ran out ("" then).
std::string random_walk(const std::shared_ptr<const Grammar>& g, std::mt19937& rng, int max_tokens) {
    int eos = tokenizer().eos_id();
    std::vector<int> ends = {eos};
    GrammarMatcher m(g, ends, false);
    std::vector<float> logits(tokenizer().vocab_size());
    std::string text;
    for (int step = 0; step < max_tokens; ++step) {
        if (m.must_end()) return text;
        std::fill(logits.begin(), logits.end(), 0.0f);
        m.mask(logits.data());
        std::vector<int> allowed;
        for (int id = 0; id < static_cast<int>(logits.size()); ++id) {
            if (logits[id] == 0.0f) allowed.push_back(id);
        }
        REQUIRE(!allowed.empty());
        int id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        if (id == eos) {
            REQUIRE(m.can_end());
            return text;
        }
        m.accept(id);
        text += tokenizer().token_bytes(id);
    }
    return "";
}

// The test's walks: `n` texts, each finished within `max_tokens`.
std::vector<std::string> random_walks(const std::shared_ptr<const Grammar>& g, unsigned seed, int n, int max_tokens) {
    std::mt19937 rng(seed);
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
        std::string t = random_walk(g, rng, max_tokens);
        INFO("walk " << i << " did not end within " << max_tokens << " tokens");
        REQUIRE(!t.empty());
        out.push_back(t);
    }
    return out;
}

const std::string WHERE = "response_format.json_schema.schema";

std::string refusal(const std::string& schema_text) {
    return moe_error_of([&] { json_schema_gbnf(ojson::parse(schema_text), WHERE); });
}

}  // namespace

TEST_CASE("json_schema: the client schemas' instances agree with jsonschema", "[json_schema]") {
    ojson instances = ojson::parse(read_file(schemas_dir() / "instances.json"));
    auto schemas = client_schemas();
    REQUIRE(schemas.size() == 10);
    std::vector<std::pair<ojson, std::vector<std::string>>> cases;
    for (const auto& [name, schema] : schemas) {
        const ojson& i = instances.at(name);
        std::vector<std::string> texts = i.at("valid").get<std::vector<std::string>>();
        for (const auto& t : i.at("invalid")) texts.push_back(t.get<std::string>());
        cases.push_back({schema, texts});
    }
    auto verdicts = jsonschema_verdicts(cases);
    for (size_t s = 0; s < schemas.size(); ++s) {
        size_t n_valid = instances.at(schemas[s].first).at("valid").size();
        for (size_t t = 0; t < cases[s].second.size(); ++t) {
            INFO(schemas[s].first << ": " << cases[s].second[t] << ": " << verdicts[s][t].error);
            CHECK(verdicts[s][t].valid == (t < n_valid));
        }
    }
}

TEST_CASE("json_schema: the client schemas' grammars take the valid instances and refuse the invalid",
          "[json_schema]") {
    ojson instances = ojson::parse(read_file(schemas_dir() / "instances.json"));
    for (const auto& [name, schema] : client_schemas()) {
        std::string gbnf = json_schema_gbnf(schema, name);
        auto g = compile(gbnf);
        INFO(name << "\n" << gbnf);
        for (const auto& t : instances.at(name).at("valid")) {
            INFO("valid: " << t.get<std::string>());
            CHECK(accepts(g, t.get<std::string>()));
        }
        for (const auto& t : instances.at(name).at("invalid")) {
            INFO("invalid: " << t.get<std::string>());
            CHECK(!accepts(g, t.get<std::string>()));
        }
    }
}

TEST_CASE("json_schema: random walks through the client schemas' grammars validate", "[json_schema]") {
    std::vector<std::pair<ojson, std::vector<std::string>>> cases;
    std::vector<std::string> names;
    unsigned seed = 1;
    for (const auto& [name, schema] : client_schemas()) {
        auto g = compile(json_schema_gbnf(schema, name));
        INFO(name);
        cases.push_back({schema, random_walks(g, seed++, 20, 3000)});
        names.push_back(name);
    }
    auto verdicts = jsonschema_verdicts(cases);
    for (size_t s = 0; s < cases.size(); ++s) {
        for (size_t t = 0; t < cases[s].second.size(); ++t) {
            INFO(names[s] << ": " << cases[s].second[t] << ": " << verdicts[s][t].error);
            CHECK(verdicts[s][t].valid);
        }
    }
}

TEST_CASE("json_schema: json_object's grammar is any JSON object with bounded whitespace", "[json_schema]") {
    auto g = compile(json_object_gbnf());
    for (const char* t :
         {"{}", "{ }", R"({"a":1})", R"({"a": [1, -2.5e-3, true, false, null, {"b": {}}], "c": "\u00e9\n"})",
          "{\n  \"k\": \"v\",\n  \"n\": [ ]\n}", R"({"emoji":"😀","esc":"\"\\\/\b\f\n\r\t"})"}) {
        INFO(t);
        CHECK(accepts(g, t));
    }
    std::string spaces_20(20, ' ');
    CHECK(accepts(g, "{" + spaces_20 + "}"));
    CHECK(!accepts(g, "{" + spaces_20 + " }"));
    for (const char* t : {"", "[]", "1", "\"s\"", "{", R"({"a":})", R"({"a":1,})", R"({"a":01})", R"({"a":1.})",
                          R"({"a":.5})", R"({"a":"\x"})", R"({"a":"\ud800"})", R"({a:1})", "{\"a\":\"\t\"}", " {}",
                          "{} ", R"({"a":NaN})", R"({"a":1e100})", R"({"a":12345678901234567})"}) {
        INFO(t);
        CHECK(!accepts(g, t));
    }
    CHECK(accepts(g, R"({"a":1234567890123456,"b":1e99,"c":0.1234567890123456})"));
}

TEST_CASE("json_schema: patterns are searched, within the documented subset", "[json_schema]") {
    struct Case {
        const char* pattern;
        std::vector<std::string> match, no_match;  // string contents (JSON text without quotes)
    };
    std::vector<Case> cases = {
        {"^\\d{4}-\\d{2}-\\d{2}$", {"2024-01-31", "0000-00-00"}, {"2024-1-31", "x2024-01-31", "2024-01-310"}},
        {"ab", {"ab", "xxaby", "ab ab"}, {"", "a", "ba"}},
        {"^ab", {"ab", "abc"}, {"xab"}},
        {"ab$", {"ab", "cab"}, {"abc"}},
        {"^(cat|dog)s?$", {"cat", "dogs"}, {"cats!", "bird"}},
        {"^a|b$", {"ax", "xb", "b"}, {"xa", "bx"}},
        {"^[^,\"]+$", {"hello world", "tab\\tx"}, {"a,b", "\\\"", ""}},
        {"^\\w+@\\w+\\.(com|org)$", {"me@site.com", "a_1@b.org"}, {"me@site.net", "@b.com"}},
        {"^\\s*\\S+\\s*$", {" x ", "word", "\\n y"}, {"a b", " "}},
        {"^[a-c]{2,3}x?$", {"ab", "abcx"}, {"a", "abca", "abd"}},
        {"^.{3}$", {"abc", "\\\"\\\\é"}, {"ab", "a\\nb"}},
        {"^\\(\\d+\\)\\.\\*$", {"(12).*"}, {"(12)x*"}},
        {"^(?:ab)+$", {"abab"}, {"aba"}},
        {"^\\x41\\u00e9[\\t\\-]$", {"Aé-", "Aé\\t"}, {"Aex"}},
        {"^a*?b+?$", {"aab", "b"}, {"a"}},
        {"^\\D\\W$", {"a ", "x-"}, {"1 ", "ab"}},
        {"^(a|)b()$", {"ab", "b"}, {"aab", ""}},
        {"^$", {""}, {"a"}},
        {"", {"", "anything"}, {}},
        {"^a\\{2}}$", {"a{2}}"}, {"aa}"}},
    };
    std::vector<std::pair<ojson, std::vector<std::string>>> walks;
    unsigned seed = 100;
    for (const auto& c : cases) {
        ojson schema = {{"type", "string"}, {"pattern", c.pattern}};
        std::string gbnf = json_schema_gbnf(schema, "pattern");
        auto g = compile(gbnf);
        INFO(c.pattern << "\n" << gbnf);
        for (const auto& s : c.match) {
            INFO("match " << s);
            CHECK(accepts(g, "\"" + s + "\""));
        }
        for (const auto& s : c.no_match) {
            INFO("no match " << s);
            CHECK(!accepts(g, "\"" + s + "\""));
        }
        // Unanchored patterns take any string around the match: bound the walks' length.
        bool anchored = c.pattern[0] == '^' && std::string(c.pattern).back() == '$' &&
                        std::string(c.pattern).find('|') == std::string::npos;
        if (anchored && std::string(c.pattern).find_first_of("*+") == std::string::npos) {
            walks.push_back({schema, random_walks(g, seed++, 10, 500)});
        }
    }
    auto verdicts = jsonschema_verdicts(walks);
    for (size_t s = 0; s < walks.size(); ++s) {
        for (size_t t = 0; t < walks[s].second.size(); ++t) {
            INFO(walks[s].first.dump() << ": " << walks[s].second[t] << ": " << verdicts[s][t].error);
            CHECK(verdicts[s][t].valid);
        }
    }
}

TEST_CASE("json_schema: integer bounds give exactly the integers within them", "[json_schema]") {
    struct Range {
        const char* schema;
        long lo, hi;
    };
    for (const Range& r : {Range{R"({"type":"integer","minimum":0,"maximum":150})", 0, 150},
                           Range{R"({"type":"integer","exclusiveMinimum":-50,"exclusiveMaximum":50})", -49, 49},
                           Range{R"({"type":"integer","minimum":-1007,"maximum":-7})", -1007, -7},
                           Range{R"({"type":"integer","minimum":95,"maximum":1005})", 95, 1005},
                           Range{R"({"type":"integer","minimum":1.5,"maximum":9.5})", 2, 9},
                           Range{R"({"type":"integer","minimum":-3})", -3, 9999999999999999}}) {
        std::string gbnf = json_schema_gbnf(ojson::parse(r.schema), "range");
        auto g = compile(gbnf);
        INFO(r.schema << "\n" << gbnf);
        std::vector<long> values;
        for (long v = -1100; v <= 1100; ++v) values.push_back(v);
        for (long v : {9999999999999999L, 10000000000000000L, -9999999999999999L}) values.push_back(v);
        for (long v : values) {
            INFO(v);
            CHECK(accepts(g, std::to_string(v)) == (v >= r.lo && v <= r.hi));
        }
        CHECK(!accepts(g, "-0"));
        CHECK(!accepts(g, "007"));
    }
}

TEST_CASE("json_schema: the builder puts several schemas and hand-written rules in one grammar", "[json_schema]") {
    GbnfBuilder b;
    std::string weather = b.add_schema(
        ojson::parse(R"({"type":"object","properties":{"city":{"type":"string","maxLength":10}},"required":["city"]})"),
        "tools[0].function.parameters", "get weather");
    std::string sum = b.add_schema(
        ojson::parse(
            R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]})"),
        "tools[1].function.parameters", "sum");
    CHECK(weather.starts_with("get-weather"));
    CHECK(sum.starts_with("sum"));
    std::string ws = b.add_shared("ws");
    std::string call =
        b.add_rule("call", gbnf_literal("{\"name\": ") + " ( " + gbnf_literal("\"get_weather\"") + " " +
                               gbnf_literal(", \"arguments\": ") + " " + weather + " | " + gbnf_literal("\"sum\"") +
                               " " + gbnf_literal(", \"arguments\": ") + " " + sum + " ) " + gbnf_literal("}"));
    CHECK(b.add_rule("call", "\"x\"") == "call-2");
    CHECK(b.add_rule("other", "\"x\"") == "call-2");  // the same body: the same rule
    std::string gbnf = b.gbnf(gbnf_literal("[TOOL_CALLS]") + " " + call);
    INFO(gbnf);
    size_t ws_rules = 0;
    for (size_t at = gbnf.find("\nws ::="); at != std::string::npos; at = gbnf.find("\nws ::=", at + 1)) ++ws_rules;
    CHECK(ws_rules == 1);
    auto g = compile(gbnf);
    CHECK(accepts(g, R"([TOOL_CALLS]{"name": "get_weather", "arguments": {"city": "Paris"}})"));
    CHECK(accepts(g, R"([TOOL_CALLS]{"name": "sum", "arguments": {"a": 1, "b": -2}})"));
    CHECK(!accepts(g, R"([TOOL_CALLS]{"name": "sum", "arguments": {"city": "Paris"}})"));
    CHECK(!accepts(g, R"([TOOL_CALLS]{"name": "get_weather", "arguments": {"a": 1, "b": 2}})"));
}

TEST_CASE("json_schema: formats are the strings of their patterns", "[json_schema]") {
    struct Case {
        const char* format;
        std::vector<std::string> valid, invalid;
    };
    for (const Case& c :
         {Case{"date", {"2024-02-29", "1999-12-31"}, {"2024-13-01", "2024-00-10", "2024-01-32", "24-01-01"}},
          Case{"time", {"23:59:59Z", "00:00:00.123+05:30"}, {"24:00:00Z", "12:00:00", "12:60:00Z"}},
          Case{"date-time", {"2024-02-29T12:30:00Z", "2024-02-29T12:30:00.5-01:00"}, {"2024-02-29 12:30:00Z"}},
          Case{"uuid",
               {"123e4567-e89b-12d3-a456-426614174000"},
               {"123E4567-e89b-12d3-a456-426614174000", "123e4567"}}}) {
        auto g = compile(json_schema_gbnf({{"type", "string"}, {"format", c.format}}, "format"));
        for (const auto& s : c.valid) {
            INFO(c.format << " " << s);
            CHECK(accepts(g, "\"" + s + "\""));
        }
        for (const auto& s : c.invalid) {
            INFO(c.format << " " << s);
            CHECK(!accepts(g, "\"" + s + "\""));
        }
    }
}

TEST_CASE("json_schema: bounds past the grammar's limits stay errors", "[json_schema]") {
    // A maximum past 1000 is lowered to it, and the grammar compiles.
    compile(json_schema_gbnf(
        ojson::parse(R"({"type":"array","items":{"type":"string","maxLength":5000},"maxItems":5000})"), WHERE));
    // Nested repetitions multiply (10^9 characters here): a grammar, or an error, not a blow-up.
    std::string gbnf =
        json_schema_gbnf(ojson::parse(R"({"type":"string","pattern":"^((a{1000}){1000}){1000}$"})"), WHERE);
    std::shared_ptr<const Grammar> g;
    std::string error = moe_error_of([&] { g = Grammar::parse(gbnf, vocab(), "schema grammar"); });
    if (error.empty()) CHECK(!accepts(g, "\"aaa\""));
}

namespace {

// A random schema of the subset's pieces, right or wrong (for the test below).
ojson random_schema(std::mt19937& rng, int depth) {
    auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
    if (depth > 4 || pick(5) == 0) {
        std::vector<ojson> leaves = {true, false, "string", ojson::object()};
        return leaves[pick(4)];
    }
    const std::vector<std::string> atoms = {
        "a", "\\d", "\\w", "\\s", ".", "[a-z]", "[^x]", "(",   ")",       "|", "*", "+",  "?",       "{2}", "{1,3}",
        "^", "$",   "\\",  "[",   "]", "{",     "}",    "(?:", "\\u00e9", "-", "é", "\"", "[\\d-z]", "\\b"};
    const std::vector<std::string> types = {"object",  "array",   "string", "number",
                                            "integer", "boolean", "null",   "bogus"};
    ojson s = ojson::object();
    for (int n = pick(5); n > 0; --n) {
        switch (pick(16)) {
        case 0:
            s["type"] = types[pick(8)];
            break;
        case 1:
            s["type"] = {types[pick(8)], types[pick(8)]};
            break;
        case 2:
            s["properties"] = {{"a", random_schema(rng, depth + 1)}, {"b", random_schema(rng, depth + 1)}};
            break;
        case 3:
            s["required"] = {"a", "c"};
            break;
        case 4:
            s["additionalProperties"] = random_schema(rng, depth + 1);
            break;
        case 5:
            s["items"] = random_schema(rng, depth + 1);
            break;
        case 6:
            s["prefixItems"] = ojson::array({random_schema(rng, depth + 1)});
            break;
        case 7:
            s[pick(2) ? "minItems" : "maxItems"] = pick(5) - 1;
            break;
        case 8:
            s[pick(2) ? "minLength" : "maxLength"] = pick(5) - 1;
            break;
        case 9: {
            std::string p;
            for (int k = pick(8); k > 0; --k) p += atoms[pick(static_cast<int>(atoms.size()))];
            s["pattern"] = p;
            break;
        }
        case 10:
            s["enum"] = {1, "a", nullptr};
            break;
        case 11:
            s[pick(2) ? "anyOf" : "oneOf"] = {random_schema(rng, depth + 1), random_schema(rng, depth + 1)};
            break;
        case 12:
            s["$ref"] = std::vector<std::string>{"#/$defs/d", "#/properties/a", "#"}[pick(3)];
            s["$defs"] = {{"d", random_schema(rng, depth + 1)}};
            break;
        case 13:
            s[pick(2) ? "minimum" : "exclusiveMaximum"] = pick(2000) - 1000;
            break;
        case 14:
            s["format"] = pick(2) ? "date" : "email";
            break;
        default:
            s["const"] = pick(2) ? ojson(3) : ojson("z");
            break;
        }
    }
    return s;
}

}  // namespace

TEST_CASE("json_schema: every grammar written parses, every refusal is one MoeError line", "[json_schema]") {
    std::mt19937 rng(7);
    int grammars = 0;
    for (int i = 0; i < 3000; ++i) {
        ojson schema = random_schema(rng, 0);
        INFO(schema.dump());
        std::string gbnf;
        std::string error = moe_error_of([&] { gbnf = json_schema_gbnf(schema, "fuzz"); });
        if (!error.empty()) {
            CHECK(error.starts_with("fuzz"));
            CHECK(error.find('\n') == std::string::npos);
            continue;
        }
        INFO(gbnf);
        CHECK(moe_error_of([&] { Grammar::parse(gbnf, vocab(), "fuzz grammar"); }).empty());
        ++grammars;
    }
    CHECK(grammars > 1000);
}

TEST_CASE("json_schema: gbnf_literal escapes what a GBNF literal cannot hold", "[json_schema]") {
    CHECK(gbnf_literal("a\"b\\c\nd\te\r\x01é") == "\"a\\\"b\\\\c\\nd\\te\\r\\x01é\"");
    CHECK(gbnf_literal("") == "\"\"");
}

TEST_CASE("json_schema: schema forms that need no grammar engine", "[json_schema]") {
    // true and {} are any value; annotations are ignored; a keyword of another type is ignored.
    std::string any = json_schema_gbnf(ojson(true), WHERE);
    CHECK(json_schema_gbnf(ojson::object(), WHERE) == any);
    CHECK(json_schema_gbnf(ojson::parse(R"({"title":"t","description":"d","$comment":"c","examples":[1],"default":1,
        "$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x","deprecated":false,"readOnly":true,"writeOnly":false})"),
                           WHERE) == any);
    CHECK(json_schema_gbnf(ojson::parse(R"({"type":"integer","maxLength":3,"properties":{}})"), WHERE) ==
          json_schema_gbnf(ojson::parse(R"({"type":"integer"})"), WHERE));
    // A maximum past the grammar's limit is lowered to it.
    CHECK(json_schema_gbnf(ojson::parse(R"({"type":"string","maxLength":5000})"), WHERE).find("{0,1000}") !=
          std::string::npos);
}

TEST_CASE("json_schema: every refusal names the schema's place and the problem", "[json_schema]") {
    struct Case {
        const char* schema;
        const char* where;  // WHERE + this pointer
        const char* what;
    };
    std::string deep;
    for (int i = 0; i < 70; ++i) deep += R"({"type":"array","items":)";
    deep += "{}";
    for (int i = 0; i < 70; ++i) deep += "}";
    std::string many_prefix = R"({"type":"array","prefixItems":[{})";
    for (int i = 0; i < 1000; ++i) many_prefix += ",{}";
    many_prefix += "]}";
    std::string deep_where;
    for (int i = 0; i < 65; ++i) deep_where += "/items";
    std::vector<Case> cases = {
        {R"({"type":"object","properties":{"when":{"type":"string","format":"email"}}})", "/properties/when/format",
         "unsupported format 'email'"},
        {R"({"type":"object","properties":{"x":{"if":{}}}})", "/properties/x", "unsupported keyword 'if'"},
        {R"({"type":"object","patternProperties":{}})", "", "unsupported keyword 'patternProperties'"},
        {R"({"type":"object","minProperties":1})", "", "unsupported keyword 'minProperties'"},
        {R"({"not":{}})", "", "unsupported keyword 'not'"},
        {R"({"type":"number","multipleOf":2})", "", "unsupported keyword 'multipleOf'"},
        {R"({"type":"array","uniqueItems":true})", "", "unsupported keyword 'uniqueItems'"},
        {R"({"nullable":true})", "", "unsupported keyword 'nullable'"},
        {R"({"type":"number","minimum":0})", "", "keyword 'minimum' is supported for integers only"},
        {R"({"$ref":"#/$defs/missing","$defs":{}})", "/$ref", "'$ref' '#/$defs/missing' names nothing in the schema"},
        {R"({"$ref":"https://example.com/s.json"})", "/$ref", "only references within the schema"},
        {R"({"$ref":"other.json#/a"})", "/$ref", "only references within the schema"},
        {R"({"$ref":5})", "/$ref", "'$ref' must be a string"},
        {R"({"$ref":"#/$defs/a","type":"string"})", "", "keyword 'type' beside '$ref' is not supported"},
        {R"({"type":"strnig"})", "/type", "unknown type 'strnig'"},
        {R"({"type":5})", "/type", "'type' must be a type name"},
        {R"({"type":[]})", "/type", "'type' must be a type name"},
        {R"({"properties":{"a":"string"}})", "/properties/a", "a schema must be an object or a boolean, not string"},
        {R"("string")", "", "a schema must be an object or a boolean, not string"},
        {"false", "", "schema false admits no value"},
        {R"({"type":"object","properties":{"a":false},"required":["a"]})", "/properties/a",
         "required property 'a' admits no value"},
        {R"({"type":"object","properties":{},"additionalProperties":false,"required":["b"]})", "/required",
         "required property 'b' is not allowed"},
        {R"({"required":"a"})", "/required", "'required' must be an array of strings"},
        {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "/allOf",
         "'allOf' of more than one schema is not supported"},
        {R"({"anyOf":[]})", "/anyOf", "'anyOf' must be a non-empty array of schemas"},
        {R"({"oneOf":[{"type":"string"}],"type":"string"})", "", "keyword 'type' beside 'oneOf' is not supported"},
        {R"({"enum":[1,2],"type":"string"})", "", "no value of 'enum' or 'const' has the schema's type"},
        {R"({"enum":[]})", "/enum", "'enum' must be a non-empty array"},
        {R"({"enum":["a"],"maxLength":3})", "", "keyword 'maxLength' beside 'enum' is not supported"},
        {R"({"const":"b","enum":["a"]})", "", "'const' is not one of 'enum'"},
        {R"({"type":"string","minLength":5000})", "/minLength", "'minLength' 5000 is past the grammar's limit of 1000"},
        {R"({"type":"string","minLength":-1})", "/minLength", "'minLength' must be a non-negative integer"},
        {R"({"type":"array","minItems":3,"maxItems":2})", "", "'maxItems' is below 'minItems'"},
        {R"({"type":"array","items":[{}]})", "/items", "'items' as an array is not supported"},
        {R"({"type":"array","prefixItems":[{}],"items":false,"minItems":2})", "", "'minItems' exceeds the items"},
        {R"({"type":"integer","minimum":10,"maximum":5})", "", "no integer of at most 16 digits is within the bounds"},
        {R"({"type":"integer","minimum":"0"})", "/minimum", "'minimum' must be a number"},
        {R"({"type":"string","pattern":"^a","maxLength":3})", "", "'minLength'/'maxLength' beside 'pattern'"},
        {R"({"type":"string","pattern":5})", "/pattern", "'pattern' must be a string"},
        {R"x({"type":"string","pattern":"(?=a)b"})x", "/pattern", "pattern at offset 2: lookahead is not supported"},
        {R"x({"type":"string","pattern":"(?<!a)b"})x", "/pattern", "lookbehind is not supported"},
        {R"x({"type":"string","pattern":"(?<n>a)"})x", "/pattern", "named groups are not supported"},
        {R"x({"type":"string","pattern":"(a)\\1"})x", "/pattern", "back references are not supported"},
        {R"({"type":"string","pattern":"\\bword"})", "/pattern", "word boundaries (\\b) are not supported"},
        {R"({"type":"string","pattern":"\\p{L}"})", "/pattern", "Unicode property escapes are not supported"},
        {R"({"type":"string","pattern":"a^b"})", "/pattern", "'^' is supported only at the start of the pattern"},
        {R"x({"type":"string","pattern":"(a$)"})x", "/pattern", "'$' is supported only at the end of the pattern"},
        {R"x({"type":"string","pattern":"(ab"})x", "/pattern", "missing ')'"},
        {R"x({"type":"string","pattern":"ab)"})x", "/pattern", "unexpected ')'"},
        {R"({"type":"string","pattern":"[ab"})", "/pattern", "missing ']'"},
        {R"({"type":"string","pattern":"[z-a]"})", "/pattern", "a range out of order"},
        {R"({"type":"string","pattern":"*a"})", "/pattern", "nothing to repeat"},
        {R"({"type":"string","pattern":"a**"})", "/pattern", "nothing to repeat"},
        {R"({"type":"string","pattern":"^(|c[ab])+$"})", "/pattern",
         "pattern at offset 9: a repeated item that can match the empty string"},
        {R"({"type":"string","pattern":"(a?b*){2,3}"})", "/pattern", "a repeated item that can match the empty string"},
        {R"({"type":"string","pattern":"a{3,2}"})", "/pattern", "repetition {m,n} with n < m"},
        {R"({"type":"string","pattern":"a{1,5000}"})", "/pattern", "repetition bound past 1000"},
        {R"({"type":"string","pattern":"\\q"})", "/pattern", "unknown escape '\\q'"},
        {R"({"type":"string","pattern":"a{,5}"})", "/pattern", "a '{' that is no repetition must be escaped"},
        {R"({"type":"string","pattern":"\\"})", "/pattern", "'\\' at the end of the pattern"},
        {R"({"type":"string","pattern":"[]"})", "/pattern", "an empty character class"},
        {R"({"$ref":"#"})", "/$ref", "'$ref' '#' refers to itself before any value is written"},
        {R"({"$defs":{"a":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/b"}]},"b":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})",
         "/$defs/b/allOf/0/$ref", "'$ref' '#/$defs/a' refers to itself before any value is written"},
        {deep.c_str(), deep_where.c_str(), "schema nested deeper than 64 levels"},
        {many_prefix.c_str(), "/prefixItems", "'prefixItems' of more than 1000 schemas"},
    };
    for (const Case& c : cases) {
        INFO(c.schema);
        std::string error = refusal(c.schema);
        INFO(error);
        CHECK(error.starts_with(WHERE + c.where + ": "));
        CHECK(error.find(c.what) != std::string::npos);
        CHECK(error.find('\n') == std::string::npos);
    }
    // A recursive reference is a recursive rule, not a refusal.
    CHECK(refusal(R"({"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"})").empty());
    CHECK(refusal(R"({"type":"object","properties":{"self":{"$ref":"#"}}})").empty());
}

TEST_CASE("json_schema: a pattern whose parses multiply at every character is refused by name", "[json_schema]") {
    // Found by fuzz_json_schema (its walk, its picks from these bytes):
    // without the walk's step bound the masks of this grammar took minutes.
    const std::string input = R"({"pattern":"^(.*.......................................ab|c[0-9]{2,4})+$"})"
                              "\n";
    std::shared_ptr<const Grammar> g = compile(json_schema_gbnf(ojson::parse(input), "schema"));
    std::vector<int> ends = {tokenizer().eos_id()};
    GrammarMatcher m(g, ends, input[0] & 1);
    std::vector<float> logits(tokenizer().vocab_size());
    std::string error = moe_error_of([&] {
        for (int step = 0; step < 24 && !m.must_end(); step++) {
            std::fill(logits.begin(), logits.end(), 0.0f);
            m.mask(logits.data());
            std::vector<int> allowed;
            for (int id = 0; id < int(logits.size()); id++)
                if (logits[id] == 0.0f) allowed.push_back(id);
            REQUIRE(!allowed.empty());
            const int pick =
                allowed[(size_t(uint8_t(input[size_t(step) % input.size()])) * 131 + size_t(step)) % allowed.size()];
            if (pick == tokenizer().eos_id()) break;
            m.accept(pick);
        }
    });
    INFO(error);
    CHECK(error.find("too ambiguous") != std::string::npos);
}
