// The one JSON parser of the program: every JSON text that comes from outside
// (an HTTP body, a tool call's arguments, a schema, config.json,
// tokenizer.json, a safetensors header, a profile, a prompt file ...) is
// parsed here, under limits checked as the text is read, before anything is
// built: total bytes, nesting depth, total elements, keys per object and
// bytes per string. Building is linear in the text (an ordered object appends
// its members and finds a repeated key with a hash index, where
// nlohmann::ordered_json's own parser searches every earlier key), and
// nothing recurses, so a hostile text costs at most its limits. Lives in
// base/, below every module that reads JSON, so they all share it. Must not
// know who reads the text: callers name it (`what`) and word their own
// errors from JsonError's fields when they need to (the HTTP layer names the
// request's field).
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/errors.h"

// Limits of one JSON text.
struct JsonLimits {
    size_t max_bytes;         // of the whole text
    size_t max_depth;         // arrays and objects nested in one another
    size_t max_elements;      // values, arrays and objects, all counted
    size_t max_keys;          // members of one object
    size_t max_string_bytes;  // of one string or key, after unescaping
};

// A file the user or a model folder hands us. Large enough for a
// tokenizer.json of a 256k-token vocabulary with 500k merges written as pairs
// (~1.8 M elements, tens of MB), bounded so that a hostile file costs at most
// a few hundred MB before it is refused.
inline constexpr JsonLimits JSON_FILE_LIMITS = {
    size_t(256) << 20,  // bytes
    256,                // depth
    size_t(1) << 24,    // elements (16.7 M)
    size_t(1) << 22,    // keys per object (4.2 M)
    size_t(64) << 20,   // string bytes
};

// Why a text was refused, with what a caller needs to word its own error;
// what() is "<what>: <detail>" on one line.
class JsonError : public MoeError {
public:
    enum class Kind {
        SYNTAX,    // not JSON
        NUMBER,    // a number outside a double's range (1e400)
        BYTES,     // max_bytes
        DEPTH,     // max_depth
        ELEMENTS,  // max_elements
        KEYS,      // max_keys
        STRING,    // max_string_bytes
    };
    JsonError(Kind kind, std::string path, std::string reason, const std::string& what);
    Kind kind;
    // Where in the document: "messages[0].content", "[3].a", "" for the top
    // level. Keys are cut to 64 bytes.
    std::string path;
    // What is wrong: "JSON nests arrays and objects deeper than the limit of
    // 64 levels (nesting depth)"; for SYNTAX nlohmann's text ("parse error at
    // line 1, column 5: ...").
    std::string reason;
    // The reason with its place, as what() gives it after "<what>: ": "not
    // valid JSON: <reason>" for SYNTAX, else "<reason>, at <path>".
    std::string detail;
};

// text parsed as Json (nlohmann::json or nlohmann::ordered_json) under
// limits; JsonError naming `what` (a file's path, "request body") when it is
// not JSON or exceeds a limit. A repeated key keeps the last value, at the
// place of the first (as nlohmann's parser and Python's json.loads do).
// *elements (when given) receives the count of elements parsed.
template <class Json = nlohmann::json>
Json json_parse_bounded(std::string_view text, const JsonLimits& limits, const std::string& what,
                        size_t* elements = nullptr);

// prefix and a JsonError::path joined as one field name: ("a", "b[2]") ->
// "a.b[2]", ("a", "[2]") -> "a[2]"; either may be empty.
std::string json_path_join(const std::string& prefix, const std::string& path);
