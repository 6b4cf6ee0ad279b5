// The GBNF parser: grammar text to the flattened grammar of grammar_impl.h,
// checked (every rule defined once, `root` present, no left recursion,
// every <[piece]> a token of the vocabulary, bounded size). Groups and
// repetitions become generated rules here, so the matcher sees only rule
// references, character classes and tokens. Recursive descent with its
// nesting bounded (GRAMMAR_MAX_NESTING). Matching is grammar_match.cpp's.
#include <algorithm>
#include <map>

#include "base/utf8.h"
#include "engine/text/grammar_impl.h"
#include "engine/text/tokenizer.h"

using namespace grammar_detail;

namespace {

constexpr int GRAMMAR_MAX_NESTING = 200;
constexpr uint32_t GRAMMAR_MAX_REPEAT = 1000;
constexpr size_t GRAMMAR_MAX_ELEMENTS = 100000;

struct ParsedRule {
    std::string name;
    size_t offset = 0;  // definition (or first reference while undefined)
    bool defined = false;
    std::vector<std::vector<Elem>> alts;
    bool repetition = false;  // generated for x* / x+ / x{m,}: `r ::= x r | ""`
};

class Parser {
public:
    Parser(std::string_view text, std::string_view source, const Tokenizer& tok)
        : s_(text), source_(source), tok_(tok) {}

    void parse(Grammar::Impl& g);

private:
    [[noreturn]] void fail(size_t at, const std::string& what) const;
    bool at_end() const { return pos_ >= s_.size(); }
    char peek(size_t k = 0) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }
    void skip_space(bool newlines);
    std::string parse_name();
    uint32_t rule_index(const std::string& name, size_t at);
    uint32_t new_rule(const std::string& parent, size_t at);
    std::vector<std::vector<Elem>> parse_alternatives(const std::string& rule, int depth);
    std::vector<Elem> parse_sequence(const std::string& rule, int depth);
    uint32_t parse_char(bool in_class);
    uint32_t parse_utf8();
    uint32_t parse_hex(int digits);
    uint32_t parse_count();
    uint32_t char_class(CharClass c);
    void count(size_t n);
    void repeat(std::vector<Elem>& seq, size_t item_start, uint32_t lo, uint32_t hi, const std::string& rule,
                size_t at);
    void check_left_recursion(const Grammar::Impl& g) const;

    std::string_view s_;
    std::string_view source_;
    const Tokenizer& tok_;
    size_t pos_ = 0;
    size_t n_elems_ = 0;
    std::vector<ParsedRule> rules_;
    std::map<std::string, uint32_t, std::less<>> by_name_;
    std::map<std::pair<bool, std::vector<std::pair<uint32_t, uint32_t>>>, uint32_t> class_ids_;
    std::vector<CharClass> classes_;
};

void Parser::fail(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); i++) {
        if (s_[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    std::string msg(source_);
    msg += ": line ";
    msg += std::to_string(line);
    msg += ", column ";
    msg += std::to_string(col);
    msg += ": ";
    msg += what;
    throw MoeError(msg);
}

void Parser::count(size_t n) {
    n_elems_ += n;
    if (n_elems_ > GRAMMAR_MAX_ELEMENTS)
        fail(pos_, "the grammar has more than " + std::to_string(GRAMMAR_MAX_ELEMENTS) + " elements");
}

// Spaces, tabs, comments; newlines too when `newlines` (inside a group, after
// '::=' or '|'). A newline at the top level ends a rule.
void Parser::skip_space(bool newlines) {
    while (!at_end()) {
        const char c = peek();
        if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
            pos_++;
        } else if (c == '#') {
            while (!at_end() && peek() != '\n' && peek() != '\r') pos_++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

std::string Parser::parse_name() {
    const size_t b = pos_;
    while (!at_end() && is_name_char(peek())) pos_++;
    if (b == pos_) fail(b, "expected a rule name");
    return std::string(s_.substr(b, pos_ - b));
}

uint32_t Parser::rule_index(const std::string& name, size_t at) {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) return it->second;
    const auto id = static_cast<uint32_t>(rules_.size());
    rules_.push_back({name, at, false, {}});
    by_name_.emplace(name, id);
    return id;
}

uint32_t Parser::new_rule(const std::string& parent, size_t at) {
    const auto id = static_cast<uint32_t>(rules_.size());
    rules_.push_back({parent + "-" + std::to_string(id), at, true, {}});
    return id;
}

uint32_t Parser::parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        const char c = peek();
        int d;
        if (c >= '0' && c <= '9') {
            d = c - '0';
        } else if (c >= 'a' && c <= 'f') {
            d = c - 'a' + 10;
        } else if (c >= 'A' && c <= 'F') {
            d = c - 'A' + 10;
        } else {
            fail(pos_, "expected " + std::to_string(digits) + " hex digits");
        }
        v = v * 16 + static_cast<uint32_t>(d);
        pos_++;
    }
    return v;
}

uint32_t Parser::parse_utf8() {
    const Utf8Char c = utf8_decode(s_, pos_);
    if (c.status != Utf8Status::VALID) fail(pos_, "invalid UTF-8");
    pos_ += c.len;
    return c.cp;
}

// One character of a literal or class, escapes decoded.
uint32_t Parser::parse_char(bool in_class) {
    if (at_end()) fail(pos_, in_class ? "unterminated character class" : "unterminated literal");
    if (peek() != '\\') return parse_utf8();
    const size_t at = pos_;
    pos_ += 2;
    uint32_t cp = 0;
    switch (s_.size() > at + 1 ? s_[at + 1] : '\0') {
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case '\\':
        return '\\';
    case '"':
        return '"';
    case '\'':
        return '\'';
    case '[':
        return '[';
    case ']':
        return ']';
    case 'x':
        cp = parse_hex(2);
        break;
    case 'u':
        cp = parse_hex(4);
        break;
    case 'U':
        cp = parse_hex(8);
        break;
    default:
        fail(at, "unknown escape");
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(at, "escape is not a Unicode scalar value");
    return cp;
}

uint32_t Parser::char_class(CharClass c) {
    c.finish();
    auto key = std::make_pair(c.negated, c.ranges);
    auto it = class_ids_.find(key);
    if (it != class_ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(classes_.size());
    classes_.push_back(std::move(c));
    class_ids_.emplace(std::move(key), id);
    return id;
}

uint32_t Parser::parse_count() {
    const size_t at = pos_;
    uint64_t v = 0;
    if (peek() < '0' || peek() > '9') fail(at, "expected a number");
    while (peek() >= '0' && peek() <= '9') {
        v = v * 10 + static_cast<uint64_t>(peek() - '0');
        pos_++;
        if (v > GRAMMAR_MAX_REPEAT) fail(at, "repetition bound past " + std::to_string(GRAMMAR_MAX_REPEAT));
    }
    return static_cast<uint32_t>(v);
}

// seq[item_start..] repeated lo..hi times (hi UINT32_MAX: unbounded).
void Parser::repeat(std::vector<Elem>& seq, size_t item_start, uint32_t lo, uint32_t hi, const std::string& rule,
                    size_t at) {
    std::vector<Elem> item(seq.begin() + static_cast<std::ptrdiff_t>(item_start), seq.end());
    seq.resize(item_start);
    if (item.size() != 1) {
        const uint32_t g = new_rule(rule, at);
        rules_[g].alts.push_back(std::move(item));
        count(1);
        item = {Elem{ElemType::RULE, g}};
    }
    const Elem x = item[0];
    count(lo);
    for (uint32_t i = 0; i < lo; i++) seq.push_back(x);
    if (hi == UINT32_MAX) {
        // rep ::= x rep | ""
        const uint32_t r = new_rule(rule, at);
        rules_[r].alts = {{x, Elem{ElemType::RULE, r}}, {}};
        rules_[r].repetition = true;
        count(5);
        seq.push_back({ElemType::RULE, r});
        return;
    }
    // opt_k ::= x opt_(k-1) | "", opt_1 ::= x | ""
    uint32_t prev = UINT32_MAX;
    for (uint32_t k = lo; k < hi; k++) {
        const uint32_t r = new_rule(rule, at);
        std::vector<Elem> alt{x};
        if (prev != UINT32_MAX) alt.push_back({ElemType::RULE, prev});
        rules_[r].alts = {std::move(alt), {}};
        count(5);
        prev = r;
    }
    if (prev != UINT32_MAX) seq.push_back({ElemType::RULE, prev});
}

std::vector<Elem> Parser::parse_sequence(const std::string& rule, int depth) {
    std::vector<Elem> seq;
    size_t item_start = SIZE_MAX;  // where the last item's elements start (postfix operators apply to it)
    const bool nested = depth > 0;
    while (!at_end()) {
        const char c = peek();
        const size_t at = pos_;
        if (c == '"') {
            pos_++;
            item_start = seq.size();
            while (!at_end() && peek() != '"') {
                CharClass cc;
                const uint32_t cp = parse_char(false);
                cc.ranges.push_back({cp, cp});
                seq.push_back({ElemType::CHARS, char_class(std::move(cc))});
                count(1);
            }
            if (at_end()) fail(at, "unterminated literal");
            pos_++;
        } else if (c == '[') {
            pos_++;
            CharClass cc;
            if (peek() == '^') {
                cc.negated = true;
                pos_++;
            }
            while (!at_end() && peek() != ']') {
                const size_t char_at = pos_;
                const uint32_t lo = parse_char(true);
                uint32_t hi = lo;
                if (peek() == '-' && peek(1) != ']' && pos_ + 1 < s_.size()) {
                    pos_++;
                    hi = parse_char(true);
                    if (hi < lo) fail(char_at, "character range out of order");
                }
                cc.ranges.push_back({lo, hi});
            }
            if (at_end()) fail(at, "unterminated character class");
            pos_++;
            item_start = seq.size();
            seq.push_back({ElemType::CHARS, char_class(std::move(cc))});
            count(1);
        } else if (c == '.') {
            pos_++;
            CharClass cc;
            cc.negated = true;
            item_start = seq.size();
            seq.push_back({ElemType::CHARS, char_class(std::move(cc))});
            count(1);
        } else if (c == '<' && peek(1) == '[') {
            pos_ += 2;
            const size_t end = s_.find("]>", pos_);
            if (end == std::string_view::npos) fail(at, "unterminated token piece '<['");
            const std::string_view piece = s_.substr(pos_, end - pos_);
            const int id = tok_.piece_to_id(piece);
            if (id < 0) fail(at, "unknown token piece '" + std::string(piece) + "'");
            pos_ = end + 2;
            item_start = seq.size();
            seq.push_back({ElemType::TOKEN, static_cast<uint32_t>(id)});
            count(1);
        } else if (is_name_char(c)) {
            const std::string name = parse_name();
            item_start = seq.size();
            seq.push_back({ElemType::RULE, rule_index(name, at)});
            count(1);
        } else if (c == '(') {
            if (depth >= GRAMMAR_MAX_NESTING)
                fail(at, "groups nested deeper than " + std::to_string(GRAMMAR_MAX_NESTING));
            pos_++;
            skip_space(true);
            const uint32_t g = new_rule(rule, at);
            auto alts = parse_alternatives(rule, depth + 1);
            rules_[g].alts = std::move(alts);
            if (peek() != ')') fail(pos_, "expected ')'");
            pos_++;
            item_start = seq.size();
            seq.push_back({ElemType::RULE, g});
            count(1);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (item_start == SIZE_MAX) fail(at, std::string("'") + c + "' follows nothing");
            pos_++;
            uint32_t lo = 0, hi = UINT32_MAX;
            if (c == '+') {
                lo = 1;
            } else if (c == '?') {
                hi = 1;
            } else if (c == '{') {
                skip_space(false);
                lo = parse_count();
                skip_space(false);
                if (peek() == ',') {
                    pos_++;
                    skip_space(false);
                    if (peek() != '}') hi = parse_count();
                } else {
                    hi = lo;
                }
                skip_space(false);
                if (peek() != '}') fail(pos_, "expected '}'");
                pos_++;
                if (hi < lo) fail(at, "repetition bounds out of order");
            }
            repeat(seq, item_start, lo, hi, rule, at);
            item_start = SIZE_MAX;
        } else {
            break;
        }
        skip_space(nested);
    }
    return seq;
}

std::vector<std::vector<Elem>> Parser::parse_alternatives(const std::string& rule, int depth) {
    std::vector<std::vector<Elem>> alts;
    alts.push_back(parse_sequence(rule, depth));
    while (true) {
        if (depth == 0) {
            // A top-level rule goes on at a line that starts with '|'.
            const size_t line_end = pos_;
            skip_space(true);
            if (peek() != '|') pos_ = line_end;
        }
        if (peek() != '|') break;
        pos_++;
        skip_space(true);
        alts.push_back(parse_sequence(rule, depth));
    }
    count(alts.size());  // one END each
    return alts;
}

void Parser::parse(Grammar::Impl& g) {
    skip_space(true);
    while (!at_end()) {
        const size_t at = pos_;
        const std::string name = parse_name();
        skip_space(false);
        if (s_.substr(pos_, 3) != "::=") fail(pos_, "expected '::='");
        pos_ += 3;
        skip_space(true);
        const uint32_t r = rule_index(name, at);
        if (rules_[r].defined) fail(at, "duplicate rule '" + name + "'");
        rules_[r].defined = true;
        rules_[r].offset = at;
        auto alts = parse_alternatives(name, 0);
        rules_[r].alts = std::move(alts);
        if (!at_end() && peek() != '\n' && peek() != '\r') fail(pos_, "expected a newline or the end of the grammar");
        skip_space(true);
    }
    for (const ParsedRule& r : rules_) {
        if (!r.defined) fail(r.offset, "undefined rule '" + r.name + "'");
    }
    auto root = by_name_.find("root");
    if (root == by_name_.end()) fail(s_.size(), "no rule 'root'");
    g.root = root->second;
    for (ParsedRule& r : rules_) {
        Rule out;
        out.name = std::move(r.name);
        out.offset = r.offset;
        for (auto& alt : r.alts) {
            out.alts.push_back(static_cast<uint32_t>(g.elems.size()));
            g.elems.insert(g.elems.end(), alt.begin(), alt.end());
            g.elems.push_back({ElemType::END, 0});
        }
        g.rules.push_back(std::move(out));
    }
    g.classes = std::move(classes_);
    check_left_recursion(g);
}

// A rule that can reach itself again before matching anything (directly, or
// through rules that may match nothing) would make expansion loop.
void Parser::check_left_recursion(const Grammar::Impl& g) const {
    const size_t n = g.rules.size();
    std::vector<uint8_t> nullable(n, 0);
    auto alt_nullable = [&](uint32_t p) {
        for (; g.elems[p].type != ElemType::END; p++) {
            if (g.elems[p].type != ElemType::RULE || !nullable[g.elems[p].value]) return false;
        }
        return true;
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            for (uint32_t a : g.rules[r].alts) {
                if (alt_nullable(a)) {
                    nullable[r] = 1;
                    changed = true;
                    break;
                }
            }
        }
    }
    // Edges r -> the rules each alternative of r may start with.
    std::vector<std::vector<uint32_t>> starts(n);
    for (size_t r = 0; r < n; r++) {
        for (uint32_t p : g.rules[r].alts) {
            for (; g.elems[p].type == ElemType::RULE; p++) {
                starts[r].push_back(g.elems[p].value);
                if (!nullable[g.elems[p].value]) break;
            }
        }
    }
    // Iterative depth-first search for a cycle.
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (size_t s = 0; s < n; s++) {
        if (color[s]) continue;
        path.push_back({static_cast<uint32_t>(s), 0});
        color[s] = 1;
        while (!path.empty()) {
            auto& [r, i] = path.back();
            if (i == starts[r].size()) {
                color[r] = 2;
                path.pop_back();
                continue;
            }
            const uint32_t t = starts[r][i++];
            if (color[t] == 1) {
                if (t == r && rules_[t].repetition) fail(g.rules[t].offset, "a repeated item can match nothing");
                std::string cycle;
                size_t k = 0;
                while (path[k].first != t) k++;
                for (size_t j = k; j < path.size(); j++) {
                    cycle += g.rules[path[j].first].name;
                    cycle += " -> ";
                }
                cycle += g.rules[t].name;
                fail(g.rules[t].offset, "left recursion: " + cycle);
            }
            if (color[t] == 0) {
                color[t] = 1;
                path.push_back({t, 0});
            }
        }
    }
}

}  // namespace

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, std::shared_ptr<const GrammarVocab> vocab,
                                              std::string_view source) {
    if (!vocab) throw MoeError(std::string(source) + ": no vocabulary to parse the grammar against");
    std::shared_ptr<Grammar> g(new Grammar());
    g->impl_->text = std::string(gbnf);
    g->impl_->vocab = std::move(vocab);
    Parser(gbnf, source, g->impl_->vocab->tokenizer()).parse(*g->impl_);
    return g;
}

Grammar::Grammar() : impl_(std::make_unique<Impl>()) {}
Grammar::~Grammar() = default;

const std::string& Grammar::text() const {
    return impl_->text;
}

const GrammarVocab& Grammar::vocab() const {
    return *impl_->vocab;
}
