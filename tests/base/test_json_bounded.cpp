// The bounded JSON parse (base/json_bounded.h), the one parser of every
// JSON input: each limit refused at its value with the kind, the path and a
// one-line message naming the text, the value at each limit accepted, the
// same documents as nlohmann's parser (repeated keys: the last value, at the
// first one's place), an object of 250,000 keys in linear time (nlohmann's
// ordered_json parser searches every earlier key: quadratic), and files over
// a limit refused in one line naming the file.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <iterator>
#include <string>

#include "base/files.h"
#include "base/json_bounded.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

constexpr JsonLimits SMALL = {1000, 4, 20, 5, 8};

JsonError error_of(const std::string& text, const JsonLimits& limits = SMALL) {
    try {
        json_parse_bounded<ojson>(text, limits, "t.json");
    } catch (const JsonError& e) {
        return e;
    }
    FAIL("no error for " << text);
    return JsonError(JsonError::Kind::SYNTAX, "", "", "");
}

std::string keys_object(size_t n) {
    std::string text = "{";
    for (size_t i = 0; i < n; i++) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
    return text + "}";
}

}  // namespace

TEST_CASE("json_parse_bounded: each limit is refused where it is passed in one line naming the text", "[json]") {
    // Depth: 4 levels pass, the fifth is refused at its place.
    CHECK(json_parse_bounded<ojson>(R"({"a":[[{"b":1}]]})", SMALL, "t.json")["a"][0][0]["b"] == 1);
    JsonError depth = error_of(R"({"a":[[{"b":[1]}]]})");
    CHECK(depth.kind == JsonError::Kind::DEPTH);
    CHECK(depth.path == "a[0][0].b");
    CHECK(std::string(depth.what()) ==
          "t.json: JSON nests arrays and objects deeper than the limit of 4 levels (nesting depth), at a[0][0].b");

    // Elements: every value, array and object counts.
    std::string twenty = "[0";
    for (int i = 1; i < 19; i++) twenty += ",0";
    CHECK(json_parse_bounded<ojson>(twenty + "]", SMALL, "t.json").size() == 19);  // 19 values + the array
    JsonError elements = error_of(twenty + ",0]");
    CHECK(elements.kind == JsonError::Kind::ELEMENTS);
    CHECK(elements.path == "[19]");
    CHECK(std::string(elements.what()).find("more than 20 elements") != std::string::npos);

    // Keys per object, counted per object.
    CHECK(json_parse_bounded<ojson>(R"({"a":1,"b":2,"c":3,"d":4,"e":{"a":1,"b":2,"c":3,"d":4,"e":5}})", SMALL, "t")
              .size() == 5);
    JsonError keys = error_of(R"({"x":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6}})");
    CHECK(keys.kind == JsonError::Kind::KEYS);
    CHECK(keys.path == "x");
    CHECK(std::string(keys.what()).find("more than 5 keys") != std::string::npos);

    // String bytes, of values and of keys (after unescaping: "\u00e9" is 2 bytes).
    CHECK(json_parse_bounded<ojson>(R"({"12345678":"\u00e9\u00e9\u00e9\u00e9"})", SMALL, "t").size() == 1);
    JsonError string = error_of(R"({"a":["123456789"]})");
    CHECK(string.kind == JsonError::Kind::STRING);
    CHECK(string.path == "a[0]");
    CHECK(error_of(R"({"123456789":1})").kind == JsonError::Kind::STRING);

    // Total bytes, before parsing.
    const std::string padded = std::string("[").append(1000, ' ').append("]");
    JsonError bytes = error_of(padded);
    CHECK(bytes.kind == JsonError::Kind::BYTES);
    CHECK(std::string(bytes.what()) == "t.json: JSON text of 1002 bytes is longer than the limit of 1000 bytes");

    // Not JSON; a number beyond a double's range names its field.
    for (const char* text : {"", "{", "[1,]", "{\"a\" 1}", "[1] x", "nul", "\"\\x\""}) {
        INFO(text);
        JsonError e = error_of(text);
        CHECK(e.kind == JsonError::Kind::SYNTAX);
        CHECK(std::string(e.what()).rfind("t.json: not valid JSON: parse error at line ", 0) == 0);
        CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
    JsonError number = error_of(R"({"a":[1,{"b":-1e400}]})");
    CHECK(number.kind == JsonError::Kind::NUMBER);
    CHECK(number.path == "a[1].b");
    CHECK(json_path_join("body", number.path) == "body.a[1].b");
    CHECK(json_path_join("args", "[2]") == "args[2]");
    CHECK(json_path_join("", "a") == "a");
}

TEST_CASE("json_parse_bounded: the documents nlohmann builds with repeated keys as nlohmann keeps them", "[json]") {
    const std::string texts[] = {
        R"({"b":1,"a":2,"b":3})",
        R"({"z":{"y":[1,2,{"x":null}]},"z":"last","a":[true,false,-0.5,1e300,18446744073709551615,-9223372036854775808]})",
        // Past 16 members an ordered object finds repeated keys with a hash index.
        R"({"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,
            "k13":13,"k14":14,"k15":15,"k16":16,"k3":"three","k17":17,"k16":"sixteen","k0":{"again":[]}})",
        R"(["\u00e9\ud83d\ude00\n\"\\/", "", {}, [], [[]], {"":{"":""}}])",
        "  \t\n 42 ",
    };
    for (const std::string& text : texts) {
        INFO(text);
        const ojson ordered = json_parse_bounded<ojson>(text, JSON_FILE_LIMITS, "t.json");
        CHECK(ordered == ojson::parse(text));
        CHECK(ordered.dump() == ojson::parse(text).dump());  // key order too
        CHECK(json_parse_bounded(text, JSON_FILE_LIMITS, "t.json") == nlohmann::json::parse(text));
    }
    CHECK(json_parse_bounded<ojson>(texts[0], JSON_FILE_LIMITS, "t").dump() == R"({"b":3,"a":2})");
    const ojson many = json_parse_bounded<ojson>(texts[2], JSON_FILE_LIMITS, "t");
    CHECK(many.size() == 18);
    CHECK(many.begin().key() == "k0");
    CHECK(many["k0"] == ojson::parse(R"({"again":[]})"));
    CHECK(many["k16"] == "sixteen");

    size_t elements = 0;
    json_parse_bounded(R"({"a":[1,2,{"b":null}]})", JSON_FILE_LIMITS, "t", &elements);
    CHECK(elements == 6);

    // A real tokenizer.json (32,768-token vocabulary, 58,980 merges).
    const std::string tokenizer = read_file(shared_data_dir() / "tokenizers" / "mistral-7b-instruct-v0.3" / "tokenizer.json");
    CHECK(json_parse_bounded(tokenizer, JSON_FILE_LIMITS, "tokenizer.json") == nlohmann::json::parse(tokenizer));
}

TEST_CASE("json_parse_bounded: an object of 250000 keys parses in linear time", "[json]") {
    // nlohmann's own ordered_json parser compares each key with every earlier
    // one: ~3e10 comparisons here, about a minute; this parse is a few
    // hundred milliseconds. The bound only catches a quadratic build.
    const std::string text = keys_object(250'000);
    const auto start = std::chrono::steady_clock::now();
    const ojson j = json_parse_bounded<ojson>(text, JSON_FILE_LIMITS, "t.json");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(j.size() == 250'000);
    CHECK(j.begin().key() == "k0");
    CHECK(std::prev(j.end()).key() == "k249999");
    INFO(seconds << " s");
    CHECK(seconds < 10.0);
    // The same under the request limits' keys per object is refused at once.
    const JsonLimits request = {size_t(8) << 20, 64, size_t(1) << 18, size_t(1) << 13, size_t(8) << 20};
    CHECK(error_of(text, request).kind == JsonError::Kind::KEYS);
}

TEST_CASE("json_parse_bounded: a file over a limit is one line naming the file", "[json]") {
    const fs::path dir = test_temp_dir("json-limits");
    std::ofstream(dir / "config.json") << std::string(300, '[') << std::string(300, ']');
    check_error_line(moe_error_of([&] { file_read_json(dir / "config.json"); }), dir / "config.json",
                     "deeper than the limit of 256 levels (nesting depth)");
    std::ofstream(dir / "config.json", std::ios::trunc) << R"({"rope_theta": 1e999})";
    check_error_line(moe_error_of([&] { file_read_json(dir / "config.json"); }), dir / "config.json",
                     "the number 1e999 is outside the range of a double, at rope_theta");
    // The byte limit is checked as the file is read.
    std::ofstream(dir / "big.json") << "[" << std::string(2000, ' ') << "]";
    JsonLimits limits = JSON_FILE_LIMITS;
    limits.max_bytes = 1000;
    check_error_line(moe_error_of([&] { file_read_json(dir / "big.json", limits); }), dir / "big.json",
                     "larger than 1000 bytes");
    CHECK(file_read_json<ojson>(dir / "big.json").empty());
}
