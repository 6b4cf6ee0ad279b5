// Jinja lexer and parser (see jinja_parser.h). The lexer follows jinja2's
// rules for Hugging Face's environment (trim_blocks, lstrip_blocks): '-'
// strips all whitespace on its side of a tag, '+' keeps it, a block or
// comment tag alone on its line loses the line's indentation, and the newline
// right after a block or comment tag is dropped. The parser's precedence is
// jinja2's: conditional < or < and < not < comparisons (and in) < + - < ~ <
// * / // % < ** < unary - + < filters and tests < postfix (. [] ()).
#include "chat/jinja_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <initializer_list>

#include "base/errors.h"
#include "base/utf8.h"

namespace {

enum class TokType { DATA, VAR_BEGIN, VAR_END, BLOCK_BEGIN, BLOCK_END, NAME, STRING, INT, FLOAT, OP, END_OF_INPUT };

struct Token {
    TokType type;
    std::string text;  // DATA, NAME, STRING (decoded), OP; INT/FLOAT source
    int line;
};

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

[[noreturn]] void syntax_error(const std::string& name, int line, const std::string& msg) {
    std::string m = name;
    m += " line ";
    m += std::to_string(line);
    m += ": ";
    m += msg;
    throw MoeError(m);
}

// \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_source(std::string_view src) {
    std::string out;
    out.reserve(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
        if (src[i] == '\r') {
            out += '\n';
            if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
        } else {
            out += src[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

int count_newlines(std::string_view s, size_t from, size_t to) {
    int n = 0;
    for (size_t i = from; i < to; ++i) n += s[i] == '\n';
    return n;
}

class Lexer {
public:
    Lexer(const std::string& src, const std::string& name) : src_(src), name_(name) {}

    std::vector<Token> run() {
        bool line_starting = true;
        while (pos_ < src_.size()) {
            size_t tag = find_tag(pos_);
            if (tag == std::string::npos) {
                emit_data(pos_, src_.size());
                break;
            }
            char kind = src_[tag + 1];  // '{', '%' or '#'
            char sign = sign_at(tag + 2);
            emit_text_before(tag, sign, kind != '{', line_starting);
            pos_ = tag + 2 + (sign ? 1 : 0);
            if (kind == '%' && lex_raw(line_starting)) continue;
            if (kind == '#') {
                size_t end = src_.find("#}", pos_);
                if (end == std::string::npos) syntax_error(name_, line_, "missing end of comment tag");
                char end_sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
                line_ += count_newlines(src_, pos_, end);
                pos_ = end + 2;
                line_starting = finish_tag_end(end_sign, true);
                continue;
            }
            bool block = kind == '%';
            tokens_.push_back({block ? TokType::BLOCK_BEGIN : TokType::VAR_BEGIN, "", line_});
            line_starting = lex_tag(block);
        }
        tokens_.push_back({TokType::END_OF_INPUT, "", line_});
        return std::move(tokens_);
    }

private:
    const std::string& src_;
    const std::string& name_;
    size_t pos_ = 0;
    int line_ = 1;
    std::vector<Token> tokens_;

    char sign_at(size_t at) const { return at < src_.size() && (src_[at] == '-' || src_[at] == '+') ? src_[at] : 0; }

    // The text [pos_, tag) before a tag, less what the tag strips: all
    // whitespace for '-'; for a block or comment tag (lstrip_blocks), the
    // indentation when only whitespace stands between the line's start and it.
    void emit_text_before(size_t tag, char sign, bool lstrip, bool line_starting) {
        size_t text_end = tag;
        if (sign == '-') {
            while (text_end > pos_ && is_space(src_[text_end - 1])) --text_end;
        } else if (sign != '+' && lstrip) {
            // The line's start, looked for back to pos_ only (not to the
            // template's start: that made lexing quadratic).
            size_t l_pos = tag;
            while (l_pos > pos_ && src_[l_pos - 1] != '\n') --l_pos;
            if ((l_pos > pos_ || line_starting) && l_pos < tag) {
                bool all_space = true;
                for (size_t i = l_pos; i < tag; ++i) all_space = all_space && is_space(src_[i]);
                if (all_space) text_end = l_pos;
            }
        }
        emit_data(pos_, text_end);
        line_ += count_newlines(src_, text_end, tag);
    }

    // After "{%" (and its sign) at pos_: "raw %}" starts text taken as it is
    // up to "{% endraw %}". Returns false, consuming nothing, for other tags.
    bool lex_raw(bool& line_starting) {
        size_t at = pos_;
        while (at < src_.size() && is_space(src_[at])) ++at;
        if (src_.compare(at, 3, "raw") != 0 ||
            (at + 3 < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[at + 3])) || src_[at + 3] == '_'))) {
            return false;
        }
        at += 3;
        while (at < src_.size() && is_space(src_[at])) ++at;
        char sign = src_.compare(at, 3, "-%}") == 0 ? '-' : 0;
        if (!sign && src_.compare(at, 2, "%}") != 0) return false;
        line_ += count_newlines(src_, pos_, at);
        pos_ = at + (sign ? 3 : 2);
        // No trim_blocks newline after "raw %}" (jinja2's rule has none).
        bool raw_line_starting = sign ? finish_tag_end(sign, false) : false;
        for (size_t tag = find_tag(pos_); tag != std::string::npos; tag = find_tag(tag + 1)) {
            if (src_[tag + 1] != '%') continue;
            char begin_sign = sign_at(tag + 2);
            size_t e = tag + 2 + (begin_sign ? 1 : 0);
            while (e < src_.size() && is_space(src_[e])) ++e;
            if (src_.compare(e, 6, "endraw") != 0) continue;
            e += 6;
            while (e < src_.size() && is_space(src_[e])) ++e;
            char end_sign = sign_at(e);
            if (src_.compare(e + (end_sign ? 1 : 0), 2, "%}") != 0) continue;
            emit_text_before(tag, begin_sign, true, raw_line_starting);
            line_ += count_newlines(src_, tag, e);
            pos_ = e + (end_sign ? 1 : 0) + 2;
            line_starting = finish_tag_end(end_sign, true);
            return true;
        }
        syntax_error(name_, line_, "missing end of raw directive");
    }

    size_t find_tag(size_t from) const {
        for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
            if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        }
        return std::string::npos;
    }

    void emit_data(size_t from, size_t to) {
        if (to > from) tokens_.push_back({TokType::DATA, src_.substr(from, to - from), line_});
        line_ += count_newlines(src_, from, to);
    }

    // After a tag's closing characters at pos_: '-' eats the whitespace that
    // follows, trim_blocks one newline after a block or comment. Returns
    // whether the match ended with a newline (jinja2's line_starting).
    bool finish_tag_end(char sign, bool trims_newline) {
        if (sign == '-') {
            size_t start = pos_;
            while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
            line_ += count_newlines(src_, start, pos_);
            return pos_ > start && src_[pos_ - 1] == '\n';
        }
        if (sign != '+' && trims_newline && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
            ++line_;
            return true;
        }
        return false;
    }

    bool lex_tag(bool block) {
        const char* close = block ? "%}" : "}}";
        int braces = 0;
        for (;;) {
            while (pos_ < src_.size() && is_space(src_[pos_])) {
                if (src_[pos_] == '\n') ++line_;
                ++pos_;
            }
            if (pos_ >= src_.size())
                syntax_error(name_, line_, block ? "unclosed tag: missing '%}'" : "unclosed expression: missing '}}'");
            if (braces == 0) {
                char sign = (src_[pos_] == '-' || (block && src_[pos_] == '+')) ? src_[pos_] : 0;
                size_t at = pos_ + (sign ? 1 : 0);
                if (src_.compare(at, 2, close) == 0) {
                    tokens_.push_back({block ? TokType::BLOCK_END : TokType::VAR_END, "", line_});
                    pos_ = at + 2;
                    return finish_tag_end(sign, block);
                }
            }
            char c = src_[pos_];
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                size_t start = pos_;
                while (pos_ < src_.size() &&
                       (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
                    ++pos_;
                tokens_.push_back({TokType::NAME, src_.substr(start, pos_ - start), line_});
            } else if (std::isdigit(static_cast<unsigned char>(c))) {
                lex_number();
            } else if (c == '\'' || c == '"') {
                lex_string(c);
            } else {
                static const char* const OPS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/",
                                                  "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                                  "<",  ">",  "=",  ".",  ":",  "|",  ",", ";"};
                const char* found = nullptr;
                for (const char* op : OPS) {
                    if (src_.compare(pos_, std::strlen(op), op) == 0) {
                        found = op;
                        break;
                    }
                }
                if (!found) syntax_error(name_, line_, std::string("unexpected character '") + c + "'");
                std::string op = found;
                if (op == "(" || op == "[" || op == "{") ++braces;
                if (op == ")" || op == "]" || op == "}") {
                    if (braces == 0) syntax_error(name_, line_, "unexpected '" + op + "'");
                    --braces;
                }
                tokens_.push_back({TokType::OP, op, line_});
                pos_ += op.size();
            }
        }
    }

    void lex_number() {
        size_t start = pos_;
        auto digits = [&] {
            while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
                ++pos_;
        };
        digits();
        bool is_float = false;
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
            is_float = true;
            ++pos_;
            digits();
        }
        if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
            size_t save = pos_++;
            if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
            if (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
                is_float = true;
                digits();
            } else {
                pos_ = save;
            }
        }
        std::string text;
        for (size_t i = start; i < pos_; ++i) {
            if (src_[i] != '_') text += src_[i];
        }
        tokens_.push_back({is_float ? TokType::FLOAT : TokType::INT, text, line_});
    }

    int hex_value(size_t at, int n) {
        int v = 0;
        for (int i = 0; i < n; ++i) {
            char c = at + i < src_.size() ? src_[at + i] : 0;
            int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                    : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
                                                                : -1;
            if (d < 0) syntax_error(name_, line_, "truncated \\x, \\u or \\U escape in a string");
            v = v * 16 + d;
        }
        return v;
    }

    // Python's string escapes (jinja2 decodes literals with unicode-escape).
    void lex_string(char quote) {
        int line = line_;
        std::string out;
        ++pos_;
        for (;;) {
            if (pos_ >= src_.size()) syntax_error(name_, line, "unterminated string");
            char c = src_[pos_];
            if (c == quote) {
                ++pos_;
                break;
            }
            if (c == '\n') ++line_;
            if (c != '\\' || pos_ + 1 >= src_.size()) {
                out += c;
                ++pos_;
                continue;
            }
            char e = src_[pos_ + 1];
            pos_ += 2;
            switch (e) {
            case '\n':
                ++line_;
                break;
            case '\\':
                out += '\\';
                break;
            case '\'':
                out += '\'';
                break;
            case '"':
                out += '"';
                break;
            case 'a':
                out += '\a';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'v':
                out += '\v';
                break;
            case 'x':
                utf8_append(out, static_cast<uint32_t>(hex_value(pos_, 2)));
                pos_ += 2;
                break;
            case 'u':
                utf8_append(out, static_cast<uint32_t>(hex_value(pos_, 4)));
                pos_ += 4;
                break;
            case 'U': {
                uint32_t cp = static_cast<uint32_t>(hex_value(pos_, 8));
                if (cp > 0x10ffff) syntax_error(name_, line_, "\\U escape beyond U+10FFFF");
                utf8_append(out, cp);
                pos_ += 8;
                break;
            }
            default:
                if (e >= '0' && e <= '7') {
                    uint32_t v = static_cast<uint32_t>(e - '0');
                    for (int i = 0; i < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++i) {
                        v = v * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
                    }
                    utf8_append(out, v);
                } else {
                    out += '\\';
                    out += e;
                    if (e == '\n') ++line_;
                }
            }
        }
        // Adjacent literals join ('a' 'b' is 'ab'), as jinja2's parser does.
        if (!tokens_.empty() && tokens_.back().type == TokType::STRING) {
            tokens_.back().text += out;
        } else {
            tokens_.push_back({TokType::STRING, std::move(out), line});
        }
    }
};

class Parser {
public:
    Parser(std::vector<Token> tokens, const std::string& name) : toks_(std::move(tokens)), name_(name) {}

    std::vector<JinjaStmtPtr> parse_template() {
        std::vector<JinjaStmtPtr> body;
        std::string end = parse_body(body, {}, 0);
        (void)end;
        return body;
    }

private:
    std::vector<Token> toks_;
    const std::string& name_;
    size_t i_ = 0;
    int depth_ = 0;

    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
            if (++p.depth_ > JINJA_MAX_PARSE_DEPTH) {
                p.fail("template nested more than " + std::to_string(JINJA_MAX_PARSE_DEPTH) + " levels deep");
            }
        }
        ~DepthGuard() { --p.depth_; }
    };

    const Token& cur() const { return toks_[i_]; }
    const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
    [[noreturn]] void fail(const std::string& msg) const { syntax_error(name_, cur().line, msg); }

    static std::string describe(const Token& t) {
        switch (t.type) {
        case TokType::DATA:
            return "template text";
        case TokType::VAR_BEGIN:
            return "'{{'";
        case TokType::VAR_END:
            return "'}}'";
        case TokType::BLOCK_BEGIN:
            return "'{%'";
        case TokType::BLOCK_END:
            return "'%}'";
        case TokType::STRING:
            return "a string";
        case TokType::END_OF_INPUT:
            return "the end of the template";
        default:
            return "'" + t.text + "'";
        }
    }

    bool is_op(const char* op) const { return cur().type == TokType::OP && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == TokType::NAME && cur().text == n; }

    void expect_op(const char* op) {
        if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
        ++i_;
    }
    void expect_name(const char* n) {
        if (!is_name(n)) fail(std::string("expected '") + n + "', got " + describe(cur()));
        ++i_;
    }
    std::string expect_identifier() {
        if (cur().type != TokType::NAME) fail("expected a name, got " + describe(cur()));
        return toks_[i_++].text;
    }
    void expect_block_end() {
        if (cur().type != TokType::BLOCK_END) fail("expected '%}', got " + describe(cur()));
        ++i_;
    }

    // A child joins its parent; the tree's height stays within
    // JINJA_MAX_PARSE_DEPTH, so evaluating or freeing it never recurses deeper
    // (operator and filter chains are built in loops, not by recursion).
    void grow(JinjaExpr& parent, const JinjaExpr& child) {
        parent.height = std::max(parent.height, child.height + 1);
        if (parent.height > JINJA_MAX_PARSE_DEPTH) {
            syntax_error(name_, parent.line,
                         "expression nested more than " + std::to_string(JINJA_MAX_PARSE_DEPTH) + " levels deep");
        }
    }
    void add(JinjaExpr& parent, JinjaExprPtr child) {
        if (child) grow(parent, *child);
        parent.args.push_back(std::move(child));
    }

    JinjaExprPtr node(JinjaExprKind kind, int line) {
        auto e = std::make_unique<JinjaExpr>();
        e->kind = kind;
        e->line = line;
        return e;
    }

    // Statements until a {% tag %} named in `ends` (consumed up to the tag's
    // name, which is returned); at depth 0 until the end of the input.
    std::string parse_body(std::vector<JinjaStmtPtr>& out, std::initializer_list<const char*> ends, int opened_line) {
        DepthGuard guard(*this);
        for (;;) {
            const Token& t = cur();
            if (t.type == TokType::END_OF_INPUT) {
                if (ends.size() == 0) return {};
                std::string msg = "unclosed block opened on line " + std::to_string(opened_line) + ": expected";
                for (const char* e : ends) {
                    msg += " '";
                    msg += e;
                    msg += "'";
                }
                fail(msg + " before the end of the template");
            }
            if (t.type == TokType::DATA) {
                auto s = std::make_unique<JinjaStmt>();
                s->kind = JinjaStmtKind::TEXT;
                s->line = t.line;
                s->text = t.text;
                out.push_back(std::move(s));
                ++i_;
                continue;
            }
            if (t.type == TokType::VAR_BEGIN) {
                ++i_;
                auto s = std::make_unique<JinjaStmt>();
                s->kind = JinjaStmtKind::PRINT;
                s->line = t.line;
                s->expr = parse_tuple_or_expr();
                if (cur().type != TokType::VAR_END) fail("expected '}}', got " + describe(cur()));
                ++i_;
                out.push_back(std::move(s));
                continue;
            }
            if (t.type != TokType::BLOCK_BEGIN) fail("unexpected " + describe(t));
            ++i_;
            if (cur().type != TokType::NAME) fail("expected a statement name, got " + describe(cur()));
            std::string word = cur().text;
            for (const char* e : ends) {
                if (word == e) {
                    ++i_;
                    return word;
                }
            }
            out.push_back(parse_statement());
        }
    }

    JinjaStmtPtr parse_statement() {
        int line = cur().line;
        std::string word = expect_identifier();
        auto s = std::make_unique<JinjaStmt>();
        s->line = line;
        if (word == "if") {
            s->kind = JinjaStmtKind::IF;
            parse_if_rest(*s, line);
        } else if (word == "for") {
            s->kind = JinjaStmtKind::FOR;
            parse_targets(s->targets);
            expect_name("in");
            s->expr = parse_tuple_or_expr(false);
            if (is_name("if")) {
                ++i_;
                s->filter = parse_expression();
            }
            if (is_name("recursive")) fail("recursive for loops are not supported");
            expect_block_end();
            std::string end = parse_body(s->body, {"else", "endfor"}, line);
            expect_block_end();
            if (end == "else") {
                parse_body(s->else_body, {"endfor"}, line);
                expect_block_end();
            }
        } else if (word == "set") {
            std::string first = expect_identifier();
            if (is_op(".")) {
                ++i_;
                s->kind = JinjaStmtKind::SET_ATTR;
                s->targets = {first, expect_identifier()};
                expect_op("=");
                s->expr = parse_tuple_or_expr();
                expect_block_end();
            } else {
                s->targets.push_back(first);
                while (is_op(",")) {
                    ++i_;
                    s->targets.push_back(expect_identifier());
                }
                if (is_op("=")) {
                    ++i_;
                    s->kind = JinjaStmtKind::SET;
                    s->expr = parse_tuple_or_expr();
                    expect_block_end();
                } else {
                    if (s->targets.size() != 1) fail("a block set assigns one name");
                    s->kind = JinjaStmtKind::SET_BLOCK;
                    expect_block_end();
                    parse_body(s->body, {"endset"}, line);
                    expect_block_end();
                }
            }
        } else if (word == "macro") {
            s->kind = JinjaStmtKind::MACRO;
            s->text = expect_identifier();
            parse_params(s->params);
            expect_block_end();
            parse_body(s->body, {"endmacro"}, line);
            if (cur().type == TokType::NAME) ++i_;  // {% endmacro name %}
            expect_block_end();
        } else if (word == "call") {
            s->kind = JinjaStmtKind::CALL_BLOCK;
            if (is_op("(")) parse_params(s->params);
            s->expr = parse_expression();
            if (s->expr->kind != JinjaExprKind::CALL) fail("expected a call after 'call'");
            expect_block_end();
            parse_body(s->body, {"endcall"}, line);
            expect_block_end();
        } else if (word == "with") {
            s->kind = JinjaStmtKind::WITH;
            while (cur().type != TokType::BLOCK_END) {
                if (!s->params.empty()) expect_op(",");
                std::string target = expect_identifier();
                expect_op("=");
                s->params.emplace_back(std::move(target), parse_expression());
            }
            expect_block_end();
            parse_body(s->body, {"endwith"}, line);
            expect_block_end();
        } else if (word == "generation") {
            s->kind = JinjaStmtKind::GENERATION;
            expect_block_end();
            parse_body(s->body, {"endgeneration"}, line);
            expect_block_end();
        } else if (word == "break" || word == "continue") {
            s->kind = word == "break" ? JinjaStmtKind::BREAK : JinjaStmtKind::CONTINUE;
            expect_block_end();
        } else {
            syntax_error(name_, line, "unknown statement '" + word + "'");
        }
        return s;
    }

    void parse_if_rest(JinjaStmt& s, int line) {
        s.expr = parse_tuple_or_expr();
        expect_block_end();
        std::string end = parse_body(s.body, {"elif", "else", "endif"}, line);
        if (end == "elif") {
            auto elif = std::make_unique<JinjaStmt>();
            elif->kind = JinjaStmtKind::IF;
            elif->line = cur().line;
            DepthGuard guard(*this);
            parse_if_rest(*elif, line);
            s.else_body.push_back(std::move(elif));
            return;
        }
        expect_block_end();
        if (end == "else") {
            parse_body(s.else_body, {"endif"}, line);
            expect_block_end();
        }
    }

    void parse_targets(std::vector<std::string>& targets) {
        bool paren = is_op("(");
        if (paren) ++i_;
        targets.push_back(expect_identifier());
        while (is_op(",")) {
            ++i_;
            if (paren && is_op(")")) break;
            targets.push_back(expect_identifier());
        }
        if (paren) expect_op(")");
    }

    void parse_params(std::vector<std::pair<std::string, JinjaExprPtr>>& params) {
        expect_op("(");
        while (!is_op(")")) {
            if (!params.empty()) expect_op(",");
            if (is_op(")")) break;
            std::string p = expect_identifier();
            JinjaExprPtr def;
            if (is_op("=")) {
                ++i_;
                def = parse_expression();
            }
            params.emplace_back(std::move(p), std::move(def));
        }
        ++i_;
    }

    // "a, b" without brackets is a tuple where jinja2 allows one.
    JinjaExprPtr parse_tuple_or_expr(bool with_condexpr = true) {
        int line = cur().line;
        JinjaExprPtr first = with_condexpr ? parse_expression() : parse_or();
        if (!is_op(",")) return first;
        auto t = node(JinjaExprKind::TUPLE, line);
        add(*t, std::move(first));
        while (is_op(",")) {
            ++i_;
            if (cur().type == TokType::BLOCK_END || cur().type == TokType::VAR_END || is_op(")")) break;
            add(*t, with_condexpr ? parse_expression() : parse_or());
        }
        return t;
    }

    JinjaExprPtr parse_expression() {
        DepthGuard guard(*this);
        int line = cur().line;
        JinjaExprPtr e = parse_or();
        while (is_name("if")) {
            ++i_;
            auto c = node(JinjaExprKind::CONDITIONAL, line);
            add(*c, std::move(e));
            add(*c, parse_or());
            if (is_name("else")) {
                ++i_;
                add(*c, parse_expression());
            } else {
                add(*c, nullptr);
            }
            e = std::move(c);
        }
        return e;
    }

    JinjaExprPtr binary(const std::string& op, JinjaExprPtr a, JinjaExprPtr b, int line) {
        auto n = node(JinjaExprKind::BINARY, line);
        n->name = op;
        add(*n, std::move(a));
        add(*n, std::move(b));
        return n;
    }

    // One left-associative level: operands from `next` joined by any of
    // `ops` (keywords such as "and" when keyword, else operators).
    JinjaExprPtr left_assoc(JinjaExprPtr (Parser::*next)(), std::initializer_list<const char*> ops, bool keyword) {
        JinjaExprPtr e = (this->*next)();
        for (;;) {
            const char* found = nullptr;
            for (const char* op : ops)
                if (keyword ? is_name(op) : is_op(op)) found = op;
            if (!found) return e;
            int line = cur().line;
            ++i_;
            e = binary(found, std::move(e), (this->*next)(), line);
        }
    }

    JinjaExprPtr parse_or() { return left_assoc(&Parser::parse_and, {"or"}, true); }
    JinjaExprPtr parse_and() { return left_assoc(&Parser::parse_not, {"and"}, true); }

    JinjaExprPtr parse_not() {
        if (is_name("not")) {
            DepthGuard guard(*this);
            auto n = node(JinjaExprKind::UNARY, cur().line);
            ++i_;
            n->name = "not";
            add(*n, parse_not());
            return n;
        }
        return parse_compare();
    }

    JinjaExprPtr parse_compare() {
        JinjaExprPtr e = parse_math1();
        for (;;) {
            int line = cur().line;
            std::string op;
            if (cur().type == TokType::OP && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                              cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
                op = cur().text;
                ++i_;
            } else if (is_name("in")) {
                op = "in";
                ++i_;
            } else if (is_name("not") && peek().type == TokType::NAME && peek().text == "in") {
                op = "not in";
                i_ += 2;
            } else {
                return e;
            }
            e = binary(op, std::move(e), parse_math1(), line);
        }
    }

    JinjaExprPtr parse_math1() { return left_assoc(&Parser::parse_concat, {"+", "-"}, false); }
    JinjaExprPtr parse_concat() { return left_assoc(&Parser::parse_math2, {"~"}, false); }
    JinjaExprPtr parse_math2() { return left_assoc(&Parser::parse_pow, {"*", "/", "//", "%"}, false); }

    JinjaExprPtr parse_pow() {
        JinjaExprPtr e = parse_unary(true);
        while (is_op("**")) {
            int line = cur().line;
            ++i_;
            e = binary("**", std::move(e), parse_unary(true), line);
        }
        return e;
    }

    JinjaExprPtr parse_unary(bool with_filter) {
        DepthGuard guard(*this);
        JinjaExprPtr e;
        if (is_op("-") || is_op("+")) {
            e = node(JinjaExprKind::UNARY, cur().line);
            e->name = cur().text;
            ++i_;
            add(*e, parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filters_and_tests(std::move(e));
        return e;
    }

    JinjaExprPtr parse_primary() {
        const Token& t = cur();
        int line = t.line;
        if (t.type == TokType::NAME) {
            ++i_;
            if (t.text == "true" || t.text == "True") return literal(JinjaValue::from_bool(true), line);
            if (t.text == "false" || t.text == "False") return literal(JinjaValue::from_bool(false), line);
            if (t.text == "none" || t.text == "None") return literal(JinjaValue::none(), line);
            auto n = node(JinjaExprKind::NAME, line);
            n->name = t.text;
            return n;
        }
        if (t.type == TokType::STRING) {
            ++i_;
            return literal(JinjaValue::from_string(t.text), line);
        }
        if (t.type == TokType::INT) {
            ++i_;
            int64_t v = 0;
            auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
            if (r.ec != std::errc()) syntax_error(name_, line, "integer literal out of range: " + t.text);
            return literal(JinjaValue::from_int(v), line);
        }
        if (t.type == TokType::FLOAT) {
            ++i_;
            return literal(JinjaValue::from_float(std::strtod(t.text.c_str(), nullptr)), line);
        }
        if (is_op("(")) {
            ++i_;
            if (is_op(")")) {
                ++i_;
                return node(JinjaExprKind::TUPLE, line);
            }
            JinjaExprPtr first = parse_expression();
            if (is_op(")")) {
                ++i_;
                return first;
            }
            auto tup = node(JinjaExprKind::TUPLE, line);
            add(*tup, std::move(first));
            while (is_op(",")) {
                ++i_;
                if (is_op(")")) break;
                add(*tup, parse_expression());
            }
            expect_op(")");
            return tup;
        }
        if (is_op("[")) {
            ++i_;
            auto l = node(JinjaExprKind::LIST, line);
            while (!is_op("]")) {
                if (!l->args.empty()) expect_op(",");
                if (is_op("]")) break;
                add(*l, parse_expression());
            }
            ++i_;
            return l;
        }
        if (is_op("{")) {
            ++i_;
            auto d = node(JinjaExprKind::DICT, line);
            while (!is_op("}")) {
                if (!d->args.empty()) expect_op(",");
                if (is_op("}")) break;
                add(*d, parse_expression());
                expect_op(":");
                add(*d, parse_expression());
            }
            ++i_;
            return d;
        }
        fail("unexpected " + describe(t) + " in an expression");
    }

    JinjaExprPtr literal(JinjaValue v, int line) {
        auto n = node(JinjaExprKind::LITERAL, line);
        n->value = std::move(v);
        return n;
    }

    JinjaExprPtr parse_postfix(JinjaExprPtr e) {
        for (;;) {
            int line = cur().line;
            if (is_op(".")) {
                ++i_;
                auto a = node(JinjaExprKind::ATTRIBUTE, line);
                if (cur().type == TokType::INT) {
                    // x.0 is x[0] in jinja2.
                    auto s = node(JinjaExprKind::SUBSCRIPT, line);
                    add(*s, std::move(e));
                    add(*s, parse_primary());
                    e = std::move(s);
                    continue;
                }
                a->name = expect_identifier();
                add(*a, std::move(e));
                e = std::move(a);
            } else if (is_op("[")) {
                ++i_;
                e = parse_subscript(std::move(e), line);
            } else if (is_op("(")) {
                auto c = node(JinjaExprKind::CALL, line);
                add(*c, std::move(e));
                parse_call_args(*c);
                e = std::move(c);
            } else {
                return e;
            }
        }
    }

    JinjaExprPtr parse_subscript(JinjaExprPtr obj, int line) {
        JinjaExprPtr parts[3];
        int colons = 0;
        for (;;) {
            if (is_op("]")) break;
            if (is_op(":")) {
                if (++colons > 2) fail("too many ':' in a slice");
                ++i_;
                continue;
            }
            if (parts[colons]) fail("expected ':' or ']' in a subscript");
            parts[colons] = parse_expression();
        }
        ++i_;
        if (colons == 0) {
            if (!parts[0]) fail("empty subscript");
            auto s = node(JinjaExprKind::SUBSCRIPT, line);
            add(*s, std::move(obj));
            add(*s, std::move(parts[0]));
            return s;
        }
        auto s = node(JinjaExprKind::SLICE, line);
        add(*s, std::move(obj));
        for (auto& p : parts) add(*s, std::move(p));
        return s;
    }

    void parse_call_args(JinjaExpr& call) {
        expect_op("(");
        bool first = true;
        while (!is_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (is_op(")")) break;
            if (cur().type == TokType::NAME && peek().type == TokType::OP && peek().text == "=") {
                std::string key = cur().text;
                i_ += 2;
                JinjaExprPtr value = parse_expression();
                grow(call, *value);
                call.kwargs.emplace_back(std::move(key), std::move(value));
            } else {
                if (!call.kwargs.empty()) fail("a positional argument follows a keyword argument");
                add(call, parse_expression());
            }
        }
        ++i_;
    }

    std::string dotted_name() {
        std::string n = expect_identifier();
        while (is_op(".")) {
            ++i_;
            n += '.';
            n += expect_identifier();
        }
        return n;
    }

    JinjaExprPtr parse_filters_and_tests(JinjaExprPtr e) {
        for (;;) {
            int line = cur().line;
            if (is_op("|")) {
                ++i_;
                auto f = node(JinjaExprKind::FILTER, line);
                f->name = dotted_name();
                add(*f, std::move(e));
                if (is_op("(")) parse_call_args(*f);
                e = std::move(f);
            } else if (is_name("is")) {
                ++i_;
                auto t = node(JinjaExprKind::TEST, line);
                if (is_name("not")) {
                    t->negated = true;
                    ++i_;
                }
                t->name = dotted_name();
                add(*t, std::move(e));
                if (is_op("(")) {
                    parse_call_args(*t);
                } else if ((cur().type == TokType::NAME || cur().type == TokType::STRING ||
                            cur().type == TokType::INT || cur().type == TokType::FLOAT || is_op("[") || is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and")) {
                    if (is_name("is")) fail("'is' cannot follow a test's argument");
                    add(*t, parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                auto c = node(JinjaExprKind::CALL, line);
                add(*c, std::move(e));
                parse_call_args(*c);
                e = std::move(c);
            } else {
                return e;
            }
        }
    }
};

}  // namespace

std::vector<JinjaStmtPtr> jinja_parse(std::string_view source, const std::string& name) {
    std::string src = normalize_source(source);
    std::vector<Token> tokens = Lexer(src, name).run();
    return Parser(std::move(tokens), name).parse_template();
}
