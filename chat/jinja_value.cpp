// Jinja values: construction, JSON in and out, and Python's str/repr/==/<
// (see jinja_value.h). Lists and dicts record their depth when built and
// refuse more than JINJA_MAX_DEPTH levels; recursive walks (repr, ==, <,
// json, hashing) stop at that depth too, and charge the current WorkBudget a
// step per value and, for repr and json, the bytes of their text before
// appending it.
#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/text/work_budget.h"

namespace {

// One value visited by a walk `depth` levels down.
void check_nesting(int depth) {
    if (depth > JINJA_MAX_DEPTH) {
        throw JinjaError("value nested more than " + std::to_string(JINJA_MAX_DEPTH) + " levels deep");
    }
    work_charge_steps(1);
}

// The depth of a list or dict of items this deep.
int container_depth(int deepest_item) {
    if (deepest_item >= JINJA_MAX_DEPTH)
        throw JinjaError("a list or dict nested more than " + std::to_string(JINJA_MAX_DEPTH) + " levels deep");
    return deepest_item + 1;
}

// Text that repr and json build: each piece is charged to the current
// budget before it is appended (a string longer than the budget allows
// fails before it is built).
struct Text {
    std::string& out;
    void add(std::string_view piece) {
        work_charge_grow(out.size(), piece.size());
        out.append(piece);
    }
    void add(char c) { add(std::string_view(&c, 1)); }
};

template <class Json>
JinjaValue from_json_impl(const Json& j, int depth) {
    check_nesting(depth);
    switch (j.type()) {
    case nlohmann::detail::value_t::null:
        return JinjaValue::none();
    case nlohmann::detail::value_t::boolean:
        return JinjaValue::from_bool(j.template get<bool>());
    case nlohmann::detail::value_t::number_integer:
        return JinjaValue::from_int(j.template get<int64_t>());
    case nlohmann::detail::value_t::number_unsigned: {
        uint64_t u = j.template get<uint64_t>();
        if (u > static_cast<uint64_t>(INT64_MAX)) return JinjaValue::from_float(static_cast<double>(u));
        return JinjaValue::from_int(static_cast<int64_t>(u));
    }
    case nlohmann::detail::value_t::number_float:
        return JinjaValue::from_float(j.template get<double>());
    case nlohmann::detail::value_t::string:
        return JinjaValue::from_string(j.template get<std::string>());
    case nlohmann::detail::value_t::array: {
        JinjaList items;
        items.reserve(j.size());
        for (const auto& e : j) items.push_back(from_json_impl(e, depth + 1));
        return JinjaValue::from_list(std::move(items));
    }
    case nlohmann::detail::value_t::object: {
        JinjaDict d;
        d.items.reserve(j.size());
        for (auto it = j.begin(); it != j.end(); ++it)
            d.items.emplace_back(JinjaValue::from_string(it.key()), from_json_impl(it.value(), depth + 1));
        return JinjaValue::from_dict(std::move(d));
    }
    default:
        throw JinjaError("JSON value of an unsupported type (binary)");
    }
}

// Python's str.isprintable() is false for controls, format characters,
// private use, line and paragraph separators and spaces other than ' '
// (unassigned code points, also unprintable there, are not known here).
bool py_printable(uint32_t c) {
    static const uint32_t RANGES[][2] = {
        {0x0000, 0x001f},   {0x007f, 0x00a0},   {0x00ad, 0x00ad},   {0x0600, 0x0605},   {0x061c, 0x061c},
        {0x06dd, 0x06dd},   {0x070f, 0x070f},   {0x0890, 0x0891},   {0x08e2, 0x08e2},   {0x1680, 0x1680},
        {0x180e, 0x180e},   {0x2000, 0x200f},   {0x2028, 0x202f},   {0x205f, 0x2064},   {0x2066, 0x206f},
        {0x3000, 0x3000},   {0xd800, 0xf8ff},   {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0xfffe, 0xffff},
        {0x110bd, 0x110bd}, {0x110cd, 0x110cd}, {0x13430, 0x1343f}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a},
        {0xe0001, 0xe0001}, {0xe0020, 0xe007f}, {0xf0000, 0x10ffff}};
    for (const auto& r : RANGES) {
        if (c >= r[0] && c <= r[1]) return false;
    }
    return true;
}

// Writes Python's repr of s through put(std::string_view).
template <class Put>
void repr_string_to(const Put& put, const std::string& s) {
    const char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
    const char escaped_quote[2] = {'\\', quote};
    put(std::string_view(&quote, 1));
    for (size_t i = 0; i < s.size();) {
        // A run of printable ASCII that needs no escape goes as one piece.
        size_t run = i;
        while (run < s.size() && s[run] >= 0x20 && s[run] < 0x7f && s[run] != '\\' && s[run] != quote) ++run;
        if (run > i) {
            put(std::string_view(s).substr(i, run - i));
            i = run;
            continue;
        }
        size_t len;
        uint32_t c = jinja_decode(s, i, &len);
        char buf[16];
        if (c == '\\') {
            put("\\\\");
        } else if (c == static_cast<uint32_t>(quote)) {
            put(std::string_view(escaped_quote, 2));
        } else if (c == '\n') {
            put("\\n");
        } else if (c == '\r') {
            put("\\r");
        } else if (c == '\t') {
            put("\\t");
        } else if (!py_printable(c)) {
            std::snprintf(buf, sizeof buf, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
            put(buf);
        } else {
            put(std::string_view(s).substr(i, len));
        }
        i += len;
    }
    put(std::string_view(&quote, 1));
}

// json.dumps of s through put(std::string_view).
template <class Put>
void json_string_to(const Put& put, const std::string& s, bool ensure_ascii) {
    put("\"");
    char buf[16];
    for (size_t i = 0; i < s.size();) {
        size_t run = i;  // printable ASCII without '"' or '\\': one piece
        while (run < s.size() && s[run] >= 0x20 && s[run] < 0x7f && s[run] != '\\' && s[run] != '"') ++run;
        if (run > i) {
            put(std::string_view(s).substr(i, run - i));
            i = run;
            continue;
        }
        size_t len;
        uint32_t c = jinja_decode(s, i, &len);
        switch (c) {
        case '"':
            put("\\\"");
            break;
        case '\\':
            put("\\\\");
            break;
        case '\n':
            put("\\n");
            break;
        case '\r':
            put("\\r");
            break;
        case '\t':
            put("\\t");
            break;
        case '\b':
            put("\\b");
            break;
        case '\f':
            put("\\f");
            break;
        default:
            if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
                if (c > 0xffff) {  // a surrogate pair, as Python writes it
                    uint32_t v = c - 0x10000;
                    std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
                } else {
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                }
                put(buf);
            } else {
                put(std::string_view(s).substr(i, len));
            }
        }
        i += len;
    }
    put("\"");
}

// A string's escaped text: measured first, charged, then written.
template <class Write>
void add_escaped(Text& out, const Write& write) {
    size_t n = 0;
    write([&n](std::string_view piece) { n += piece.size(); });
    work_charge_grow(out.out.size(), n);
    write([&out](std::string_view piece) { out.out.append(piece); });
}

void repr_string(Text& out, const std::string& s) {
    add_escaped(out, [&s](const auto& put) { repr_string_to(put, s); });
}

void json_string(Text& out, const std::string& s, bool ensure_ascii) {
    add_escaped(out, [&s, ensure_ascii](const auto& put) { json_string_to(put, s, ensure_ascii); });
}

void repr_items(Text& out, const JinjaDict& dict, int depth);

void repr_into(Text& out, const JinjaValue& v, int depth) {
    check_nesting(depth);
    switch (v.type) {
    case JinjaType::UNDEFINED:
        out.add("Undefined");
        return;
    case JinjaType::STRING:
        repr_string(out, v.text());
        return;
    case JinjaType::LIST: {
        out.add(v.tuple ? '(' : '[');
        for (size_t i = 0; i < v.list->size(); ++i) {
            if (i) out.add(", ");
            repr_into(out, (*v.list)[i], depth + 1);
        }
        if (v.tuple && v.list->size() == 1) out.add(',');
        out.add(v.tuple ? ')' : ']');
        return;
    }
    case JinjaType::DICT:
        out.add('{');
        repr_items(out, *v.dict, depth);
        out.add('}');
        return;
    case JinjaType::NAMESPACE:
        out.add("<Namespace {");
        repr_items(out, *v.dict, depth);
        out.add("}>");
        return;
    default:
        out.add(jinja_str(v));
        return;
    }
}

void repr_items(Text& out, const JinjaDict& dict, int depth) {
    for (size_t i = 0; i < dict.items.size(); ++i) {
        if (i) out.add(", ");
        repr_into(out, dict.items[i].first, depth + 1);
        out.add(": ");
        repr_into(out, dict.items[i].second, depth + 1);
    }
}

void json_newline(Text& out, int indent, int level) {
    const size_t spaces = static_cast<size_t>(indent) * static_cast<size_t>(level);
    work_charge_grow(out.out.size(), spaces + 1);
    out.out += '\n';
    out.out.append(spaces, ' ');
}

struct JsonStyle {
    int indent;
    bool sort_keys, ensure_ascii;
    std::string item_sep, key_sep;
};

void json_into(Text& out, const JinjaValue& v, const JsonStyle& style, int depth) {
    const int indent = style.indent;
    check_nesting(depth);
    switch (v.type) {
    case JinjaType::NONE:
        out.add("null");
        return;
    case JinjaType::BOOL:
        out.add(v.boolean ? "true" : "false");
        return;
    case JinjaType::INT:
        out.add(std::to_string(v.integer));
        return;
    case JinjaType::FLOAT:
        if (std::isnan(v.number)) {
            out.add("NaN");
        } else if (std::isinf(v.number)) {
            out.add(v.number > 0 ? "Infinity" : "-Infinity");
        } else {
            out.add(jinja_float_repr(v.number));
        }
        return;
    case JinjaType::STRING:
        json_string(out, v.text(), style.ensure_ascii);
        return;
    case JinjaType::LIST: {
        if (v.list->empty()) {
            out.add("[]");
            return;
        }
        out.add('[');
        for (size_t i = 0; i < v.list->size(); ++i) {
            if (i) out.add(style.item_sep);
            if (indent >= 0) json_newline(out, indent, depth + 1);
            json_into(out, (*v.list)[i], style, depth + 1);
        }
        if (indent >= 0) json_newline(out, indent, depth);
        out.add(']');
        return;
    }
    case JinjaType::DICT: {
        if (v.dict->items.empty()) {
            out.add("{}");
            return;
        }
        // json.dumps turns keys into strings: numbers as they print, true,
        // false and null as JSON spells them.
        std::vector<std::pair<std::string, const JinjaValue*>> items;
        for (const auto& [key, value] : v.dict->items) {
            std::string k;
            switch (key.type) {
            case JinjaType::STRING:
                k = key.text();
                break;
            case JinjaType::INT:
            case JinjaType::FLOAT:
                k = jinja_str(key);
                break;
            case JinjaType::BOOL:
                k = key.boolean ? "true" : "false";
                break;
            case JinjaType::NONE:
                k = "null";
                break;
            default:
                throw JinjaError(std::string("keys must be str, int, float, bool or None, not ") +
                                 jinja_type_name(key));
            }
            items.emplace_back(std::move(k), &value);
        }
        if (style.sort_keys) {
            std::stable_sort(items.begin(), items.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        out.add('{');
        for (size_t i = 0; i < items.size(); ++i) {
            if (i) out.add(style.item_sep);
            if (indent >= 0) json_newline(out, indent, depth + 1);
            json_string(out, items[i].first, style.ensure_ascii);
            out.add(style.key_sep);
            json_into(out, *items[i].second, style, depth + 1);
        }
        if (indent >= 0) json_newline(out, indent, depth);
        out.add('}');
        return;
    }
    default: {
        std::string msg = "Object of type ";
        msg += v.type == JinjaType::UNDEFINED ? "Undefined" : jinja_type_name(v);
        msg += " is not JSON serializable";
        throw JinjaError(msg);
    }
    }
}

bool equal_impl(const JinjaValue& a, const JinjaValue& b, int depth) {
    check_nesting(depth);
    if (a.is_number() && b.is_number()) {
        if (a.type == JinjaType::FLOAT || b.type == JinjaType::FLOAT) return jinja_as_double(a) == jinja_as_double(b);
        int64_t x = a.type == JinjaType::BOOL ? a.boolean : a.integer;
        int64_t y = b.type == JinjaType::BOOL ? b.boolean : b.integer;
        return x == y;
    }
    if (a.type != b.type) return false;
    switch (a.type) {
    case JinjaType::UNDEFINED:
    case JinjaType::NONE:
        return true;
    case JinjaType::STRING:
        if (a.text().size() == b.text().size()) work_charge_steps(a.text().size() / 256);
        return a.text() == b.text();
    case JinjaType::LIST:
        if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
        for (size_t i = 0; i < a.list->size(); ++i) {
            if (!equal_impl((*a.list)[i], (*b.list)[i], depth + 1)) return false;
        }
        return true;
    case JinjaType::DICT:
        if (a.dict->items.size() != b.dict->items.size()) return false;
        for (const auto& [k, v] : a.dict->items) {
            const JinjaValue* other = b.dict->find(k);
            if (!other || !equal_impl(v, *other, depth + 1)) return false;
        }
        return true;
    case JinjaType::FUNCTION:
        return a.function == b.function;
    case JinjaType::NAMESPACE:
        return a.dict == b.dict;
    default:
        return false;
    }
}

int compare_impl(const JinjaValue& a, const JinjaValue& b, int depth) {
    check_nesting(depth);
    if (a.is_number() && b.is_number()) {
        if (a.type != JinjaType::FLOAT && b.type != JinjaType::FLOAT) {
            int64_t x = a.type == JinjaType::BOOL ? a.boolean : a.integer;
            int64_t y = b.type == JinjaType::BOOL ? b.boolean : b.integer;
            return x < y ? -1 : (x > y ? 1 : 0);
        }
        double x = jinja_as_double(a), y = jinja_as_double(b);
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.type == JinjaType::STRING && b.type == JinjaType::STRING) {
        work_charge_steps(std::min(a.text().size(), b.text().size()) / 256);
        int c = a.text().compare(b.text());
        return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.type == JinjaType::LIST && b.type == JinjaType::LIST && a.tuple == b.tuple) {
        size_t n = std::min(a.list->size(), b.list->size());
        for (size_t i = 0; i < n; ++i) {
            if (!equal_impl((*a.list)[i], (*b.list)[i], depth + 1))
                return compare_impl((*a.list)[i], (*b.list)[i], depth + 1);
        }
        return a.list->size() < b.list->size() ? -1 : (a.list->size() > b.list->size() ? 1 : 0);
    }
    std::string msg = "'<' not supported between instances of '";
    msg += jinja_type_name(a);
    msg += "' and '";
    msg += jinja_type_name(b);
    msg += "'";
    throw JinjaError(msg);
}

}  // namespace

namespace {

void check_hashable(const JinjaValue& key, int depth = 0) {
    check_nesting(depth);
    switch (key.type) {
    case JinjaType::LIST:
        if (!key.tuple) throw JinjaError("unhashable type: 'list'");
        for (const auto& item : *key.list) check_hashable(item, depth + 1);
        return;
    case JinjaType::DICT:
    case JinjaType::NAMESPACE:
    case JinjaType::UNDEFINED:
        throw JinjaError(std::string("unhashable type: '") + jinja_type_name(key) + "'");
    default:
        return;
    }
}

}  // namespace

const JinjaValue* JinjaDict::find(std::string_view key) const {
    for (const auto& kv : items) {
        if (kv.first.type == JinjaType::STRING && kv.first.text() == key) return &kv.second;
    }
    return nullptr;
}

const JinjaValue* JinjaDict::find(const JinjaValue& key) const {
    if (key.type == JinjaType::STRING) return find(std::string_view(key.text()));
    check_hashable(key);
    for (const auto& kv : items) {
        if (jinja_equal(kv.first, key)) return &kv.second;
    }
    return nullptr;
}

void JinjaDict::set(const std::string& key, JinjaValue value) {
    set(JinjaValue::from_string(key), std::move(value));
}

void JinjaDict::set(JinjaValue key, JinjaValue value) {
    check_hashable(key);
    for (auto& kv : items) {
        if (jinja_equal(kv.first, key)) {
            kv.second = std::move(value);
            return;
        }
    }
    items.emplace_back(std::move(key), std::move(value));
}

const std::string& JinjaValue::text() const {
    static const std::string empty;
    return string ? *string : empty;
}

JinjaValue JinjaValue::undefined(std::string hint) {
    JinjaValue v;
    if (!hint.empty()) v.string = std::make_shared<const std::string>(std::move(hint));
    return v;
}

JinjaValue JinjaValue::none() {
    JinjaValue v;
    v.type = JinjaType::NONE;
    return v;
}

JinjaValue JinjaValue::from_bool(bool b) {
    JinjaValue v;
    v.type = JinjaType::BOOL;
    v.boolean = b;
    return v;
}

JinjaValue JinjaValue::from_int(int64_t i) {
    JinjaValue v;
    v.type = JinjaType::INT;
    v.integer = i;
    return v;
}

JinjaValue JinjaValue::from_float(double d) {
    JinjaValue v;
    v.type = JinjaType::FLOAT;
    v.number = d;
    return v;
}

JinjaValue JinjaValue::from_string(std::string s) {
    JinjaValue v;
    v.type = JinjaType::STRING;
    v.string = std::make_shared<const std::string>(std::move(s));
    return v;
}

JinjaValue JinjaValue::from_list(JinjaList items, bool tuple) {
    int deepest = 0;
    for (const JinjaValue& item : items) deepest = std::max(deepest, item.depth);
    JinjaValue v;
    v.type = JinjaType::LIST;
    v.tuple = tuple;
    v.depth = container_depth(deepest);
    v.list = std::make_shared<const JinjaList>(std::move(items));
    return v;
}

JinjaValue JinjaValue::from_dict(JinjaDict dict) {
    int deepest = 0;
    for (const auto& [key, value] : dict.items) deepest = std::max({deepest, key.depth, value.depth});
    JinjaValue v;
    v.type = JinjaType::DICT;
    v.depth = container_depth(deepest);
    v.dict = std::make_shared<JinjaDict>(std::move(dict));
    return v;
}

JinjaValue JinjaValue::from_function(std::string name, JinjaFunction f) {
    JinjaValue v;
    v.type = JinjaType::FUNCTION;
    v.string = std::make_shared<const std::string>(std::move(name));
    v.function = std::make_shared<const JinjaFunction>(std::move(f));
    return v;
}

JinjaValue JinjaValue::new_namespace(JinjaDict attributes) {
    JinjaValue v = from_dict(std::move(attributes));
    v.type = JinjaType::NAMESPACE;
    v.depth = 1;
    return v;
}

JinjaValue jinja_from_json(const nlohmann::ordered_json& j) {
    return from_json_impl(j, 0);
}
JinjaValue jinja_from_json(const nlohmann::json& j) {
    return from_json_impl(j, 0);
}

const char* jinja_type_name(const JinjaValue& v) {
    switch (v.type) {
    case JinjaType::UNDEFINED:
        return "undefined";
    case JinjaType::NONE:
        return "NoneType";
    case JinjaType::BOOL:
        return "bool";
    case JinjaType::INT:
        return "int";
    case JinjaType::FLOAT:
        return "float";
    case JinjaType::STRING:
        return "str";
    case JinjaType::LIST:
        return v.tuple ? "tuple" : "list";
    case JinjaType::DICT:
        return "dict";
    case JinjaType::FUNCTION:
        return "function";
    case JinjaType::NAMESPACE:
        return "Namespace";
    }
    return "?";
}

bool jinja_truthy(const JinjaValue& v) {
    switch (v.type) {
    case JinjaType::UNDEFINED:
    case JinjaType::NONE:
        return false;
    case JinjaType::BOOL:
        return v.boolean;
    case JinjaType::INT:
        return v.integer != 0;
    case JinjaType::FLOAT:
        return v.number != 0;
    case JinjaType::STRING:
        return !v.text().empty();
    case JinjaType::LIST:
        return !v.list->empty();
    case JinjaType::DICT:
        return !v.dict->items.empty();
    default:
        return true;
    }
}

std::string jinja_float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);  // [-]d[.ddd]e[+-]xx
    bool negative = sci[0] == '-';
    if (negative) sci.erase(0, 1);
    size_t e = sci.find('e');
    int exponent = std::stoi(sci.substr(e + 1));
    std::string digits = sci.substr(0, e);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    std::string out = negative ? "-" : "";
    if (exponent >= -4 && exponent < 16) {
        if (exponent < 0) {
            out += "0.";
            out.append(static_cast<size_t>(-exponent - 1), '0');
            out += digits;
        } else {
            size_t int_digits = static_cast<size_t>(exponent) + 1;
            if (digits.size() <= int_digits) {
                out += digits;
                out.append(int_digits - digits.size(), '0');
                out += ".0";
            } else {
                out += digits.substr(0, int_digits);
                out += '.';
                out += digits.substr(int_digits);
            }
        }
        return out;
    }
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
        out += '.';
        out += digits.substr(1);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += ebuf;
    return out;
}

std::string jinja_str(const JinjaValue& v) {
    switch (v.type) {
    case JinjaType::UNDEFINED:
        return "";
    case JinjaType::NONE:
        return "None";
    case JinjaType::BOOL:
        return v.boolean ? "True" : "False";
    case JinjaType::INT:
        return std::to_string(v.integer);
    case JinjaType::FLOAT:
        return jinja_float_repr(v.number);
    case JinjaType::STRING:
        return v.text();
    case JinjaType::FUNCTION: {
        std::string s = "<function ";
        s += v.text();
        s += '>';
        return s;
    }
    default:
        return jinja_repr(v);
    }
}

std::string jinja_repr(const JinjaValue& v) {
    std::string out;
    Text text{out};
    repr_into(text, v, 0);
    return out;
}

bool jinja_equal(const JinjaValue& a, const JinjaValue& b) {
    return equal_impl(a, b, 0);
}

int jinja_compare(const JinjaValue& a, const JinjaValue& b) {
    return compare_impl(a, b, 0);
}

std::string jinja_to_json(const JinjaValue& v, const JinjaJsonStyle& style) {
    JsonStyle s{style.indent, style.sort_keys, style.ensure_ascii, style.indent < 0 ? ", " : ",", ": "};
    if (style.separators) {
        s.item_sep = style.separators->first;
        s.key_sep = style.separators->second;
    }
    std::string out;
    Text text{out};
    json_into(text, v, s, 0);
    return out;
}

double jinja_as_double(const JinjaValue& v) {
    switch (v.type) {
    case JinjaType::BOOL:
        return v.boolean ? 1.0 : 0.0;
    case JinjaType::INT:
        return static_cast<double>(v.integer);
    case JinjaType::FLOAT:
        return v.number;
    default: {
        std::string msg = "expected a number, got ";
        msg += jinja_type_name(v);
        throw JinjaError(msg);
    }
    }
}
