// jinja2's filters and tests, Python's str and dict methods, lookup and
// slicing (see jinja_builtins.h). Case mapping (upper, lower, title,
// capitalize) is ASCII's; whitespace is Python's str.isspace() set.
#include "chat/jinja_builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>

#include "base/utf8.h"
#include "engine/text/work_budget.h"

namespace {

using Limits = JinjaBuiltinLimits;

[[noreturn]] void fail(const std::string& msg) {
    throw JinjaError(msg);
}

std::string py_quote(std::string_view s) {
    std::string out = "'";
    out += s;
    out += "'";
    return out;
}

// Arguments by position or keyword, as a Python signature binds them.
struct Params {
    JinjaArgs& args;
    const char* fn;
    const JinjaValue* get(size_t pos, const char* name) const {
        if (pos < args.positional.size()) return &args.positional[pos];
        for (const auto& [k, v] : args.keyword) {
            if (k == name) return &v;
        }
        return nullptr;
    }
    JinjaValue value(size_t pos, const char* name, JinjaValue fallback) const {
        const JinjaValue* v = get(pos, name);
        return v ? *v : fallback;
    }
    const JinjaValue& required(size_t pos, const char* name) const {
        const JinjaValue* v = get(pos, name);
        if (!v) fail(std::string(fn) + "() missing required argument '" + name + "'");
        return *v;
    }
    std::string string(size_t pos, const char* name, std::string fallback) const {
        const JinjaValue* v = get(pos, name);
        if (!v || v->type == JinjaType::NONE) return fallback;
        if (v->type != JinjaType::STRING)
            fail(std::string(fn) + "() argument '" + name + "' must be a string, not " + jinja_type_name(*v));
        return v->text();
    }
    int64_t integer(size_t pos, const char* name, int64_t fallback) const {
        const JinjaValue* v = get(pos, name);
        if (!v || v->type == JinjaType::NONE) return fallback;
        if (v->type == JinjaType::BOOL) return v->boolean;
        if (v->type != JinjaType::INT)
            fail(std::string(fn) + "() argument '" + name + "' must be an integer, not " + jinja_type_name(*v));
        return v->integer;
    }
    bool flag(size_t pos, const char* name, bool fallback) const {
        const JinjaValue* v = get(pos, name);
        return v ? jinja_truthy(*v) : fallback;
    }
};

std::string need_string(const JinjaValue& v, const char* what) {
    if (v.type != JinjaType::STRING) fail(std::string(what) + " expects a string, got " + jinja_type_name(v));
    return v.text();
}

void check_bytes(size_t n, const Limits& limits) {
    work_charge_steps(1);
    if (n > limits.max_bytes)
        fail("a string would exceed the render limit of " + std::to_string(limits.max_bytes) + " bytes");
}

void check_items(size_t n, const Limits& limits) {
    if (n > limits.max_items)
        fail("a list would exceed the render limit of " + std::to_string(limits.max_items) + " items");
}

// ---- UTF-8 and Python's whitespace ----

bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// str.strip / lstrip / rstrip; chars null: whitespace.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
    std::u32string set;
    if (chars) set = utf8_code_points(*chars, Utf8Form::GENERALIZED);
    auto strip_cp = [&](uint32_t c) { return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c); };
    std::vector<size_t> off = utf8_offsets(s);
    size_t b = 0, e = off.size() - 1;
    size_t len;
    while (left && b < e && strip_cp(jinja_decode(s, off[b], &len))) ++b;
    while (right && e > b && strip_cp(jinja_decode(s, off[e - 1], &len))) --e;
    return s.substr(off[b], off[e] - off[b]);
}

std::string ascii_upper(std::string s) {
    for (char& c : s) {
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    }
    return s;
}

std::string ascii_lower(std::string s) {
    for (char& c : s) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    }
    return s;
}

bool ascii_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string py_capitalize(const std::string& s) {
    std::string out = ascii_lower(s);
    if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
    return out;
}

// Python's str.title(): a letter after a non-letter is upper-cased.
std::string py_title(const std::string& s) {
    std::string out = s;
    bool prev_cased = false;
    for (char& c : out) {
        if (ascii_alpha(c)) {
            c = prev_cased ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
                           : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            prev_cased = true;
        } else {
            prev_cased = false;
        }
    }
    return out;
}

// jinja2's title filter: each word, split before runs of '-', whitespace,
// '(', '{', '[', '<', gets its first character upper-cased and the rest lower.
std::string jinja_title(const std::string& s) {
    std::string out;
    bool word_start = true;
    for (char c : s) {
        bool sep = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '(' ||
                   c == '{' || c == '[' || c == '<';
        if (sep) {
            out += c;
            word_start = true;
        } else if (word_start) {
            out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            word_start = false;
        } else {
            out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        }
    }
    return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                       const Limits& limits) {
    std::string out;
    if (from.empty()) {
        // Python inserts `to` before every character and at the end.
        std::vector<size_t> off = utf8_offsets(s);
        int64_t done = 0;
        for (size_t i = 0; i + 1 < off.size(); ++i) {
            if (count < 0 || done < count) {
                out += to;
                ++done;
            }
            out.append(s, off[i], off[i + 1] - off[i]);
            check_bytes(out.size(), limits);
        }
        if (count < 0 || done < count) out += to;
        return out;
    }
    size_t pos = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t at = s.find(from, pos);
        if (at == std::string::npos) break;
        out.append(s, pos, at - pos);
        out += to;
        check_bytes(out.size(), limits);
        pos = at + from.size();
        ++done;
    }
    out.append(s, pos, std::string::npos);
    check_bytes(out.size(), limits);
    return out;
}

JinjaValue py_split(const std::string& s, const std::string* sep, int64_t maxsplit, const Limits& limits) {
    JinjaList parts;
    if (!sep) {
        size_t i = 0, len;
        while (i < s.size()) {
            while (i < s.size() && py_space(jinja_decode(s, i, &len))) i += len;
            if (i >= s.size()) break;
            if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
                std::string rest = s.substr(i);
                parts.push_back(JinjaValue::from_string(py_strip(rest, nullptr, false, true)));
                return JinjaValue::from_list(std::move(parts));
            }
            size_t start = i;
            while (i < s.size() && !py_space(jinja_decode(s, i, &len))) i += len;
            check_items(parts.size() + 1, limits);
            parts.push_back(JinjaValue::from_string(s.substr(start, i - start)));
        }
        return JinjaValue::from_list(std::move(parts));
    }
    if (sep->empty()) fail("split(): empty separator");
    size_t pos = 0;
    for (;;) {
        size_t at =
            (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) ? std::string::npos : s.find(*sep, pos);
        if (at == std::string::npos) {
            parts.push_back(JinjaValue::from_string(s.substr(pos)));
            break;
        }
        check_items(parts.size() + 2, limits);
        parts.push_back(JinjaValue::from_string(s.substr(pos, at - pos)));
        pos = at + sep->size();
    }
    return JinjaValue::from_list(std::move(parts));
}

// Python's str.splitlines(): each line, without its boundary, to `line`.
template <class F>
void py_splitlines(const std::string& s, F&& line) {
    size_t i = 0, start = 0, len;
    while (i < s.size()) {
        uint32_t c = jinja_decode(s, i, &len);
        bool boundary = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
                        c == 0x85 || c == 0x2028 || c == 0x2029;
        if (boundary) {
            line(std::string_view(s).substr(start, i - start));
            if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++len;
            start = i + len;
        }
        i += len;
    }
    if (start < s.size()) line(std::string_view(s).substr(start));
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&#34;";
            break;
        case '\'':
            out += "&#39;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

int64_t checked_index(int64_t i, size_t n, bool* ok) {
    int64_t len = static_cast<int64_t>(n);
    if (i < 0) i += len;
    *ok = i >= 0 && i < len;
    return i;
}

// str.format with {} / {0} / {name} fields (no format specs).
std::string py_format(const std::string& fmt, JinjaArgs& args) {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < fmt.size(); ++i) {
        char c = fmt[i];
        if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out += '{';
            ++i;
        } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
            out += '}';
            ++i;
        } else if (c == '{') {
            size_t end = fmt.find('}', i);
            if (end == std::string::npos) fail("format(): single '{' in the format string");
            std::string field = fmt.substr(i + 1, end - i - 1);
            if (field.find_first_of(":!.[") != std::string::npos)
                fail("format(): field " + py_quote(field) + " is not supported");
            const JinjaValue* v = nullptr;
            if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
                size_t idx = auto_index++;
                if (!field.empty()) {
                    const auto [end_digits, ec] = std::from_chars(field.data(), field.data() + field.size(), idx);
                    if (ec == std::errc::result_out_of_range)
                        fail("format(): field {" + field + "} is too large an index");
                    if (ec != std::errc() || end_digits != field.data() + field.size())
                        fail("format(): field " + py_quote(field) + " is not supported");
                }
                if (idx < args.positional.size()) v = &args.positional[idx];
            } else {
                for (const auto& [k, kv] : args.keyword) {
                    if (k == field) v = &kv;
                }
            }
            if (!v) fail("format(): no argument for field {" + field + "}");
            const std::string text = jinja_str(*v);
            work_charge_grow(out.size(), text.size());
            out += text;
            i = end;
        } else if (c == '}') {
            fail("format(): single '}' in the format string");
        } else {
            out += c;
        }
    }
    return out;
}

bool starts_or_ends(const std::string& s, const JinjaValue& what, bool ends) {
    auto one = [&](const JinjaValue& p) {
        const std::string& t = need_string(p, ends ? "endswith()" : "startswith()");
        if (t.size() > s.size()) return false;
        return ends ? s.compare(s.size() - t.size(), t.size(), t) == 0 : s.compare(0, t.size(), t) == 0;
    };
    if (what.type == JinjaType::LIST && what.tuple) {
        for (const auto& p : *what.list) {
            if (one(p)) return true;
        }
        return false;
    }
    return one(what);
}

// A Python method of a string, bound to it.
std::optional<JinjaValue> string_method(const JinjaValue& self, const std::string& name, const Limits& limits) {
    static const char* const NAMES[] = {"startswith", "endswith", "strip",   "lstrip",  "rstrip",  "split",
                                        "rsplit",     "replace",  "upper",   "lower",   "title",   "capitalize",
                                        "find",       "rfind",    "count",   "join",    "format",  "splitlines",
                                        "isdigit",    "isalpha",  "isalnum", "isspace", "islower", "isupper"};
    if (std::find_if(std::begin(NAMES), std::end(NAMES), [&](const char* n) { return name == n; }) == std::end(NAMES))
        return std::nullopt;
    JinjaValue bound = self;
    return JinjaValue::from_function("str." + name, [bound, name, limits](JinjaArgs& a) -> JinjaValue {
        Params p{a, name.c_str()};
        const std::string& s = bound.text();
        if (name == "startswith" || name == "endswith")
            return JinjaValue::from_bool(starts_or_ends(s, p.required(0, "prefix"), name == "endswith"));
        if (name == "strip" || name == "lstrip" || name == "rstrip") {
            const JinjaValue* chars = p.get(0, "chars");
            std::string cs = chars && chars->type != JinjaType::NONE ? need_string(*chars, "strip()") : std::string();
            bool has = chars && chars->type != JinjaType::NONE;
            return JinjaValue::from_string(py_strip(s, has ? &cs : nullptr, name != "rstrip", name != "lstrip"));
        }
        if (name == "split" || name == "rsplit") {
            const JinjaValue* sep = p.get(0, "sep");
            int64_t maxsplit = p.integer(1, "maxsplit", -1);
            if (name == "rsplit" && maxsplit >= 0) fail("rsplit() with maxsplit is not supported");
            std::string sp = sep && sep->type != JinjaType::NONE ? need_string(*sep, "split()") : std::string();
            return py_split(s, sep && sep->type != JinjaType::NONE ? &sp : nullptr, maxsplit, limits);
        }
        if (name == "replace") {
            return JinjaValue::from_string(py_replace(s, need_string(p.required(0, "old"), "replace()"),
                                                      need_string(p.required(1, "new"), "replace()"),
                                                      p.integer(2, "count", -1), limits));
        }
        if (name == "upper") return JinjaValue::from_string(ascii_upper(s));
        if (name == "lower") return JinjaValue::from_string(ascii_lower(s));
        if (name == "title") return JinjaValue::from_string(py_title(s));
        if (name == "capitalize") return JinjaValue::from_string(py_capitalize(s));
        if (name == "find" || name == "rfind" || name == "count") {
            std::string sub = need_string(p.required(0, "sub"), "find()");
            if (name == "count") {
                if (sub.empty()) return JinjaValue::from_int(static_cast<int64_t>(utf8_length(s) + 1));
                int64_t n = 0;
                for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
                return JinjaValue::from_int(n);
            }
            size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
            return JinjaValue::from_int(
                at == std::string::npos ? -1 : static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, at))));
        }
        if (name == "join") {
            std::string out;
            bool first = true;
            for (const auto& item : jinja_iterate(p.required(0, "iterable"), limits)) {
                if (!first) out += s;
                first = false;
                out += need_string(item, "join()");
                check_bytes(out.size(), limits);
            }
            return JinjaValue::from_string(std::move(out));
        }
        if (name == "format") {
            std::string out = py_format(s, a);
            check_bytes(out.size(), limits);
            return JinjaValue::from_string(std::move(out));
        }
        if (name == "splitlines") {
            JinjaList lines;
            py_splitlines(s, [&](std::string_view l) {
                check_items(lines.size() + 1, limits);
                lines.push_back(JinjaValue::from_string(std::string(l)));
            });
            return JinjaValue::from_list(std::move(lines));
        }
        auto all = [&](auto pred) {
            if (s.empty()) return false;
            for (char c : s) {
                if (!pred(static_cast<unsigned char>(c))) return false;
            }
            return true;
        };
        if (name == "isdigit") return JinjaValue::from_bool(all([](unsigned char c) { return std::isdigit(c) != 0; }));
        if (name == "isalpha") return JinjaValue::from_bool(all([](unsigned char c) { return std::isalpha(c) != 0; }));
        if (name == "isalnum") return JinjaValue::from_bool(all([](unsigned char c) { return std::isalnum(c) != 0; }));
        if (name == "isspace") return JinjaValue::from_bool(all([](unsigned char c) { return py_space(c); }));
        bool has_lower = std::any_of(s.begin(), s.end(), [](char c) { return c >= 'a' && c <= 'z'; });
        bool has_upper = std::any_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
        if (name == "islower") return JinjaValue::from_bool(has_lower && !has_upper);
        return JinjaValue::from_bool(has_upper && !has_lower);
    });
}

JinjaValue tuple2(JinjaValue a, JinjaValue b) {
    return JinjaValue::from_list({std::move(a), std::move(b)}, true);
}

std::optional<JinjaValue> dict_method(const JinjaValue& self, const std::string& name) {
    if (name != "items" && name != "keys" && name != "values" && name != "get") return std::nullopt;
    JinjaValue bound = self;
    return JinjaValue::from_function("dict." + name, [bound, name](JinjaArgs& a) -> JinjaValue {
        Params p{a, name.c_str()};
        if (name == "get") {
            const JinjaValue& key = p.required(0, "key");
            if (const JinjaValue* v = bound.dict->find(key)) return *v;
            return p.value(1, "default", JinjaValue::none());
        }
        JinjaList out;
        for (const auto& [k, v] : bound.dict->items) {
            if (name == "items") {
                out.push_back(tuple2(k, v));
            } else {
                out.push_back(name == "keys" ? k : v);
            }
        }
        return JinjaValue::from_list(std::move(out));
    });
}

// An attribute path "a.b" (jinja2's make_attrgetter): items first, then
// attributes, part by part; digits index lists.
JinjaValue attribute_path(const JinjaValue& v, const std::string& path, const Limits& limits) {
    JinjaValue cur = v;
    size_t start = 0;
    for (;;) {
        size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        int64_t index = 0;
        const auto [end_digits, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
        JinjaValue key = !part.empty() && part[0] != '-' && ec == std::errc() && end_digits == part.data() + part.size()
                             ? JinjaValue::from_int(index)
                             : JinjaValue::from_string(part);
        cur = jinja_item(cur, key, limits);
        if (dot == std::string::npos) return cur;
        start = dot + 1;
    }
}

JinjaValue apply_filter_by_name(const std::string& name, const JinjaValue& v, const std::vector<JinjaValue>& extra,
                                const Limits& limits) {
    JinjaArgs a;
    a.positional = extra;
    return jinja_filter(name, v, a, limits);
}

bool apply_test_by_name(const std::string& name, const JinjaValue& v, const std::vector<JinjaValue>& extra,
                        const Limits& limits) {
    JinjaArgs a;
    a.positional = extra;
    return jinja_test(name, v, a, limits);
}

// select / reject / selectattr / rejectattr.
JinjaValue select_items(const JinjaValue& seq, JinjaArgs& a, bool by_attribute, bool keep, const Limits& limits) {
    size_t next = 0;
    std::string attr;
    if (by_attribute) {
        if (a.positional.empty()) fail("selectattr/rejectattr need an attribute name");
        attr = need_string(a.positional[0], "selectattr()");
        next = 1;
    }
    std::string test;
    std::vector<JinjaValue> extra;
    if (next < a.positional.size()) {
        test = need_string(a.positional[next], "select()");
        extra.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next + 1), a.positional.end());
        if (!jinja_has_test(test)) fail("unknown test " + py_quote(test));
    }
    JinjaList out;
    for (const auto& item : jinja_iterate(seq, limits)) {
        JinjaValue subject = by_attribute ? attribute_path(item, attr, limits) : item;
        bool pass = test.empty() ? jinja_truthy(subject) : apply_test_by_name(test, subject, extra, limits);
        if (pass == keep) out.push_back(item);
    }
    return JinjaValue::from_list(std::move(out));
}

std::string indent_text(const std::string& s, const JinjaValue& width, bool first, bool blank, const Limits& limits) {
    std::string pad;
    if (width.type == JinjaType::STRING) {
        pad = width.text();
    } else {
        int64_t w = width.type == JinjaType::INT ? width.integer : 4;
        if (w < 0) w = 0;
        check_bytes(static_cast<size_t>(w), limits);
        pad.assign(static_cast<size_t>(w), ' ');
    }
    std::string out;
    bool first_line = true;
    py_splitlines(s + "\n", [&](std::string_view line) {
        if (!first_line) {
            out += '\n';
            if (blank || !line.empty()) out += pad;
        }
        first_line = false;
        out += line;
        check_bytes(out.size(), limits);
    });
    if (first) out = pad + out;
    check_bytes(out.size(), limits);
    return out;
}

double py_round(double x, int64_t digits) {
    double scale = std::pow(10.0, static_cast<double>(digits));
    double y = std::nearbyint(x * scale) / scale;
    return std::isfinite(y) ? y : x;
}

JinjaValue to_int(const JinjaValue& v, const JinjaValue& fallback, int64_t base) {
    switch (v.type) {
    case JinjaType::BOOL:
        return JinjaValue::from_int(v.boolean);
    case JinjaType::INT:
        return v;
    case JinjaType::FLOAT:
        if (!std::isfinite(v.number) || std::fabs(v.number) > 9.2e18) return fallback;
        return JinjaValue::from_int(static_cast<int64_t>(v.number));
    case JinjaType::STRING: {
        std::string s = py_strip(v.text(), nullptr, true, true);
        s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
        if (s.empty()) return fallback;
        try {
            size_t used = 0;
            long long n = std::stoll(s, &used, static_cast<int>(base));
            if (used == s.size()) return JinjaValue::from_int(n);
            double d = std::stod(s, &used);
            if (used == s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
                return JinjaValue::from_int(static_cast<int64_t>(d));
        } catch (const std::exception&) {
        }
        return fallback;
    }
    default:
        return fallback;
    }
}

JinjaValue to_float(const JinjaValue& v, const JinjaValue& fallback) {
    switch (v.type) {
    case JinjaType::BOOL:
    case JinjaType::INT:
    case JinjaType::FLOAT:
        return JinjaValue::from_float(jinja_as_double(v));
    case JinjaType::STRING: {
        std::string s = py_strip(v.text(), nullptr, true, true);
        try {
            size_t used = 0;
            double d = std::stod(s, &used);
            if (used == s.size()) return JinjaValue::from_float(d);
        } catch (const std::exception&) {
        }
        return fallback;
    }
    default:
        return fallback;
    }
}

// The sort key of a value for sort/dictsort/unique: strings lower-cased
// unless case_sensitive.
JinjaValue sort_key(const JinjaValue& v, bool case_sensitive) {
    if (!case_sensitive && v.type == JinjaType::STRING) {
        work_charge_bytes(v.text().size());
        return JinjaValue::from_string(ascii_lower(v.text()));
    }
    return v;
}

const char* const FILTERS[] = {
    "abs",    "attr",       "capitalize", "count",   "d",      "default", "dictsort",  "e",          "escape", "first",
    "float",  "indent",     "int",        "items",   "join",   "last",    "length",    "list",       "lower",  "map",
    "reject", "rejectattr", "replace",    "reverse", "round",  "safe",    "select",    "selectattr", "sort",   "string",
    "sum",    "title",      "tojson",     "trim",    "unique", "upper",   "wordcount", "min",        "max"};

const char* const TESTS[] = {
    "boolean", "callable",  "defined", "divisibleby", "eq",     "equalto", "escaped",  "even",     "false",  "filter",
    "float",   "ge",        "gt",      "greaterthan", "in",     "integer", "iterable", "le",       "lower",  "lessthan",
    "lt",      "mapping",   "ne",      "none",        "number", "odd",     "sameas",   "sequence", "string", "test",
    "true",    "undefined", "upper",   "==",          "!=",     "<",       "<=",       ">",        ">="};

bool in_list(const char* const* begin, const char* const* end, std::string_view name) {
    return std::find_if(begin, end, [&](const char* n) { return name == n; }) != end;
}

}  // namespace

void jinja_undefined_error(const JinjaValue& value) {
    fail(value.text().empty() ? std::string("a value is undefined") : value.text());
}

std::string jinja_percent_format(const std::string& format, const JinjaValue& args, const Limits& limits) {
    JinjaList values = args.type == JinjaType::LIST && args.tuple ? *args.list : JinjaList{args};
    size_t next = 0;
    std::string out;
    for (size_t i = 0; i < format.size(); ++i) {
        if (format[i] != '%') {
            out += format[i];
            continue;
        }
        if (++i >= format.size()) fail("incomplete format");
        bool left = false, zero = false;
        for (; i < format.size() && (format[i] == '-' || format[i] == '0'); ++i)
            (format[i] == '-' ? left : zero) = true;
        size_t width = 0;
        for (; i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])); ++i)
            width = std::min<size_t>(width * 10 + static_cast<size_t>(format[i] - '0'), 100000);
        int precision = -1;
        if (i < format.size() && format[i] == '.') {
            precision = 0;
            for (++i; i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])); ++i)
                precision = std::min(precision * 10 + (format[i] - '0'), 100);
        }
        if (i >= format.size()) fail("incomplete format");
        char conv = format[i];
        if (conv == '%') {
            out += '%';
            continue;
        }
        if (next >= values.size()) fail("not enough arguments for format string");
        const JinjaValue& v = values[next++];
        std::string piece;
        char buf[512];
        switch (conv) {
        case 's':
            piece = jinja_str(v);
            break;
        case 'r':
            piece = jinja_repr(v);
            break;
        case 'd':
        case 'i':
            if (!v.is_number())
                fail(std::string("%") + conv + " format: a number is required, not " + jinja_type_name(v));
            piece = v.type == JinjaType::FLOAT ? std::to_string(static_cast<long long>(std::trunc(v.number)))
                                               : std::to_string(v.type == JinjaType::BOOL ? v.boolean : v.integer);
            break;
        case 'f':
        case 'F':
            std::snprintf(buf, sizeof buf, "%.*f", precision < 0 ? 6 : precision, jinja_as_double(v));
            piece = buf;
            break;
        case 'x':
            if (v.type != JinjaType::INT) fail("%x format: an integer is required");
            std::snprintf(buf, sizeof buf, "%llx",
                          v.integer < 0 ? 0 - static_cast<unsigned long long>(v.integer)
                                        : static_cast<unsigned long long>(v.integer));
            piece = v.integer < 0 ? "-" : "";
            piece += buf;
            break;
        default:
            fail(std::string("unsupported format character '") + conv + "'");
        }
        if (conv == 's' && precision >= 0)
            piece = piece.substr(
                0, utf8_offsets(piece)[std::min<size_t>(static_cast<size_t>(precision), utf8_length(piece))]);
        size_t len = utf8_length(piece);
        if (len < width) {
            std::string pad(width - len, zero && !left && conv != 's' && conv != 'r' ? '0' : ' ');
            piece = left ? piece + pad : pad + piece;
        }
        out += piece;
        check_bytes(out.size(), limits);
    }
    if (next < values.size()) fail("not all arguments converted during string formatting");
    return out;
}

bool jinja_has_filter(std::string_view name) {
    return in_list(std::begin(FILTERS), std::end(FILTERS), name);
}
bool jinja_has_test(std::string_view name) {
    return in_list(std::begin(TESTS), std::end(TESTS), name);
}

JinjaList jinja_iterate(const JinjaValue& value, const Limits& limits) {
    switch (value.type) {
    case JinjaType::UNDEFINED:
        return {};
    case JinjaType::LIST:
        work_charge_bytes(value.list->size() * sizeof(JinjaValue));
        return *value.list;
    case JinjaType::DICT: {
        work_charge_bytes(value.dict->items.size() * sizeof(JinjaValue));
        JinjaList keys;
        for (const auto& kv : value.dict->items) keys.push_back(kv.first);
        return keys;
    }
    case JinjaType::STRING: {
        JinjaList chars;
        check_items(utf8_length(value.text()), limits);
        work_charge_bytes(utf8_length(value.text()) * (sizeof(JinjaValue) + 64));
        std::vector<size_t> off = utf8_offsets(value.text());
        for (size_t i = 0; i + 1 < off.size(); ++i)
            chars.push_back(JinjaValue::from_string(value.text().substr(off[i], off[i + 1] - off[i])));
        return chars;
    }
    default:
        fail(py_quote(jinja_type_name(value)) + " object is not iterable");
    }
}

size_t jinja_length(const JinjaValue& value) {
    switch (value.type) {
    case JinjaType::UNDEFINED:
        return 0;
    case JinjaType::STRING:
        return utf8_length(value.text());
    case JinjaType::LIST:
        return value.list->size();
    case JinjaType::DICT:
        return value.dict->items.size();
    default:
        fail("object of type " + py_quote(jinja_type_name(value)) + " has no len()");
    }
}

JinjaValue jinja_attribute(const JinjaValue& value, const std::string& name, const Limits& limits) {
    switch (value.type) {
    case JinjaType::UNDEFINED:
        jinja_undefined_error(value);
    case JinjaType::DICT: {
        if (auto m = dict_method(value, name)) return *m;
        if (const JinjaValue* v = value.dict->find(name)) return *v;
        return JinjaValue::undefined("'dict object' has no attribute " + py_quote(name));
    }
    case JinjaType::NAMESPACE: {
        if (const JinjaValue* v = value.dict->find(name)) return *v;
        return JinjaValue::undefined("'Namespace' object has no attribute " + py_quote(name));
    }
    case JinjaType::STRING:
        if (auto m = string_method(value, name, limits)) return *m;
        break;
    default:
        break;
    }
    return JinjaValue::undefined(py_quote(jinja_str(value).substr(0, 40)) + " has no attribute " + py_quote(name));
}

JinjaValue jinja_item(const JinjaValue& value, const JinjaValue& key, const Limits& limits) {
    switch (value.type) {
    case JinjaType::UNDEFINED:
        jinja_undefined_error(value);
    case JinjaType::DICT:
        if (key.type == JinjaType::STRING) {
            if (const JinjaValue* v = value.dict->find(key.text())) return *v;
            if (auto m = dict_method(value, key.text())) return *m;
            return JinjaValue::undefined("'dict object' has no attribute " + py_quote(key.text()));
        }
        if ((key.type == JinjaType::LIST && key.tuple) || key.is_number() || key.type == JinjaType::NONE) {
            if (const JinjaValue* v = value.dict->find(key)) return *v;
        }
        return JinjaValue::undefined("'dict object' has no element " + jinja_repr(key));
    case JinjaType::LIST:
    case JinjaType::STRING:
        if (key.type == JinjaType::INT || key.type == JinjaType::BOOL) {
            int64_t i = key.type == JinjaType::BOOL ? key.boolean : key.integer;
            bool ok;
            if (value.type == JinjaType::LIST) {
                i = checked_index(i, value.list->size(), &ok);
                if (ok) return (*value.list)[static_cast<size_t>(i)];
            } else {
                std::vector<size_t> off = utf8_offsets(value.text());
                i = checked_index(i, off.size() - 1, &ok);
                if (ok) {
                    size_t k = static_cast<size_t>(i);
                    return JinjaValue::from_string(value.text().substr(off[k], off[k + 1] - off[k]));
                }
            }
            return JinjaValue::undefined(std::string(jinja_type_name(value)) + " index " + std::to_string(i) +
                                         " out of range");
        }
        if (key.type == JinjaType::STRING) return jinja_attribute(value, key.text(), limits);
        return JinjaValue::undefined(std::string(jinja_type_name(value)) + " has no element " + jinja_repr(key));
    case JinjaType::NAMESPACE:
        if (key.type == JinjaType::STRING) return jinja_attribute(value, key.text(), limits);
        break;
    default:
        break;
    }
    return JinjaValue::undefined(py_quote(jinja_str(value).substr(0, 40)) + " has no element " + jinja_repr(key));
}

JinjaValue jinja_slice(const JinjaValue& value, const JinjaValue& start, const JinjaValue& stop,
                       const JinjaValue& step) {
    if (value.is_undefined()) jinja_undefined_error(value);
    if (value.type != JinjaType::LIST && value.type != JinjaType::STRING)
        fail(py_quote(jinja_type_name(value)) + " object is not subscriptable");
    auto bound = [](const JinjaValue& b, const char* what) -> std::optional<int64_t> {
        if (b.is_undefined() || b.type == JinjaType::NONE) return std::nullopt;
        if (b.type == JinjaType::BOOL) return b.boolean;
        if (b.type != JinjaType::INT) fail(std::string("slice ") + what + " must be an integer or none");
        return b.integer;
    };
    int64_t st = bound(step, "step").value_or(1);
    if (st == 0) fail("slice step cannot be zero");
    std::vector<size_t> off;
    int64_t n;
    if (value.type == JinjaType::STRING) {
        off = utf8_offsets(value.text());
        n = static_cast<int64_t>(off.size()) - 1;
    } else {
        n = static_cast<int64_t>(value.list->size());
    }
    auto clamp = [&](std::optional<int64_t> b, int64_t fallback) {
        if (!b) return fallback;
        int64_t i = *b < 0 ? *b + n : *b;
        if (st > 0) return std::clamp<int64_t>(i, 0, n);
        return std::clamp<int64_t>(i, -1, n - 1);
    };
    int64_t b = clamp(bound(start, "start"), st > 0 ? 0 : n - 1);
    int64_t e = clamp(bound(stop, "stop"), st > 0 ? n : -1);
    std::vector<int64_t> picks;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(i);
    if (value.type == JinjaType::STRING) {
        std::string out;
        for (int64_t i : picks)
            out.append(value.text(), off[static_cast<size_t>(i)],
                       off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]);
        return JinjaValue::from_string(std::move(out));
    }
    JinjaList out;
    for (int64_t i : picks) out.push_back((*value.list)[static_cast<size_t>(i)]);
    return JinjaValue::from_list(std::move(out), value.tuple);
}

JinjaValue jinja_filter(const std::string& name, const JinjaValue& v, JinjaArgs& a, const Limits& limits) {
    Params p{a, name.c_str()};
    if (name == "default" || name == "d") {
        bool boolean = p.flag(1, "boolean", false);
        if (v.is_undefined() || (boolean && !jinja_truthy(v)))
            return p.value(0, "default_value", JinjaValue::from_string(""));
        return v;
    }
    if (name == "length" || name == "count") return JinjaValue::from_int(static_cast<int64_t>(jinja_length(v)));
    if (name == "string") return JinjaValue::from_string(jinja_str(v));
    if (name == "safe") return v;
    if (name == "escape" || name == "e") return JinjaValue::from_string(html_escape(jinja_str(v)));
    if (name == "trim") {
        std::string chars = p.string(0, "chars", "");
        const JinjaValue* c = p.get(0, "chars");
        bool has = c && c->type != JinjaType::NONE;
        return JinjaValue::from_string(py_strip(jinja_str(v), has ? &chars : nullptr, true, true));
    }
    if (name == "upper") return JinjaValue::from_string(ascii_upper(jinja_str(v)));
    if (name == "lower") return JinjaValue::from_string(ascii_lower(jinja_str(v)));
    if (name == "capitalize") return JinjaValue::from_string(py_capitalize(jinja_str(v)));
    if (name == "title") return JinjaValue::from_string(jinja_title(jinja_str(v)));
    if (name == "replace") {
        return JinjaValue::from_string(py_replace(jinja_str(v), jinja_str(p.required(0, "old")),
                                                  jinja_str(p.required(1, "new")), p.integer(2, "count", -1), limits));
    }
    if (name == "indent") {
        return JinjaValue::from_string(indent_text(jinja_str(v), p.value(0, "width", JinjaValue::from_int(4)),
                                                   p.flag(1, "first", false), p.flag(2, "blank", false), limits));
    }
    if (name == "wordcount") {
        int64_t n = 0;
        bool in_word = false;
        for (char c : jinja_str(v)) {
            bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (static_cast<unsigned char>(c) & 0x80);
            if (w && !in_word) ++n;
            in_word = w;
        }
        return JinjaValue::from_int(n);
    }
    if (name == "tojson") {
        // Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
        JinjaJsonStyle style;
        const JinjaValue* indent = p.get(1, "indent");
        if (indent && indent->type != JinjaType::NONE) {
            if (indent->type != JinjaType::INT || indent->integer < 0 || indent->integer > 64)
                fail("tojson: indent must be an integer from 0 to 64");
            style.indent = static_cast<int>(indent->integer);
        }
        style.ensure_ascii = p.flag(0, "ensure_ascii", false);
        style.sort_keys = p.flag(3, "sort_keys", false);
        const JinjaValue* sep = p.get(2, "separators");
        if (sep && sep->type != JinjaType::NONE) {
            if (sep->type != JinjaType::LIST || sep->list->size() != 2 || (*sep->list)[0].type != JinjaType::STRING ||
                (*sep->list)[1].type != JinjaType::STRING) {
                fail("tojson: separators must be a pair of strings");
            }
            style.separators.emplace((*sep->list)[0].text(), (*sep->list)[1].text());
        }
        std::string out = jinja_to_json(v, style);
        check_bytes(out.size(), limits);
        return JinjaValue::from_string(std::move(out));
    }
    if (name == "int") return to_int(v, p.value(0, "default", JinjaValue::from_int(0)), p.integer(1, "base", 10));
    if (name == "float") return to_float(v, p.value(0, "default", JinjaValue::from_float(0.0)));
    if (name == "abs") {
        if (v.type == JinjaType::INT || v.type == JinjaType::BOOL) {
            int64_t i = v.type == JinjaType::BOOL ? v.boolean : v.integer;
            if (i == INT64_MIN) fail("integer overflow in abs");
            return JinjaValue::from_int(i < 0 ? -i : i);
        }
        return JinjaValue::from_float(std::fabs(jinja_as_double(v)));
    }
    if (name == "round") {
        int64_t precision = p.integer(0, "precision", 0);
        std::string method = p.string(1, "method", "common");
        double x = jinja_as_double(v);
        double scale = std::pow(10.0, static_cast<double>(precision));
        double r = method == "common"  ? py_round(x, precision)
                   : method == "ceil"  ? std::ceil(x * scale) / scale
                   : method == "floor" ? std::floor(x * scale) / scale
                                       : (fail("round: method must be common, ceil or floor"), 0.0);
        return JinjaValue::from_float(r);
    }
    if (name == "items") {
        if (v.is_undefined()) return JinjaValue::from_list({});
        if (v.type != JinjaType::DICT) fail("items: can only get item pairs from a mapping");
        JinjaList out;
        for (const auto& [k, val] : v.dict->items) out.push_back(tuple2(k, val));
        return JinjaValue::from_list(std::move(out));
    }
    if (name == "list") return JinjaValue::from_list(jinja_iterate(v, limits));
    if (name == "first" || name == "last") {
        JinjaList items = jinja_iterate(v, limits);
        if (items.empty()) return JinjaValue::undefined("No first item, sequence was empty.");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "reverse") {
        if (v.type == JinjaType::STRING) return jinja_slice(v, JinjaValue(), JinjaValue(), JinjaValue::from_int(-1));
        JinjaList items = jinja_iterate(v, limits);
        std::reverse(items.begin(), items.end());
        return JinjaValue::from_list(std::move(items));
    }
    if (name == "join") {
        std::string sep = jinja_str(p.value(0, "d", JinjaValue::from_string("")));
        const JinjaValue* attr = p.get(1, "attribute");
        std::string out;
        bool first = true;
        for (const auto& item : jinja_iterate(v, limits)) {
            if (!first) out += sep;
            first = false;
            out += jinja_str(attr && attr->type != JinjaType::NONE ? attribute_path(item, jinja_str(*attr), limits)
                                                                   : item);
            check_bytes(out.size(), limits);
        }
        return JinjaValue::from_string(std::move(out));
    }
    if (name == "map") {
        JinjaList out;
        const JinjaValue* attr = nullptr;
        for (const auto& [k, val] : a.keyword) {
            if (k == "attribute") attr = &val;
        }
        if (attr) {
            const JinjaValue* def = nullptr;
            for (const auto& [k, val] : a.keyword) {
                if (k == "default") def = &val;
            }
            for (const auto& item : jinja_iterate(v, limits)) {
                JinjaValue r = attribute_path(item, jinja_str(*attr), limits);
                out.push_back(r.is_undefined() && def ? *def : r);
            }
            return JinjaValue::from_list(std::move(out));
        }
        if (a.positional.empty()) fail("map: needs a filter name or attribute=");
        std::string filter = need_string(a.positional[0], "map()");
        if (!jinja_has_filter(filter)) fail("unknown filter " + py_quote(filter));
        std::vector<JinjaValue> extra(a.positional.begin() + 1, a.positional.end());
        for (const auto& item : jinja_iterate(v, limits))
            out.push_back(apply_filter_by_name(filter, item, extra, limits));
        return JinjaValue::from_list(std::move(out));
    }
    if (name == "select" || name == "reject") return select_items(v, a, false, name == "select", limits);
    if (name == "selectattr" || name == "rejectattr") return select_items(v, a, true, name == "selectattr", limits);
    if (name == "attr") return jinja_attribute(v, need_string(p.required(0, "name"), "attr()"), limits);
    if (name == "unique" || name == "sort" || name == "min" || name == "max") {
        bool case_sensitive = p.flag(name == "sort" ? 1 : 0, "case_sensitive", false);
        const JinjaValue* attr = p.get(name == "sort" ? 2 : 1, "attribute");
        auto key = [&](const JinjaValue& item) {
            return sort_key(
                attr && attr->type != JinjaType::NONE ? attribute_path(item, jinja_str(*attr), limits) : item,
                case_sensitive);
        };
        JinjaList items = jinja_iterate(v, limits);
        if (name == "unique") {
            JinjaList out, seen;
            for (const auto& item : items) {
                JinjaValue k = key(item);
                if (std::none_of(seen.begin(), seen.end(), [&](const JinjaValue& s) { return jinja_equal(s, k); })) {
                    seen.push_back(k);
                    out.push_back(item);
                }
            }
            return JinjaValue::from_list(std::move(out));
        }
        if (name == "sort") {
            bool reverse = p.flag(0, "reverse", false);
            std::stable_sort(items.begin(), items.end(), [&](const JinjaValue& x, const JinjaValue& y) {
                return reverse ? jinja_compare(key(y), key(x)) < 0 : jinja_compare(key(x), key(y)) < 0;
            });
            return JinjaValue::from_list(std::move(items));
        }
        if (items.empty()) return JinjaValue::undefined("No aggregated item, sequence was empty.");
        size_t best = 0;
        for (size_t i = 1; i < items.size(); ++i) {
            int c = jinja_compare(key(items[i]), key(items[best]));
            if (name == "min" ? c < 0 : c > 0) best = i;
        }
        return items[best];
    }
    if (name == "dictsort") {
        if (v.type != JinjaType::DICT) fail("dictsort: expects a mapping, got " + std::string(jinja_type_name(v)));
        bool case_sensitive = p.flag(0, "case_sensitive", false);
        std::string by = p.string(1, "by", "key");
        bool reverse = p.flag(2, "reverse", false);
        if (by != "key" && by != "value") fail("dictsort: by must be 'key' or 'value'");
        JinjaList items;
        for (const auto& [k, val] : v.dict->items) items.push_back(tuple2(k, val));
        size_t idx = by == "key" ? 0 : 1;
        std::stable_sort(items.begin(), items.end(), [&](const JinjaValue& x, const JinjaValue& y) {
            JinjaValue kx = sort_key((*x.list)[idx], case_sensitive), ky = sort_key((*y.list)[idx], case_sensitive);
            return reverse ? jinja_compare(ky, kx) < 0 : jinja_compare(kx, ky) < 0;
        });
        return JinjaValue::from_list(std::move(items));
    }
    if (name == "sum") {
        const JinjaValue* attr = p.get(0, "attribute");
        JinjaValue total = p.value(1, "start", JinjaValue::from_int(0));
        for (const auto& item : jinja_iterate(v, limits)) {
            JinjaValue x =
                attr && attr->type != JinjaType::NONE ? attribute_path(item, jinja_str(*attr), limits) : item;
            if (!x.is_number() || !total.is_number())
                fail("sum: unsupported operand types " + std::string(jinja_type_name(total)) + " and " +
                     jinja_type_name(x));
            if (x.type == JinjaType::FLOAT || total.type == JinjaType::FLOAT) {
                total = JinjaValue::from_float(jinja_as_double(total) + jinja_as_double(x));
            } else {
                int64_t r;
                if (__builtin_add_overflow(static_cast<int64_t>(jinja_as_double(total)),
                                           static_cast<int64_t>(jinja_as_double(x)), &r))
                    fail("integer overflow in sum");
                total = JinjaValue::from_int(total.type == JinjaType::BOOL ? total.boolean + x.integer : r);
            }
        }
        return total;
    }
    fail("unknown filter " + py_quote(name));
}

bool jinja_test(const std::string& name, const JinjaValue& v, JinjaArgs& a, const Limits& limits) {
    Params p{a, name.c_str()};
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.type == JinjaType::NONE;
    if (name == "string") return v.type == JinjaType::STRING;
    if (name == "number") return v.is_number();
    if (name == "integer") return v.type == JinjaType::INT;
    if (name == "float") return v.type == JinjaType::FLOAT;
    if (name == "boolean") return v.type == JinjaType::BOOL;
    if (name == "true") return v.type == JinjaType::BOOL && v.boolean;
    if (name == "false") return v.type == JinjaType::BOOL && !v.boolean;
    if (name == "mapping") return v.type == JinjaType::DICT;
    if (name == "iterable")
        return v.type == JinjaType::LIST || v.type == JinjaType::DICT || v.type == JinjaType::STRING ||
               v.is_undefined();
    if (name == "sequence")
        return v.type == JinjaType::LIST || v.type == JinjaType::DICT || v.type == JinjaType::STRING ||
               v.is_undefined();
    if (name == "callable") return v.type == JinjaType::FUNCTION;
    if (name == "escaped") return false;
    if (name == "lower")
        return v.type == JinjaType::STRING && ascii_lower(v.text()) == v.text() && ascii_upper(v.text()) != v.text();
    if (name == "upper")
        return v.type == JinjaType::STRING && ascii_upper(v.text()) == v.text() && ascii_lower(v.text()) != v.text();
    if (name == "filter") return v.type == JinjaType::STRING && jinja_has_filter(v.text());
    if (name == "test") return v.type == JinjaType::STRING && jinja_has_test(v.text());
    if (name == "odd" || name == "even" || name == "divisibleby") {
        if (v.type != JinjaType::INT && v.type != JinjaType::BOOL)
            fail(name + " test expects an integer, got " + jinja_type_name(v));
        int64_t i = v.type == JinjaType::BOOL ? v.boolean : v.integer;
        if (name == "divisibleby") {
            int64_t d = p.integer(0, "num", 0);
            if (d == 0) fail("divisibleby 0");
            return i % d == 0;
        }
        return (i % 2 != 0) == (name == "odd");
    }
    const JinjaValue& other = p.required(0, "other");
    if (name == "eq" || name == "equalto" || name == "==") return jinja_equal(v, other);
    if (name == "ne" || name == "!=") return !jinja_equal(v, other);
    if (name == "sameas") {
        if (v.type != other.type) return false;
        if (v.type == JinjaType::NONE || v.type == JinjaType::UNDEFINED) return true;
        if (v.type == JinjaType::BOOL) return v.boolean == other.boolean;
        return v.type == JinjaType::LIST                                       ? v.list == other.list
               : (v.type == JinjaType::DICT || v.type == JinjaType::NAMESPACE) ? v.dict == other.dict
                                                                               : jinja_equal(v, other);
    }
    if (name == "lt" || name == "<" || name == "lessthan") return jinja_compare(v, other) < 0;
    if (name == "le" || name == "<=") return jinja_compare(v, other) <= 0;
    if (name == "gt" || name == ">" || name == "greaterthan") return jinja_compare(v, other) > 0;
    if (name == "ge" || name == ">=") return jinja_compare(v, other) >= 0;
    if (name == "in") {
        if (other.type == JinjaType::STRING)
            return v.type == JinjaType::STRING && other.text().find(v.text()) != std::string::npos;
        if (other.type == JinjaType::DICT) return other.dict->find(v) != nullptr;
        for (const auto& item : jinja_iterate(other, limits)) {
            if (jinja_equal(item, v)) return true;
        }
        return false;
    }
    fail("unknown test " + py_quote(name));
}
