// The Jinja syntax tree and the parser that builds it from template text:
// the lexer (data, {{ }}, {% %}, {# #}, whitespace control with '-' and '+',
// and the environment Hugging Face renders chat templates with:
// trim_blocks=True, lstrip_blocks=True, one trailing newline dropped, every
// newline normalised to "\n"), then a recursive-descent parser with jinja2's
// operator precedence. Every node carries its template line. Nesting is
// bounded (JINJA_MAX_PARSE_DEPTH), so hostile input cannot overflow the
// stack. Evaluation is chat/jinja.cpp's.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

constexpr int JINJA_MAX_PARSE_DEPTH = 200;

enum class JinjaExprKind {
    LITERAL,      // value
    NAME,         // name
    LIST,         // args: items
    TUPLE,        // args: items
    DICT,         // args: key0, value0, key1, value1 ...
    ATTRIBUTE,    // args[0].name
    SUBSCRIPT,    // args[0][args[1]]
    SLICE,        // args[0][args[1]:args[2]:args[3]] (null where omitted)
    CALL,         // args[0](args[1..], kwargs)
    FILTER,       // args[0] | name(args[1..], kwargs)
    TEST,         // args[0] is [not] name(args[1..], kwargs)
    UNARY,        // name ("-", "+", "not") args[0]
    BINARY,       // args[0] name args[1]; name is the operator ("+", "~", "and", "in", "not in", ...)
    CONDITIONAL,  // args[0] if args[1] else args[2] (args[2] null: undefined)
};

struct JinjaExpr;
using JinjaExprPtr = std::unique_ptr<JinjaExpr>;

struct JinjaExpr {
    JinjaExprKind kind = JinjaExprKind::LITERAL;
    int line = 0;
    JinjaValue value;
    std::string name;
    std::vector<JinjaExprPtr> args;
    std::vector<std::pair<std::string, JinjaExprPtr>> kwargs;
    bool negated = false;  // TEST: "is not"
    int height = 1;        // levels of the subtree (bounded by the parser)
};

enum class JinjaStmtKind {
    TEXT,        // text
    PRINT,       // {{ expr }}
    IF,          // if expr: body, else else_body (an elif is an IF alone in else_body)
    FOR,         // for targets in expr [if filter]: body, else else_body
    SET,         // set targets = expr (one name, or several unpacked)
    SET_ATTR,    // set targets[0].targets[1] = expr
    SET_BLOCK,   // set targets[0] %}body{% endset
    MACRO,       // macro text(params) body
    CALL_BLOCK,  // call(params) expr %}body{% endcall: caller() renders body
    WITH,        // with params (name = expr, ...) %}body{% endwith: a scope of its own
    GENERATION,  // generation %}body{% endgeneration (transformers' tag: the body, rendered)
    BREAK,
    CONTINUE,
};

struct JinjaStmt;
using JinjaStmtPtr = std::unique_ptr<JinjaStmt>;

struct JinjaStmt {
    JinjaStmtKind kind = JinjaStmtKind::TEXT;
    int line = 0;
    std::string text;
    JinjaExprPtr expr;
    JinjaExprPtr filter;
    std::vector<std::string> targets;
    std::vector<std::pair<std::string, JinjaExprPtr>> params;  // MACRO / CALL_BLOCK: name, default (may be null)
    std::vector<JinjaStmtPtr> body;
    std::vector<JinjaStmtPtr> else_body;
};

// Parses a whole template; MoeError "<name> line N: ..." for a syntax error
// (unclosed block, unexpected token, ...); an unknown filter or test
// is an error when it is used, as in jinja2 3.1.
std::vector<JinjaStmtPtr> jinja_parse(std::string_view source, const std::string& name);
