// JSON Schema to GBNF (see json_schema.h for the subset and its choices):
// GbnfBuilder's rule table, the shared JSON rules, the schema walk
// (SchemaConverter) and the pattern translator (PatternConverter). Writes
// text only; the grammar engine parses it.
#include "chat/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>

#include "base/errors.h"
#include "base/utf8.h"

using ojson = nlohmann::ordered_json;

namespace {

constexpr int MAX_DEPTH = 64;                  // schema nesting, and pattern group nesting
constexpr int MAX_REPEAT = 1000;               // the grammar parser's repetition limit
constexpr int MAX_WS = 20;                     // whitespace characters between two tokens
constexpr int MAX_INT_DIGITS = 16;             // digits of an integer (and of a number's integer part)
constexpr int MAX_FRACTION_DIGITS = 16;        // digits after a number's '.'
constexpr int MAX_EXPONENT_DIGITS = 2;         // digits of a number's exponent
constexpr int MAX_EXTRA_KEY_CHARS = 64;        // characters of a property name additionalProperties admits
constexpr int64_t MAX_INT = 9999999999999999;  // MAX_INT_DIGITS nines

constexpr uint32_t MAX_CODE_POINT = 0x10FFFF;

using Keywords = std::set<std::string, std::less<>>;

const Keywords ANNOTATIONS = {"title",   "description", "$comment",   "examples", "default",
                              "$schema", "$id",         "deprecated", "readOnly", "writeOnly"};

const Keywords OBJECT_KEYWORDS = {"properties", "required", "additionalProperties"};
const Keywords ARRAY_KEYWORDS = {"items", "prefixItems", "minItems", "maxItems"};
const Keywords STRING_KEYWORDS = {"minLength", "maxLength", "pattern", "format"};
const Keywords INTEGER_KEYWORDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

// Every keyword the walk reads: the types' own and the general ones.
const Keywords KEYWORDS = [] {
    Keywords all = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions"};
    for (const Keywords* k : {&OBJECT_KEYWORDS, &ARRAY_KEYWORDS, &STRING_KEYWORDS, &INTEGER_KEYWORDS}) {
        all.insert(k->begin(), k->end());
    }
    return all;
}();

const std::vector<std::string> TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"};

// The shared rules: name, body, the shared rules the body names.
struct SharedRule {
    std::string name, body;
    std::vector<std::string> uses;
};
const std::vector<SharedRule> SHARED = {
    {"ws", "[ \\t\\n\\r]{0," + std::to_string(MAX_WS) + "}", {}},
    // Any escape but \u of a surrogate (D800-DFFF).
    {"json-char",
     "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] "
     "[0-9a-fA-F]{2} ) )",
     {}},
    {"json-string", "\"\\\"\" json-char* \"\\\"\"", {"json-char"}},
    {"json-integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0," + std::to_string(MAX_INT_DIGITS - 1) + "} )", {}},
    {"json-number",
     "json-integer ( \".\" [0-9]{1," + std::to_string(MAX_FRACTION_DIGITS) + "} )? ( [eE] [-+]? [0-9]{1," +
         std::to_string(MAX_EXPONENT_DIGITS) + "} )?",
     {"json-integer"}},
    {"json-boolean", "\"true\" | \"false\"", {}},
    {"json-null", "\"null\"", {}},
    {"json-value",
     "json-object | json-array | json-string | json-number | json-boolean | json-null",
     {"json-object", "json-array", "json-string", "json-number", "json-boolean", "json-null"}},
    {"json-object",
     "\"{\" ws ( json-string ws \":\" ws json-value ws ( \",\" ws json-string ws \":\" ws json-value ws )* )? "
     "\"}\"",
     {"ws", "json-string", "json-value"}},
    {"json-array", "\"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"", {"ws", "json-value"}},
};

// Rule names: letters, digits and '-'.
std::string sanitize_name(std::string_view name) {
    std::string out;
    for (char c : name) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (ok) {
            out += c;
        } else if (!out.empty() && out.back() != '-') {
            out += '-';
        }
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    if (out.size() > 48) out.resize(48);
    return out.empty() ? std::string("rule") : out;
}

std::string join_name(std::string_view a, std::string_view b) {
    if (a.empty()) return std::string(b);
    std::string out(a);
    out += '-';
    out += b;
    return out;
}

// JSON pointer token (RFC 6901).
std::string pointer_token(std::string_view key) {
    std::string out;
    for (char c : key) {
        if (c == '~') {
            out += "~0";
        } else if (c == '/') {
            out += "~1";
        } else {
            out += c;
        }
    }
    return out;
}

std::string hex(uint32_t v, int digits) {
    static const char* D = "0123456789ABCDEF";
    std::string out(digits, '0');
    for (int i = digits - 1; i >= 0; --i, v >>= 4) out[i] = D[v & 15];
    return out;
}

// x{lo,hi} in GBNF (hi < 0: unbounded; "" for x{0}); `x` must be one element.
std::string repeat(const std::string& x, int lo, int hi) {
    if (hi == 0) return "";
    if (lo == 0 && hi < 0) return x + "*";
    if (lo == 1 && hi < 0) return x + "+";
    if (lo == 0 && hi == 1) return x + "?";
    if (lo == 1 && hi == 1) return x;
    if (hi < 0) return x + "{" + std::to_string(lo) + ",}";
    if (lo == hi) return x + "{" + std::to_string(lo) + "}";
    return x + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

std::string group(const std::string& x) {
    return "( " + x + " )";
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
        if (i) out += sep;
        out += parts[i];
    }
    return out;
}

// A sequence of the non-empty parts.
std::string seq(std::initializer_list<std::string> parts) {
    std::vector<std::string> kept;
    for (const std::string& p : parts) {
        if (!p.empty()) kept.push_back(p);
    }
    return join(kept, " ");
}

// The JSON text of a string without its quotes ("a\"b" -> a\"b).
std::string json_escaped(std::string_view text) {
    std::string quoted = ojson(std::string(text)).dump();
    return quoted.substr(1, quoted.size() - 2);
}

std::string json_type_name(const ojson& v) {
    return std::string(v.type_name());
}

// Code points as sorted, disjoint, inclusive ranges.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalize(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (auto [lo, hi] : r) {
        if (!out.empty() && lo <= out.back().second + 1) {
            out.back().second = std::max(out.back().second, hi);
        } else {
            out.push_back({lo, hi});
        }
    }
    return out;
}

Ranges complement(const Ranges& r) {
    Ranges out;
    uint32_t next = 0;
    for (auto [lo, hi] : r) {
        if (lo > next) out.push_back({next, lo - 1});
        next = hi + 1;
    }
    if (next <= MAX_CODE_POINT) out.push_back({next, MAX_CODE_POINT});
    return out;
}

Ranges intersect(const Ranges& a, const Ranges& b) {
    Ranges out;
    for (auto [alo, ahi] : a) {
        for (auto [blo, bhi] : b) {
            uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
            if (lo <= hi) out.push_back({lo, hi});
        }
    }
    return normalize(out);
}

// One code point inside a GBNF character class.
std::string class_char(uint32_t c) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (plain) return std::string(1, static_cast<char>(c));
    if (c < 0x80) return "\\x" + hex(c, 2);
    if (c <= 0xFFFF) return "\\u" + hex(c, 4);
    return "\\U" + hex(c, 8);
}

// The GBNF matching the JSON-string encodings of the characters in `set`
// (one encoding each: ", \ and control characters escaped, the rest as
// themselves). "" when the set is empty.
std::string json_chars_gbnf(const Ranges& set) {
    const Ranges raw_allowed = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, MAX_CODE_POINT}};
    Ranges raw = intersect(set, raw_allowed);
    std::vector<std::string> alts;
    if (raw.size() == 1 && raw[0].first == raw[0].second) {
        std::string one;
        utf8_append(one, raw[0].first);
        alts.push_back(gbnf_literal(one));
    } else if (!raw.empty()) {
        std::string cls = "[";
        for (auto [lo, hi] : raw) {
            cls += class_char(lo);
            if (hi > lo) cls += "-" + class_char(hi);
        }
        alts.push_back(cls + "]");
    }
    for (auto [lo, hi] : intersect(set, {{0, 0x1F}, {0x22, 0x22}, {0x5C, 0x5C}})) {
        for (uint32_t c = lo; c <= hi; ++c) alts.push_back(gbnf_literal(json_escaped(std::string(1, char(c)))));
    }
    if (alts.size() > 1) return group(join(alts, " | "));
    return alts.empty() ? std::string() : alts[0];
}

// ---------------------------------------------------------------------------
// Integer ranges as digit patterns.

// Same-length decimal strings lo..hi (lo <= hi), digit by digit.
std::string digits_between(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return "";
    size_t n = lo.size();
    auto rest = [&](const std::string& s) { return s.substr(1); };
    auto tail = [&](const std::string& head, const std::string& more) {
        return more.empty() ? head : head + " " + more;
    };
    if (lo[0] == hi[0]) return tail(gbnf_literal(std::string(1, lo[0])), digits_between(rest(lo), rest(hi)));
    std::string any_tail = n > 1 ? repeat("[0-9]", static_cast<int>(n - 1), static_cast<int>(n - 1)) : "";
    bool lo_min = rest(lo) == std::string(n - 1, '0');
    bool hi_max = rest(hi) == std::string(n - 1, '9');
    std::vector<std::string> alts;
    char first = lo[0], last = hi[0];
    if (!lo_min) {
        alts.push_back(tail(gbnf_literal(std::string(1, lo[0])), digits_between(rest(lo), std::string(n - 1, '9'))));
        ++first;
    }
    if (!hi_max) --last;
    if (first <= last) {
        std::string cls = first == last ? gbnf_literal(std::string(1, first))
                                        : "[" + std::string(1, first) + "-" + std::string(1, last) + "]";
        alts.push_back(tail(cls, any_tail));
    }
    if (!hi_max) {
        alts.push_back(tail(gbnf_literal(std::string(1, hi[0])), digits_between(std::string(n - 1, '0'), rest(hi))));
    }
    return alts.size() == 1 ? alts[0] : group(join(alts, " | "));
}

// Non-negative integers lo..hi without leading zeros.
std::string naturals_between(int64_t lo, int64_t hi) {
    std::vector<std::string> alts;
    int64_t start = 1;
    for (int d = 1; d <= MAX_INT_DIGITS; ++d, start *= 10) {
        int64_t first = d == 1 ? 0 : start, last = start * 10 - 1;
        int64_t a = std::max(lo, first), b = std::min(hi, last);
        if (a > b) continue;
        alts.push_back(digits_between(std::to_string(a), std::to_string(b)));
    }
    return alts.size() == 1 ? alts[0] : group(join(alts, " | "));
}

std::string integers_between(int64_t lo, int64_t hi) {
    std::vector<std::string> alts;
    if (lo < 0) alts.push_back("\"-\" " + naturals_between(std::max<int64_t>(1, -hi), -lo));
    if (hi >= 0) alts.push_back(naturals_between(std::max<int64_t>(0, lo), hi));
    return alts.size() == 1 ? alts[0] : group(join(alts, " | "));
}

// ---------------------------------------------------------------------------
// Patterns.

// A set of characters as two engines may read it: `sure` holds what both
// ECMA-262 and Python's re match, `maybe` what either might. Output uses
// `sure`; a negation swaps them (and complements).
struct CharSet {
    Ranges sure, maybe;
};

CharSet char_set(Ranges r) {
    r = normalize(std::move(r));
    return {r, r};
}

CharSet char_set(Ranges sure, Ranges extra_maybe) {
    Ranges maybe = sure;
    maybe.insert(maybe.end(), extra_maybe.begin(), extra_maybe.end());
    return {normalize(std::move(sure)), normalize(std::move(maybe))};
}

CharSet negate(const CharSet& s) {
    return {complement(s.maybe), complement(s.sure)};
}

void add_to(CharSet& into, const CharSet& s) {
    into.sure.insert(into.sure.end(), s.sure.begin(), s.sure.end());
    into.maybe.insert(into.maybe.end(), s.maybe.begin(), s.maybe.end());
    into.sure = normalize(into.sure);
    into.maybe = normalize(into.maybe);
}

const Ranges NON_ASCII = {{0x80, MAX_CODE_POINT}};

// \d, \w, \s: ASCII digits and word characters (Python's re also matches
// other scripts' ones), the spaces both engines agree on (each adds a few).
CharSet class_digit() {
    return char_set({{'0', '9'}}, NON_ASCII);
}
CharSet class_word() {
    return char_set({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}, NON_ASCII);
}
CharSet class_space() {
    return char_set({{'\t', '\r'},
                     {' ', ' '},
                     {0xA0, 0xA0},
                     {0x1680, 0x1680},
                     {0x2000, 0x200A},
                     {0x2028, 0x2029},
                     {0x202F, 0x202F},
                     {0x205F, 0x205F},
                     {0x3000, 0x3000}},
                    {{0x1C, 0x1F}, {0x85, 0x85}, {0xFEFF, 0xFEFF}});
}

class PatternConverter {
public:
    PatternConverter(std::string_view pattern, std::string context) : p_(pattern), context_(std::move(context)) {}

    // The GBNF of the JSON-encoded strings the pattern finds a match in.
    std::string convert() {
        std::vector<std::string> alts;
        do {
            bool start = eat('^');
            std::string body = sequence(0, true);
            bool end = false;
            if (pos_ < p_.size() && p_[pos_] == '$') {
                ++pos_;
                end = true;
                if (pos_ < p_.size() && p_[pos_] != '|') fail("'$' is supported only at the end of the pattern");
            }
            // An empty body unanchored: any string (one star, not two).
            std::string any = body.empty() && !start && !end ? "" : "json-char*";
            std::string whole = seq({start ? "" : "json-char*", body, end ? "" : any});
            alts.push_back(whole.empty() ? "\"\"" : whole);
        } while (eat('|'));
        if (pos_ < p_.size()) fail("unexpected '" + std::string(1, p_[pos_]) + "'");
        return alts.size() == 1 ? alts[0] : group(join(alts, " | "));
    }

private:
    std::string_view p_;
    std::string context_;
    size_t pos_ = 0;
    // Whether what the last atom / quantified / sequence / alternatives call
    // parsed can match the empty string: the grammar engine refuses to repeat
    // such an item (its expansion would loop), so a pattern that does is refused.
    bool nullable_ = false;

    [[noreturn]] void fail(const std::string& what) const {
        throw MoeError(context_ + ": pattern at offset " + std::to_string(pos_) + ": " + what);
    }

    bool eat(char c) {
        if (pos_ < p_.size() && p_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }

    uint32_t next_code_point() {
        const Utf8Char c = utf8_decode(p_, pos_);
        if (c.status != Utf8Status::VALID) fail("invalid UTF-8");
        pos_ += c.len;
        return c.cp;
    }

    // Alternatives up to ')' or the end (top level: also up to a final '$').
    std::string alternatives(int depth) {
        std::vector<std::string> alts;
        bool any_nullable = false;
        do {
            std::string s = sequence(depth, false);
            any_nullable = any_nullable || nullable_;
            alts.push_back(s.empty() ? "\"\"" : s);
        } while (eat('|'));
        nullable_ = any_nullable;
        return alts.size() == 1 ? alts[0] : group(join(alts, " | "));
    }

    std::string sequence(int depth, bool top) {
        std::vector<std::string> items;
        bool all_nullable = true;
        while (pos_ < p_.size()) {
            char c = p_[pos_];
            if (c == '|' || c == ')') break;
            if (c == '$') {
                if (top && (pos_ + 1 == p_.size() || p_[pos_ + 1] == '|')) break;
                fail("'$' is supported only at the end of the pattern");
            }
            if (c == '^') fail("'^' is supported only at the start of the pattern");
            std::string a = quantified(atom(depth));
            all_nullable = all_nullable && nullable_;
            if (!a.empty()) items.push_back(a);
        }
        nullable_ = all_nullable;
        return join(items, " ");
    }

    std::string quantified(const std::string& a) {
        if (pos_ >= p_.size()) return a;
        int lo = 0, hi = -1;
        char c = p_[pos_];
        size_t start = pos_;
        if (c == '*') {
            ++pos_;
        } else if (c == '+') {
            ++pos_;
            lo = 1;
        } else if (c == '?') {
            ++pos_;
            hi = 1;
        } else if (c == '{' && braces(lo, hi)) {
        } else {
            return a;
        }
        eat('?');  // a lazy quantifier matches the same strings
        if (pos_ < p_.size() && (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?' || p_[pos_] == '{')) {
            if (p_[pos_] != '{' || braces_ahead()) fail("nothing to repeat");
        }
        if (hi > MAX_REPEAT || lo > MAX_REPEAT) {
            pos_ = start;
            fail("repetition bound past " + std::to_string(MAX_REPEAT));
        }
        if (nullable_ && !a.empty() && hi != 0 && hi != 1) {
            pos_ = start;
            fail("a repeated item that can match the empty string (drop its empty alternative or optional parts)");
        }
        nullable_ = nullable_ || lo == 0;
        return a.empty() ? "" : repeat(group(a), lo, hi);
    }

    // {m} {m,} {m,n} at pos_; false (pos_ unmoved) when it is a literal '{'.
    bool braces(int& lo, int& hi) {
        size_t p = pos_ + 1;
        auto number = [&](int& out) {
            size_t s = p;
            long v = 0;
            while (p < p_.size() && p_[p] >= '0' && p_[p] <= '9') {
                v = std::min<long>(v * 10 + (p_[p] - '0'), 1000000);
                ++p;
            }
            out = static_cast<int>(v);
            return p > s;
        };
        if (!number(lo)) return false;
        hi = lo;
        if (p < p_.size() && p_[p] == ',') {
            ++p;
            if (!number(hi)) hi = -1;
        }
        if (p >= p_.size() || p_[p] != '}') return false;
        if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
        pos_ = p + 1;
        return true;
    }

    bool braces_ahead() {
        size_t keep = pos_;
        int lo = 0, hi = 0;
        bool is = braces(lo, hi);
        pos_ = keep;
        return is;
    }

    std::string atom(int depth) {
        char c = p_[pos_];
        nullable_ = false;
        if (c == '(') {
            if (depth >= MAX_DEPTH) fail("groups nested deeper than " + std::to_string(MAX_DEPTH));
            ++pos_;
            if (eat('?')) {
                if (!eat(':')) {
                    if (pos_ < p_.size() && (p_[pos_] == '=' || p_[pos_] == '!')) fail("lookahead is not supported");
                    if (pos_ < p_.size() && p_[pos_] == '<') {
                        bool behind = pos_ + 1 < p_.size() && (p_[pos_ + 1] == '=' || p_[pos_ + 1] == '!');
                        fail(behind ? "lookbehind is not supported" : "named groups are not supported");
                    }
                    fail("unsupported group '(?'");
                }
            }
            std::string inner = alternatives(depth + 1);  // sets nullable_
            if (!eat(')')) fail("missing ')'");
            if (inner == "\"\"") nullable_ = true;
            return inner == "\"\"" ? "" : group(inner);
        }
        if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
        if (c == '{') {  // Python's re reads "{,n}" as a repetition, ECMA-262 as characters
            fail(braces_ahead() ? "nothing to repeat" : "a '{' that is no repetition must be escaped");
        }
        if (c == '[') return set_gbnf(char_class());
        if (c == '.') {
            ++pos_;
            return set_gbnf(char_set(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})));
        }
        if (c == '\\') return set_gbnf(escape(false));
        uint32_t cp = next_code_point();
        return set_gbnf(char_set({{cp, cp}}));
    }

    std::string set_gbnf(const CharSet& s) {
        std::string g = json_chars_gbnf(s.sure);
        if (g.empty()) fail("a character class that matches nothing the output can hold");
        return g;
    }

    uint32_t hex_digits(int n) {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
            if (pos_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[pos_]))) {
                fail("expected " + std::to_string(n) + " hex digits");
            }
            char h = p_[pos_++];
            v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        return v;
    }

    // \d \D \w \W \s \S: a class, not one character.
    static bool is_shorthand(char c) { return c != 0 && std::string_view("dDwWsS").find(c) != std::string_view::npos; }

    // After '\\' (pos_ at the backslash). in_class: \b is a backspace.
    CharSet escape(bool in_class) {
        ++pos_;
        if (pos_ >= p_.size()) fail("'\\' at the end of the pattern");
        char c = p_[pos_];
        // The class shorthands and the one-character control escapes.
        static const std::pair<char, uint32_t> CONTROLS[] = {
            {'t', '\t'}, {'n', '\n'}, {'r', '\r'}, {'f', '\f'}, {'v', '\v'}};
        for (const auto& [letter, code] : CONTROLS)
            if (c == letter) {
                ++pos_;
                return char_set({{code, code}});
            }
        if (is_shorthand(c)) {
            ++pos_;
            const char lower = static_cast<char>(c | 0x20);
            CharSet set = lower == 'd' ? class_digit() : lower == 'w' ? class_word() : class_space();
            return c == lower ? set : negate(set);
        }
        switch (c) {
        case '0':
            ++pos_;
            if (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') fail("octal escapes are not supported");
            return char_set({{0, 0}});
        case 'x': {
            ++pos_;
            uint32_t v = hex_digits(2);
            return char_set({{v, v}});
        }
        case 'u': {
            ++pos_;
            if (pos_ < p_.size() && p_[pos_] == '{') fail("'\\u{...}' is not supported");
            uint32_t v = hex_digits(4);
            if (v >= 0xD800 && v <= 0xDFFF) fail("surrogate escapes are not supported");
            return char_set({{v, v}});
        }
        case 'b':
            if (in_class) {
                ++pos_;
                return char_set({{'\b', '\b'}});
            }
            fail("word boundaries (\\b) are not supported");
        case 'B':
            fail("word boundaries (\\B) are not supported");
        case 'k':
            fail("back references are not supported");
        case 'p':
        case 'P':
            fail("Unicode property escapes are not supported");
        case 'c':
            fail("control escapes (\\c) are not supported");
        default:
            break;
        }
        if (c >= '1' && c <= '9') fail("back references are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || static_cast<unsigned char>(c) >= 0x80) {
            fail("unknown escape '\\" + std::string(1, c) + "'");
        }
        ++pos_;
        uint32_t v = static_cast<unsigned char>(c);
        return char_set({{v, v}});
    }

    // One member of a class: a character (its code point in `cp`) or a
    // shorthand (\d ...; cp unset).
    CharSet class_atom(bool& single_char, uint32_t& cp) {
        if (p_[pos_] == '\\') {
            size_t at = pos_;
            CharSet s = escape(true);
            char e = p_[at + 1];
            single_char = !is_shorthand(e);
            cp = single_char ? s.sure[0].first : 0;
            return s;
        }
        single_char = true;
        cp = next_code_point();
        return char_set({{cp, cp}});
    }

    CharSet char_class() {
        ++pos_;  // '['
        bool negated = eat('^');
        CharSet set;
        bool first = true;
        while (true) {
            if (pos_ >= p_.size()) fail("missing ']'");
            if (p_[pos_] == ']' && !first) break;
            if (p_[pos_] == ']') {  // "[]" matches nothing in ECMA-262; refused
                fail("an empty character class");
            }
            first = false;
            bool single = false;
            uint32_t lo = 0;
            CharSet a = class_atom(single, lo);
            if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
                ++pos_;
                bool single_hi = false;
                uint32_t hi = 0;
                class_atom(single_hi, hi);
                if (!single || !single_hi) fail("a range with a class shorthand");
                if (hi < lo) fail("a range out of order");
                a = char_set({{lo, hi}});
            }
            add_to(set, a);
        }
        ++pos_;  // ']'
        return negated ? negate(set) : set;
    }
};

// ---------------------------------------------------------------------------
// The schema walk.

// Strings a format names, as patterns (anchored).
const std::vector<std::pair<std::string, std::string>> FORMATS = {
    {"date", "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"},
    {"time", "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"date-time",
     "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?"
     "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
};

class SchemaConverter {
public:
    SchemaConverter(GbnfBuilder& b, const ojson& root, std::string_view where, std::string_view prefix)
        : b_(b), root_(root), where_(where), prefix_(sanitize_name(prefix.empty() ? "schema" : prefix)) {}

    std::string convert() { return visit(root_, "", prefix_, 0); }

private:
    GbnfBuilder& b_;
    const ojson& root_;
    std::string where_;
    std::string prefix_;
    std::map<std::string, std::string> refs_;  // JSON pointer -> rule name
    // The references being resolved since the last '{' or '[': one of them
    // again would be a rule that starts with itself (left recursion).
    std::vector<std::string> open_refs_;

    [[noreturn]] void fail(const std::string& ptr, const std::string& what) const {
        std::string msg = where_;
        msg += ptr;
        msg += ": ";
        msg += what;
        throw MoeError(msg);
    }

    std::string context(const std::string& ptr) const { return where_ + ptr; }

    // Only annotations (and $defs) beside `keyword`.
    void only_annotations_beside(const ojson& s, const std::string& ptr, const std::string& keyword,
                                 const Keywords& also = {}) const {
        for (auto& [k, v] : s.items()) {
            if (k == keyword || ANNOTATIONS.count(k) || also.count(k) || k == "$defs" || k == "definitions") continue;
            fail(ptr, "keyword '" + k + "' beside '" + keyword + "' is not supported");
        }
    }

    int count(const ojson& s, const std::string& ptr, const std::string& key) const {
        const ojson& v = s[key];
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
            fail(ptr + "/" + key, "'" + key + "' must be a non-negative integer");
        return static_cast<int>(std::min<int64_t>(v.get<int64_t>(), 1000000));
    }

    // [lo, hi] of a count pair (hi -1: none), the maximum lowered to the
    // grammar's limit.
    std::pair<int, int> bounds(const ojson& s, const std::string& ptr, const std::string& min_key,
                               const std::string& max_key) const {
        int lo = s.contains(min_key) ? count(s, ptr, min_key) : 0;
        int hi = s.contains(max_key) ? count(s, ptr, max_key) : -1;
        if (lo > MAX_REPEAT) {
            fail(ptr + "/" + min_key, "'" + min_key + "' " + std::to_string(lo) + " is past the grammar's limit of " +
                                          std::to_string(MAX_REPEAT));
        }
        if (hi > MAX_REPEAT) hi = MAX_REPEAT;
        if (hi >= 0 && hi < lo) fail(ptr, "'" + max_key + "' is below '" + min_key + "'");
        return {lo, hi};
    }

    std::string visit(const ojson& s, const std::string& ptr, const std::string& name, int depth) {
        if (depth > MAX_DEPTH) fail(ptr, "schema nested deeper than " + std::to_string(MAX_DEPTH) + " levels");
        if (s.is_boolean()) {
            if (s.get<bool>()) return b_.add_shared("json-value");
            fail(ptr, "schema false admits no value");
        }
        if (!s.is_object()) fail(ptr, "a schema must be an object or a boolean, not " + json_type_name(s));
        for (auto& [k, v] : s.items()) {
            if (!ANNOTATIONS.count(k) && !KEYWORDS.count(k)) fail(ptr, "unsupported keyword '" + k + "'");
        }
        if (s.contains("$ref")) {
            only_annotations_beside(s, ptr, "$ref");
            return ref(s["$ref"], ptr + "/$ref", depth);
        }
        if (s.contains("allOf")) {
            only_annotations_beside(s, ptr, "allOf");
            const ojson& all = s["allOf"];
            if (!all.is_array() || all.empty()) fail(ptr + "/allOf", "'allOf' must be a non-empty array of schemas");
            if (all.size() > 1) fail(ptr + "/allOf", "'allOf' of more than one schema is not supported");
            return visit(all[0], ptr + "/allOf/0", name, depth + 1);
        }
        for (const char* key : {"anyOf", "oneOf"}) {
            if (!s.contains(key)) continue;
            only_annotations_beside(s, ptr, key);
            const ojson& list = s[key];
            std::string p = ptr + "/" + key;
            if (!list.is_array() || list.empty())
                fail(p, std::string("'") + key + "' must be a non-empty array of schemas");
            std::vector<std::string> alts;
            for (size_t i = 0; i < list.size(); ++i) {
                alts.push_back(
                    visit(list[i], p + "/" + std::to_string(i), join_name(name, std::to_string(i)), depth + 1));
            }
            return b_.add_rule(name, join(alts, " | "));
        }
        std::vector<std::string> types = schema_types(s, ptr);
        if (s.contains("enum") || s.contains("const")) {
            return b_.add_rule(name, enum_body(s, ptr, types));
        }
        std::vector<std::string> alts;
        for (const std::string& t : types) alts.push_back(type_body(s, ptr, name, t, depth, types.size() > 1));
        if (alts.size() == 1 && is_rule_name(alts[0])) return alts[0];
        return b_.add_rule(name, join(alts, " | "));
    }

    static bool is_rule_name(const std::string& x) {
        return std::all_of(x.begin(), x.end(),
                           [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; });
    }

    // The types a schema admits (inferred from its keywords when `type` is absent).
    std::vector<std::string> schema_types(const ojson& s, const std::string& ptr) const {
        std::vector<std::string> types;
        if (s.contains("type")) {
            const ojson& t = s["type"];
            std::string p = ptr + "/type";
            std::vector<ojson> names;
            if (t.is_string()) {
                names.push_back(t);
            } else if (t.is_array() && !t.empty()) {
                names.assign(t.begin(), t.end());
            } else {
                fail(p, "'type' must be a type name or a non-empty array of type names");
            }
            for (const ojson& n : names) {
                if (!n.is_string()) fail(p, "'type' must be a type name or a non-empty array of type names");
                std::string name = n.get<std::string>();
                if (std::find(TYPES.begin(), TYPES.end(), name) == TYPES.end()) fail(p, "unknown type '" + name + "'");
                if (std::find(types.begin(), types.end(), name) == types.end()) types.push_back(name);
            }
            // "number" already holds every integer
            if (std::count(types.begin(), types.end(), "number")) std::erase(types, std::string("integer"));
            return types;
        }
        if (s.contains("enum") || s.contains("const")) return TYPES;
        auto has_any = [&](const Keywords& keys) {
            return std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return s.contains(k); });
        };
        if (has_any(OBJECT_KEYWORDS)) types.push_back("object");
        if (has_any(ARRAY_KEYWORDS)) types.push_back("array");
        if (has_any(STRING_KEYWORDS)) types.push_back("string");
        if (has_any(INTEGER_KEYWORDS)) types.push_back("integer");
        return types.empty() ? std::vector<std::string>{"any"} : types;
    }

    static bool has_type(const ojson& v, const std::string& t) {
        if (t == "object") return v.is_object();
        if (t == "array") return v.is_array();
        if (t == "string") return v.is_string();
        if (t == "number") return v.is_number();
        if (t == "integer") {
            if (v.is_number_integer()) return true;
            return v.is_number_float() && std::isfinite(v.get<double>()) &&
                   v.get<double>() == std::floor(v.get<double>());
        }
        if (t == "boolean") return v.is_boolean();
        return v.is_null();
    }

    std::string enum_body(const ojson& s, const std::string& ptr, const std::vector<std::string>& types) const {
        for (auto& [k, v] : s.items()) {
            if (k == "enum" || k == "const" || k == "type" || ANNOTATIONS.count(k) || k == "$defs" ||
                k == "definitions")
                continue;
            fail(ptr, "keyword '" + k + "' beside '" + (s.contains("enum") ? "enum" : "const") + "' is not supported");
        }
        std::vector<ojson> values;
        if (s.contains("enum")) {
            const ojson& e = s["enum"];
            if (!e.is_array() || e.empty()) fail(ptr + "/enum", "'enum' must be a non-empty array");
            values.assign(e.begin(), e.end());
        }
        if (s.contains("const")) {
            if (s.contains("enum") && std::find(values.begin(), values.end(), s["const"]) == values.end()) {
                fail(ptr, "'const' is not one of 'enum'");
            }
            values = {s["const"]};
        }
        std::vector<std::string> alts;
        for (const ojson& v : values) {
            bool typed = std::any_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); });
            if (typed) alts.push_back(gbnf_literal(v.dump()));
        }
        if (alts.empty()) fail(ptr, "no value of 'enum' or 'const' has the schema's type");
        return join(alts, " | ");
    }

    std::string type_body(const ojson& s, const std::string& ptr, const std::string& name, const std::string& type,
                          int depth, bool several) {
        std::string sub = several ? join_name(name, type) : name;
        if (type == "any") return b_.add_shared("json-value");
        if (type == "object") return object_body(s, ptr, sub, depth);
        if (type == "array") return array_body(s, ptr, sub, depth);
        if (type == "string") return string_body(s, ptr);
        if (type == "integer") return integer_body(s, ptr);
        for (const auto& k : INTEGER_KEYWORDS) {
            if (type == "number" && s.contains(k)) fail(ptr, "keyword '" + k + "' is supported for integers only");
        }
        return b_.add_shared("json-" + type);
    }

    std::string integer_body(const ojson& s, const std::string& ptr) {
        bool bounded = false;
        int64_t lo = -MAX_INT, hi = MAX_INT;
        for (const auto& k : INTEGER_KEYWORDS) {
            if (!s.contains(k)) continue;
            const ojson& v = s[k];
            if (!v.is_number()) fail(ptr + "/" + k, "'" + k + "' must be a number");
            double x = v.get<double>();
            bool is_min = k == "minimum" || k == "exclusiveMinimum";
            double bound = k == "minimum"   ? std::ceil(x)
                           : k == "maximum" ? std::floor(x)
                           : is_min         ? std::floor(x) + 1
                                            : std::ceil(x) - 1;
            bound = std::clamp(bound, -2.0 * MAX_INT, 2.0 * MAX_INT);
            if (is_min) {
                lo = std::max(lo, static_cast<int64_t>(bound));
            } else {
                hi = std::min(hi, static_cast<int64_t>(bound));
            }
            bounded = true;
        }
        if (!bounded) return b_.add_shared("json-integer");
        if (lo > hi)
            fail(ptr, "no integer of at most " + std::to_string(MAX_INT_DIGITS) + " digits is within the bounds");
        return integers_between(lo, hi);
    }

    std::string string_body(const ojson& s, const std::string& ptr) {
        std::string pattern;
        std::string pattern_ptr;
        if (s.contains("format")) {
            const ojson& f = s["format"];
            if (!f.is_string()) fail(ptr + "/format", "'format' must be a string");
            auto it = std::find_if(FORMATS.begin(), FORMATS.end(),
                                   [&](const auto& e) { return e.first == f.get<std::string>(); });
            if (it == FORMATS.end()) {
                fail(ptr + "/format",
                     "unsupported format '" + f.get<std::string>() + "' (supported: date, time, date-time, uuid)");
            }
            if (s.contains("pattern")) fail(ptr, "'pattern' beside 'format' is not supported");
            pattern = it->second;
            pattern_ptr = ptr + "/format";
        }
        if (s.contains("pattern")) {
            const ojson& p = s["pattern"];
            if (!p.is_string()) fail(ptr + "/pattern", "'pattern' must be a string");
            pattern = p.get<std::string>();
            pattern_ptr = ptr + "/pattern";
        }
        if (!pattern_ptr.empty()) {
            if (s.contains("minLength") || s.contains("maxLength")) {
                fail(ptr, "'minLength'/'maxLength' beside 'pattern' or 'format' is not supported");
            }
            b_.add_shared("json-char");
            std::string body = PatternConverter(pattern, context(pattern_ptr)).convert();
            return "\"\\\"\" " + body + " \"\\\"\"";
        }
        if (!s.contains("minLength") && !s.contains("maxLength")) return b_.add_shared("json-string");
        auto [lo, hi] = bounds(s, ptr, "minLength", "maxLength");
        return "\"\\\"\" " + repeat(b_.add_shared("json-char"), lo, hi) + " \"\\\"\"";
    }

    std::string array_body(const ojson& s, const std::string& ptr, const std::string& name, int depth) {
        std::vector<std::string> open_refs = std::exchange(open_refs_, {});  // '[' comes first
        std::vector<std::string> prefix;
        if (s.contains("prefixItems")) {
            const ojson& p = s["prefixItems"];
            if (!p.is_array()) fail(ptr + "/prefixItems", "'prefixItems' must be an array of schemas");
            if (p.size() > MAX_REPEAT) {
                fail(ptr + "/prefixItems", "'prefixItems' of more than " + std::to_string(MAX_REPEAT) + " schemas");
            }
            for (size_t i = 0; i < p.size(); ++i) {
                prefix.push_back(visit(p[i], ptr + "/prefixItems/" + std::to_string(i),
                                       join_name(name, "item-" + std::to_string(i)), depth + 1));
            }
        }
        std::string item;  // "" when no more items may follow the prefix
        if (!s.contains("items")) {
            item = b_.add_shared("json-value");
        } else if (s["items"].is_array()) {
            fail(ptr + "/items", "'items' as an array is not supported (use 'prefixItems')");
        } else if (!(s["items"].is_boolean() && !s["items"].get<bool>())) {
            item = visit(s["items"], ptr + "/items", join_name(name, "item"), depth + 1);
        }
        // Plain variables, not a structured binding: the lambdas below capture them (clang 14 cannot).
        const auto item_bounds = bounds(s, ptr, "minItems", "maxItems");
        int lo = item_bounds.first, hi = item_bounds.second;
        int k = static_cast<int>(prefix.size());
        if (item.empty()) {
            if (lo > k) fail(ptr, "'minItems' exceeds the items the array may hold");
            hi = hi < 0 ? k : std::min(hi, k);
        }
        std::string ws = b_.add_shared("ws");
        // Elements from index i on (i already written), each after a comma but the first.
        auto elements = [&](auto&& self, int i) -> std::string {
            if (hi >= 0 && i >= hi) return "";
            std::string sep = i == 0 ? "" : "\",\" " + ws + " ";
            if (i >= k) {
                int rlo = std::max(0, lo - i), rhi = hi < 0 ? -1 : hi - i;
                std::string one = sep + item + " " + ws;
                if (i > 0) return repeat(group(one), rlo, rhi);
                std::string rest =
                    repeat(group("\",\" " + ws + " " + item + " " + ws), std::max(0, rlo - 1), rhi < 0 ? -1 : rhi - 1);
                std::string all = seq({one, rest});
                return rlo >= 1 ? all : group(all) + "?";
            }
            std::string more = self(self, i + 1);
            std::string one = sep + prefix[i] + " " + ws + (more.empty() ? "" : " " + more);
            return i < lo ? one : group(one) + "?";
        };
        std::string body = elements(elements, 0);
        open_refs_ = std::move(open_refs);
        return "\"[\" " + ws + " " + (body.empty() ? "" : body + " ") + "\"]\"";
    }

    struct Property {
        std::string key;
        std::string rule;
        bool required;
    };

    std::string object_body(const ojson& s, const std::string& ptr, const std::string& name, int depth) {
        std::vector<std::string> open_refs = std::exchange(open_refs_, {});  // '{' comes first
        std::vector<std::string> required;
        if (s.contains("required")) {
            const ojson& r = s["required"];
            if (!r.is_array()) fail(ptr + "/required", "'required' must be an array of strings");
            for (const ojson& k : r) {
                if (!k.is_string()) fail(ptr + "/required", "'required' must be an array of strings");
                if (std::find(required.begin(), required.end(), k.get<std::string>()) == required.end()) {
                    required.push_back(k.get<std::string>());
                }
            }
        }
        // additionalProperties: the rule of other properties' values, "" when none are allowed.
        std::string extra;
        bool has_properties = s.contains("properties");
        std::string extra_ptr = ptr + "/additionalProperties";
        if (!s.contains("additionalProperties")) {
            if (!has_properties) extra = b_.add_shared("json-value");
        } else {
            const ojson& a = s["additionalProperties"];
            if (a.is_boolean()) {
                if (a.get<bool>()) extra = b_.add_shared("json-value");
            } else {
                extra = visit(a, extra_ptr, join_name(name, "additional"), depth + 1);
            }
        }
        std::vector<Property> props;
        auto is_required = [&](const std::string& k) {
            return std::find(required.begin(), required.end(), k) != required.end();
        };
        if (has_properties) {
            const ojson& p = s["properties"];
            if (!p.is_object()) fail(ptr + "/properties", "'properties' must be an object of schemas");
            for (auto& [k, v] : p.items()) {
                std::string pp = ptr + "/properties/" + pointer_token(k);
                if (v.is_boolean() && !v.get<bool>()) {
                    if (is_required(k)) fail(pp, "required property '" + k + "' admits no value");
                    props.push_back({k, "", false});  // never written, and never an additional property
                    continue;
                }
                props.push_back({k, visit(v, pp, join_name(name, sanitize_name(k)), depth + 1), is_required(k)});
            }
        }
        for (const std::string& k : required) {
            if (std::any_of(props.begin(), props.end(), [&](const Property& p) { return p.key == k; })) continue;
            if (extra.empty())
                fail(ptr + "/required",
                     "required property '" + k + "' is not allowed by 'properties' or 'additionalProperties'");
            props.push_back({k, extra, true});
        }
        std::string ws = b_.add_shared("ws");
        auto pair = [&](const Property& p) {
            return gbnf_literal(ojson(p.key).dump()) + " " + ws + " \":\" " + ws + " " + p.rule + " " + ws;
        };
        std::string extra_pair;
        if (!extra.empty()) {
            std::vector<std::string> known;
            for (const Property& p : props) known.push_back(p.key);
            std::string key = extra_key(known, name);
            extra_pair = key + " " + ws + " \":\" " + ws + " " + extra + " " + ws;
        }
        std::vector<Property> written;
        for (const Property& p : props) {
            if (!p.rule.empty()) written.push_back(p);
        }
        // tail[i]: the properties from i on and the additional ones, after at
        // least one property (so each begins with a comma).
        std::string comma = "\",\" " + ws + " ";
        std::string tail = extra_pair.empty() ? "" : group(comma + extra_pair) + "*";
        std::vector<std::string> head_alts;  // alternatives for the first property written
        if (!extra_pair.empty()) head_alts.push_back(extra_pair + (tail.empty() ? "" : " " + tail));
        bool must_have_one = false;
        for (int i = static_cast<int>(written.size()) - 1; i >= 0; --i) {
            const Property& p = written[i];
            std::string after = tail;
            std::string here = pair(p) + (after.empty() ? "" : " " + after);
            if (p.required) head_alts.clear();  // a required property is the first, or follows one
            head_alts.push_back(here);
            must_have_one = must_have_one || p.required;
            std::string item = comma + pair(p);
            std::string next = p.required ? item : group(item) + "?";
            if (!after.empty()) next += " " + after;
            if (i > 0) tail = b_.add_rule(join_name(name, "after-" + sanitize_name(written[i - 1].key)), next);
        }
        std::reverse(head_alts.begin(), head_alts.end());
        std::string body;
        if (!head_alts.empty()) {
            std::string h = head_alts.size() == 1 ? head_alts[0] : group(join(head_alts, " | "));
            body = must_have_one ? h + " " : (head_alts.size() == 1 ? group(h) : h) + "? ";
        }
        open_refs_ = std::move(open_refs);
        return "\"{\" " + ws + " " + body + "\"}\"";
    }

    // A property name (a JSON string, quotes included) that is none of
    // `known`: at most MAX_EXTRA_KEY_CHARS characters, none escaped. Built
    // on the trie of the known names.
    std::string extra_key(const std::vector<std::string>& known, const std::string& name) {
        struct Node {
            std::map<uint32_t, int> next;
            bool terminal = false;
        };
        std::vector<Node> trie(1);
        for (const std::string& k : known) {
            int n = 0;
            std::u32string cps = utf8_code_points(k);
            if (static_cast<int>(cps.size()) > MAX_EXTRA_KEY_CHARS) continue;  // never writable anyway
            for (uint32_t c : cps) {
                auto it = trie[n].next.find(c);
                if (it == trie[n].next.end()) {
                    trie.push_back({});
                    it = trie[n].next.emplace(c, static_cast<int>(trie.size()) - 1).first;
                }
                n = it->second;
            }
            trie[n].terminal = true;
        }
        const Ranges plain = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, MAX_CODE_POINT}};
        std::string close = "\"\\\"\"";
        // node n at depth d: the rest of a name that differs from every known one.
        auto rest = [&](auto&& self, int n, int d) -> std::string {
            std::vector<std::string> alts;
            if (!trie[n].terminal) alts.push_back(close);
            if (d >= MAX_EXTRA_KEY_CHARS) return alts.empty() ? "" : alts[0];
            Ranges taken;
            for (auto& [c, child] : trie[n].next) taken.push_back({c, c});
            std::string other = json_chars_gbnf(intersect(plain, complement(normalize(taken))));
            if (!other.empty()) {
                alts.push_back(seq({other, repeat(json_chars_gbnf(plain), 0, MAX_EXTRA_KEY_CHARS - d - 1), close}));
            }
            for (auto& [c, child] : trie[n].next) {
                std::string more = self(self, child, d + 1);
                if (!more.empty()) alts.push_back(json_chars_gbnf({{c, c}}) + " " + more);
            }
            if (alts.empty()) return "";
            return alts.size() == 1 ? alts[0] : group(join(alts, " | "));
        };
        return b_.add_rule(join_name(name, "key"), "\"\\\"\" " + rest(rest, 0, 0));
    }

    std::string ref(const ojson& r, const std::string& ptr, int depth) {
        if (!r.is_string()) fail(ptr, "'$ref' must be a string");
        std::string target = r.get<std::string>();
        if (target.empty() || target[0] != '#') {
            fail(ptr, "only references within the schema ('#/$defs/NAME') are supported, not '" + target + "'");
        }
        if (std::find(open_refs_.begin(), open_refs_.end(), target) != open_refs_.end()) {
            fail(ptr, "'$ref' '" + target + "' refers to itself before any value is written");
        }
        auto known = refs_.find(target);
        if (known != refs_.end()) return known->second;
        // Walk the pointer.
        const ojson* node = &root_;
        std::string pointer = target.substr(1);
        if (!pointer.empty() && pointer[0] != '/') fail(ptr, "'$ref' '" + target + "' is not a JSON pointer");
        std::string last = "root";
        size_t at = 0;
        while (at < pointer.size()) {
            size_t next = pointer.find('/', at + 1);
            std::string token = pointer.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
            std::string key;
            for (size_t i = 0; i < token.size(); ++i) {
                if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
                    key += token[i + 1] == '0' ? '~' : '/';
                    ++i;
                } else {
                    key += token[i];
                }
            }
            if (node->is_object() && node->contains(key)) {
                node = &(*node)[key];
            } else if (node->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                       key.size() < 9 && std::stoul(key) < node->size()) {
                node = &(*node)[std::stoul(key)];
            } else {
                fail(ptr, "'$ref' '" + target + "' names nothing in the schema");
            }
            last = key;
            at = next == std::string::npos ? pointer.size() : next;
        }
        std::string rule = b_.reserve_rule(join_name(prefix_, sanitize_name(last)));
        refs_[target] = rule;
        open_refs_.push_back(target);
        std::string body = visit(*node, pointer, rule + "-body", depth + 1);
        open_refs_.pop_back();
        b_.define_rule(rule, body);
        return rule;
    }
};

}  // namespace

// ---------------------------------------------------------------------------

std::string gbnf_literal(std::string_view text) {
    std::string out = "\"";
    for (char ch : text) {
        unsigned char c = static_cast<unsigned char>(ch);
        if (c == '"') {
            out += "\\\"";
        } else if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7F) {
            out += "\\x" + hex(c, 2);
        } else {
            out += ch;
        }
    }
    out += '"';
    return out;
}

std::string GbnfBuilder::reserve_rule(std::string_view name) {
    std::string base = sanitize_name(name);
    std::string unique = base;
    for (int i = 2; unique == "root" || names_.count(unique); ++i) unique = base + "-" + std::to_string(i);
    names_.insert(unique);
    rules_.push_back({unique, ""});
    return unique;
}

void GbnfBuilder::define_rule(const std::string& reserved, const std::string& body) {
    for (auto& [name, b] : rules_) {
        if (name == reserved) {
            b = body;
            return;
        }
    }
    throw std::logic_error("GbnfBuilder::define_rule: no rule " + reserved);
}

std::string GbnfBuilder::add_rule(std::string_view name, const std::string& body) {
    auto same = by_body_.find(body);
    if (same != by_body_.end()) return same->second;
    std::string unique = reserve_rule(name);
    define_rule(unique, body);
    by_body_[body] = unique;
    return unique;
}

std::string GbnfBuilder::add_shared(std::string_view name) {
    std::string n(name);
    if (names_.count(n)) return n;
    auto it = std::find_if(SHARED.begin(), SHARED.end(), [&](const SharedRule& r) { return r.name == n; });
    if (it == SHARED.end()) throw std::invalid_argument("GbnfBuilder::add_shared: no shared rule " + n);
    names_.insert(n);
    rules_.push_back({n, it->body});
    for (const std::string& used : it->uses) add_shared(used);
    return n;
}

std::string GbnfBuilder::add_schema(const ojson& schema, std::string_view where, std::string_view name_prefix) {
    return SchemaConverter(*this, schema, where, name_prefix).convert();
}

std::string GbnfBuilder::gbnf(std::string_view root_body) const {
    std::string out = "root ::= ";
    out += root_body;
    out += '\n';
    for (const auto& [name, body] : rules_) {
        out += name;
        out += " ::= ";
        out += body;
        out += '\n';
    }
    return out;
}

std::string json_object_gbnf() {
    GbnfBuilder b;
    return b.gbnf(b.add_shared("json-object"));
}

std::string json_schema_gbnf(const ojson& schema, std::string_view where) {
    GbnfBuilder b;
    return b.gbnf(b.add_schema(schema, where, "schema"));
}
