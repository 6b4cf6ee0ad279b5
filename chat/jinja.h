// A Jinja2 interpreter for chat templates: the subset real templates use
// (if/elif/else, for with loop.* / else / an if filter / unpacking, set
// (names, namespace attributes, blocks), namespace(), macros and call
// blocks, break/continue, filters, tests, Python string and dict methods,
// slicing), rendered as Hugging Face's apply_chat_template renders
// (trim_blocks, lstrip_blocks, its tojson, raise_exception, strftime_now).
// Parsing is jinja_parser.*, values jinja_value.*, filters and methods
// jinja_builtins.*; this file owns evaluation and the public entry points.
// Every error (syntax, an unknown filter, raise_exception, a type error, a
// limit) is one MoeError line naming the template and the line. Rendering is
// bounded (JinjaLimits): it runs under a WorkBudget (engine/text/
// work_budget.h) of steps, bytes and wall time, charged before each value
// is built, that work_budget_stop_all() (SIGTERM) and the server's cancel
// probe (the client is gone) also end; values nest at most JINJA_MAX_DEPTH
// deep, and the namespaces a render made are cleared when it ends, so one
// that holds itself is freed.
#pragma once
#include <chrono>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

struct JinjaStmt;

// What one render may spend (its WorkBudget). Steps bound time: each
// statement, expression, loop iteration and value a walk (repr, tojson, ==,
// sort) visits is a step, and so is every 64 bytes allocated (a template
// copying a growing list pays for each copy: mistral-common's v1 template
// spends about n*n/4 steps on n messages). Bytes bound memory: every string
// and list the render builds is charged, before it is built, by its size.
struct JinjaLimits {
    size_t max_steps = 10'000'000;
    size_t max_bytes = 64u << 20;         // allocated in all by the strings and lists built
    size_t max_output_bytes = 64u << 20;  // the rendered text, and any one string built on the way
    size_t max_list_items = 1'000'000;    // any one list built (range(), [x] * n)
    int max_call_depth = 100;             // nested macro calls
    std::chrono::milliseconds max_time{10'000};  // wall time of one render
};

struct JinjaRenderOptions {
    JinjaLimits limits;
    // The time strftime_now() formats; unset: the local time now. Tests fix it.
    std::optional<std::tm> now;
};

class JinjaTemplate {
public:
    // Parses `source`; MoeError "<name> line N: ..." on a syntax error.
    explicit JinjaTemplate(std::string_view source, std::string name = "chat template");

    // Renders with these variables (besides the globals range, namespace,
    // dict, raise_exception and strftime_now).
    std::string render(const JinjaDict& variables, const JinjaRenderOptions& options = {}) const;

    const std::string& name() const { return name_; }
    const std::string& source() const { return source_; }

private:
    std::string name_;
    std::string source_;
    std::shared_ptr<const std::vector<std::unique_ptr<JinjaStmt>>> body_;
};

// The variables Hugging Face's apply_chat_template passes: messages, tools
// (none when absent), documents (none), add_generation_prompt, the special
// tokens, and any extra keyword (enable_thinking, ...). JSON objects keep
// their key order (ordered_json), as Python's dicts do, so tojson prints keys
// in the request's order.
struct JinjaChatInput {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;  // null: no tools
    bool add_generation_prompt = false;
    // The special tokens (unset: undefined in the template, as when a
    // tokenizer has none) and more variables by name (enable_thinking, the
    // other special tokens ...); extras may not be named like the variables above.
    std::optional<std::string> bos_token, eos_token;
    nlohmann::ordered_json extras = nlohmann::ordered_json::object();
};

JinjaDict jinja_chat_variables(const JinjaChatInput& input);
std::string jinja_render_chat(const JinjaTemplate& tmpl, const JinjaChatInput& input,
                              const JinjaRenderOptions& options = {});
