// The values of the Jinja interpreter (chat/jinja.h): undefined, none,
// bool, int, float, string, list (or tuple), dict (insertion order kept),
// function (builtins, bound methods, macros) and namespace, with Python's
// meaning for each operation templates use: str() and repr() (what
// `{{ value }}` prints), truthiness, ==, <, json.dumps (HF's `tojson`), and
// the conversion from nlohmann JSON. Lists and dicts are shared and never
// changed after construction (Hugging Face renders in an immutable sandbox);
// only a namespace's attributes change. Nothing here knows of templates:
// errors are JinjaError, which the interpreter turns into a MoeError with the
// template line.
// Hostile values: a list or dict is built at most JINJA_MAX_DEPTH levels
// deep (its depth is known when it is built), and every recursive walk
// (repr, json, ==, <, hashing) stops at that depth too, so no walk and no
// destructor can overflow the stack; a namespace counts as one level (its
// attributes change later; the render that made it clears them when it
// ends, which also frees a namespace that holds itself). The walks charge
// the thread's current WorkBudget (engine/text/work_budget.h): a step per
// value visited, and the text repr and json build before they build it, so a
// shared tree is priced by the size it would print as, not by its memory.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/utf8.h"

// A template problem, without position; the interpreter adds the line.
struct JinjaError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

constexpr int JINJA_MAX_DEPTH = 256;

enum class JinjaType { UNDEFINED, NONE, BOOL, INT, FLOAT, STRING, LIST, DICT, FUNCTION, NAMESPACE };

struct JinjaValue;
using JinjaList = std::vector<JinjaValue>;

// Keyword arguments keep their order; positional ones come first.
struct JinjaArgs {
    std::vector<JinjaValue> positional;
    std::vector<std::pair<std::string, JinjaValue>> keyword;
};
using JinjaFunction = std::function<JinjaValue(JinjaArgs&)>;

// Keys are strings, numbers, none or tuples, as Python's hashable values
// (1, 1.0 and true are one key); JSON and keyword arguments give strings.
struct JinjaDict {
    std::vector<std::pair<JinjaValue, JinjaValue>> items;  // insertion order
    const JinjaValue* find(std::string_view key) const;    // a string key
    const JinjaValue* find(const JinjaValue& key) const;   // JinjaError for an unhashable key
    void set(const std::string& key, JinjaValue value);    // replaces in place, else appends
    void set(JinjaValue key, JinjaValue value);
};

struct JinjaValue {
    JinjaType type = JinjaType::UNDEFINED;
    bool tuple = false;    // LIST: a Python tuple (repr uses parentheses)
    int depth = 0;         // LIST, DICT: 1 + the deepest item's depth; NAMESPACE: 1; others 0
    bool boolean = false;  // BOOL
    int64_t integer = 0;   // INT
    double number = 0;     // FLOAT
    // STRING; UNDEFINED: what was looked up, for errors; FUNCTION: its name. Shared, so copying
    // a value (into a list, a loop variable) never copies the characters.
    std::shared_ptr<const std::string> string;
    std::shared_ptr<const JinjaList> list;          // LIST
    std::shared_ptr<JinjaDict> dict;                // DICT (not changed once built), NAMESPACE (attributes change)
    std::shared_ptr<const JinjaFunction> function;  // FUNCTION

    static JinjaValue undefined(std::string hint = {});
    static JinjaValue none();
    static JinjaValue from_bool(bool b);
    static JinjaValue from_int(int64_t i);
    static JinjaValue from_float(double d);
    static JinjaValue from_string(std::string s);
    static JinjaValue from_list(JinjaList items, bool tuple = false);
    static JinjaValue from_dict(JinjaDict dict);
    static JinjaValue from_function(std::string name, JinjaFunction f);
    static JinjaValue new_namespace(JinjaDict attributes);

    const std::string& text() const;
    bool is_undefined() const { return type == JinjaType::UNDEFINED; }
    bool is_number() const { return type == JinjaType::INT || type == JinjaType::FLOAT || type == JinjaType::BOOL; }
};

// Values converted from JSON: objects keep the key order nlohmann gives them
// (ordered_json: the document's order, as Python's json.loads).
JinjaValue jinja_from_json(const nlohmann::ordered_json& j);
JinjaValue jinja_from_json(const nlohmann::json& j);

// Python's type name, for error messages ("str", "dict", "undefined" ...).
const char* jinja_type_name(const JinjaValue& v);
bool jinja_truthy(const JinjaValue& v);
// Python's str() and repr(); undefined prints as "".
std::string jinja_str(const JinjaValue& v);
std::string jinja_repr(const JinjaValue& v);
// Python's == (1 == 1.0 == True; different kinds are unequal).
bool jinja_equal(const JinjaValue& a, const JinjaValue& b);
// Python's <, -1/0/1; JinjaError for kinds Python cannot order.
int jinja_compare(const JinjaValue& a, const JinjaValue& b);
// json.dumps's options as Hugging Face's tojson passes them.
struct JinjaJsonStyle {
    int indent = -1;  // < 0: None, one line
    bool sort_keys = false;
    bool ensure_ascii = false;  // true: every character outside ' '..'~' as \uXXXX
    // (item, key) separators; unset: (", ", ": "), or (",", ": ") with an indent.
    std::optional<std::pair<std::string, std::string>> separators;
};
std::string jinja_to_json(const JinjaValue& v, const JinjaJsonStyle& style = {});
// The number as a double (bool, int or float), JinjaError otherwise.
double jinja_as_double(const JinjaValue& v);

// Python's repr of a float ("1.0", "0.1", "1e+16", "inf", "nan").
std::string jinja_float_repr(double d);

// Strings are indexed, sliced and measured in code points, as Python's str
// is (base/utf8.h: utf8_offsets, utf8_length). The code point at byte i and
// its length in bytes, in the generalized form (the lone surrogates that
// string escapes such as '\ud800' write decode back; a byte that is no
// character: itself, 1).
inline uint32_t jinja_decode(std::string_view s, size_t i, size_t* len) {
    const Utf8Char c = utf8_decode(s, i, Utf8Form::GENERALIZED);
    *len = c.len;
    return c.cp;
}
