// Tool-call formats, the reply parser and the call envelope grammar (see
// tool_calls.h). Only this file knows how a family writes its calls; the
// template that renders them into a prompt is the model's own Jinja.
#include "chat/tool_calls.h"

#include <array>

#include "base/errors.h"
#include "base/json_bounded.h"
#include "chat/json_schema.h"
#include "engine/text/tokenizer.h"

namespace {

using ojson = nlohmann::ordered_json;

// The table: rows are tried in this order by tool_call_format_detect
// (Hermes-3 is a Llama 3.1 model whose template has no <|python_tag|>).
const std::array<ToolCallFormat, 4> FORMATS = {{
    // Hermes 2/3, Qwen2.5, Qwen3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one block per call.
    {ToolCallFamily::HERMES, "hermes", "<tool_call>", "<tool_call>", "</tool_call>", false, true, false, "arguments",
     ToolCallIdStyle::OPENAI, "", R"("<tool_call>\n")", R"("\n</tool_call>")", R"("\n")", ""},
    // Mistral v3 / Nemo: the control token [TOOL_CALLS], then [{"name": ..., "arguments": {...}}, ...].
    {ToolCallFamily::MISTRAL, "mistral", "[TOOL_CALLS]", "[TOOL_CALLS]", "", true, true, false, "arguments",
     ToolCallIdStyle::ALNUM9, R"(<[[TOOL_CALLS]]> " "? "[")", "", "", R"(", ")", R"("]")"},
    // Llama 3.1 / 3.3: the reply is {"name": ..., "parameters": {...}}, maybe after <|python_tag|>; one call.
    {ToolCallFamily::LLAMA3, "llama3", "<|python_tag|>", "<|python_tag|>", "", false, false, true, "parameters",
     ToolCallIdStyle::OPENAI, "", "", "", "", ""},
    {ToolCallFamily::NONE, "none", "", "", "", false, false, false, "", ToolCallIdStyle::OPENAI, "", "", "", "", ""},
}};

// Deeper call JSON than this is malformed (bounds the JSON library's
// recursion when the arguments are written back out).
constexpr int MAX_DEPTH = 128;

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// The end of `text` without its trailing whitespace run.
size_t trim_end(std::string_view text) {
    size_t n = text.size();
    while (n > 0 && is_space(text[n - 1])) n--;
    return n;
}

bool is_alnum(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool id_fits(const std::string& id, ToolCallIdStyle style) {
    if (id.empty() || id.size() > 64) return false;
    for (char c : id) {
        if (!is_alnum(c) && !(style == ToolCallIdStyle::OPENAI && (c == '_' || c == '-'))) return false;
    }
    return style != ToolCallIdStyle::ALNUM9 || id.size() == 9;
}

// A reply's call JSON (the model's text: bounded as any outside JSON, no
// deeper than MAX_DEPTH); nullopt when it is not JSON or exceeds a limit.
std::optional<ojson> call_json(std::string_view text) {
    static constexpr JsonLimits LIMITS = {JSON_FILE_LIMITS.max_bytes, MAX_DEPTH, JSON_FILE_LIMITS.max_elements,
                                          JSON_FILE_LIMITS.max_keys, JSON_FILE_LIMITS.max_string_bytes};
    try {
        return json_parse_bounded<ojson>(text, LIMITS, "tool call");
    } catch (const JsonError&) {
        return std::nullopt;
    }
}

// The arguments as compact JSON text: an object, or a string holding one
// (as templates render OpenAI's string arguments back); nullopt otherwise.
std::optional<std::string> arguments_text(const ojson* args) {
    if (!args) return std::string("{}");
    if (args->is_object()) return args->dump();
    if (!args->is_string()) return std::nullopt;
    const std::string& text = args->get_ref<const std::string&>();
    std::optional<ojson> parsed = call_json(text);
    if (!parsed || !parsed->is_object()) return std::nullopt;
    return parsed->dump();
}

// {"name": ..., ARGS_KEY: ...} as a call (its "id" kept when it fits the style).
std::optional<ToolCall> call_of(const ojson& j, const ToolCallFormat& format) {
    if (!j.is_object()) return std::nullopt;
    auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
    const ojson* args = nullptr;
    for (std::string_view key : {format.args_key, std::string_view("arguments"), std::string_view("parameters")}) {
        auto it = j.find(std::string(key));
        if (it != j.end()) {
            args = &*it;
            break;
        }
    }
    std::optional<std::string> arguments = arguments_text(args);
    if (!arguments) return std::nullopt;
    ToolCall call;
    call.name = name->get<std::string>();
    call.arguments = std::move(*arguments);
    auto id = j.find("id");
    if (id != j.end() && id->is_string() && id_fits(id->get<std::string>(), format.id_style)) call.id = *id;
    return call;
}

// The calls of a complete JSON value after a trigger; empty when malformed.
std::vector<ToolCall> calls_of(std::string_view text, const ToolCallFormat& format) {
    std::optional<ojson> parsed = call_json(text);
    std::vector<ToolCall> calls;
    if (!parsed) return calls;
    const ojson& j = *parsed;
    if (j.is_array()) {
        for (const ojson& e : j) {
            std::optional<ToolCall> call = call_of(e, format);
            if (!call) return {};
            calls.push_back(std::move(*call));
        }
    } else if (std::optional<ToolCall> call = call_of(j, format)) {
        calls.push_back(std::move(*call));
    }
    return calls;
}

}  // namespace

std::span<const ToolCallFormat> tool_call_formats() {
    return FORMATS;
}

const ToolCallFormat& tool_call_format(ToolCallFamily family) {
    for (const ToolCallFormat& f : FORMATS) {
        if (f.family == family) return f;
    }
    return FORMATS.back();
}

const ToolCallFormat& tool_call_format_detect(std::string_view template_source) {
    for (const ToolCallFormat& f : FORMATS) {
        if (!f.marker.empty() && template_source.find(f.marker) != std::string_view::npos) return f;
    }
    return FORMATS.back();
}

int tool_call_trigger_token(const ToolCallFormat& format, const Tokenizer& tokenizer) {
    if (format.trigger.empty()) return -1;
    int id = tokenizer.piece_to_id(format.trigger);
    if (id < 0 || tokenizer.token_bytes(id) == format.trigger) return -1;
    return id;
}

int JsonBrackets::step(char c) {
    if (in_string) {
        if (escape)
            escape = false;
        else if (c == '\\')
            escape = true;
        else if (c == '"')
            in_string = false;
        return 0;
    }
    if (c == '"') in_string = true;
    const int change = (c == '{' || c == '[') ? 1 : (c == '}' || c == ']') ? -1 : 0;
    depth += change;
    return change;
}

ToolCallParser::ToolCallParser(const ToolCallFormat& format, uint64_t id_seed, int trigger_token)
    : format_(&format), trigger_token_(trigger_token), rng_(id_seed) {}

std::vector<ToolCallEvent> ToolCallParser::push(std::string_view text) {
    std::vector<ToolCallEvent> out;
    if (format_->family == ToolCallFamily::NONE) {
        release(text, out);
        return out;
    }
    (state_ == State::CALL ? body_ : buf_).append(text);
    run(out);
    return out;
}

std::vector<ToolCallEvent> ToolCallParser::push_token(int token, std::string_view text) {
    std::vector<ToolCallEvent> out = push(text);
    if (token >= 0 && token == trigger_token_) {
        for (ToolCallEvent& e : push(format_->trigger)) out.push_back(std::move(e));
    }
    return out;
}

std::vector<ToolCallEvent> ToolCallParser::finish() {
    std::vector<ToolCallEvent> out;
    while (state_ != State::TEXT) {
        if (state_ == State::CALL) {
            fail_call(out);  // never completed
        } else {
            state_ = State::TEXT;  // a cut close tag: what is left is text
            after_call_ = true;
        }
        run(out);
    }
    if (after_call_) buf_.erase(0, buf_.find_first_not_of(" \n\r\t"));
    after_call_ = false;
    release(buf_, out);
    buf_.clear();
    return out;
}

ToolCallReply ToolCallParser::reply() const {
    ToolCallReply r;
    r.calls = calls_;
    if (calls_.empty() || !content_.empty()) r.content = content_;
    return r;
}

void ToolCallParser::run(std::vector<ToolCallEvent>& out) {
    for (;;) {
        bool moved = state_ == State::TEXT ? scan_text(out) : state_ == State::CALL ? scan_call(out) : scan_close();
        if (!moved) return;
    }
}

void ToolCallParser::release(std::string_view text, std::vector<ToolCallEvent>& out) {
    if (text.empty()) return;
    at_start_ = false;
    content_.append(text);
    if (out.empty() || out.back().index >= 0) out.emplace_back();
    out.back().content.append(text);
}

bool ToolCallParser::scan_text(std::vector<ToolCallEvent>& out) {
    if (after_call_) {
        size_t k = buf_.find_first_not_of(" \n\r\t");
        if (k == std::string::npos) {
            buf_.clear();
            return false;
        }
        buf_.erase(0, k);
        after_call_ = false;
    }
    auto start_call = [&](size_t ws_begin, size_t trigger_begin, std::string_view trigger) {
        ws_before_ = buf_.substr(ws_begin, trigger_begin - ws_begin);
        trigger_ = trigger;
        body_ = buf_.substr(trigger_begin + trigger.size());
        buf_.clear();
        scan_pos_ = 0;
        brackets_ = JsonBrackets{};
        started_ = false;
        state_ = State::CALL;
        return true;
    };
    if (at_start_ && format_->object_at_start) {
        size_t k = buf_.find_first_not_of(" \n\r\t");
        if (k == std::string::npos) return false;  // only whitespace yet
        if (buf_[k] == '{') return start_call(0, k, "");
        at_start_ = false;
    }
    size_t p = buf_.find(format_->trigger);
    if (p != std::string::npos) {
        size_t t = trim_end(std::string_view(buf_).substr(0, p));
        release(std::string_view(buf_).substr(0, t), out);
        return start_call(t, p, format_->trigger);
    }
    // Hold the longest tail that may begin the trigger, and the whitespace before it.
    size_t hold = std::min(buf_.size(), format_->trigger.size() - 1);
    while (hold > 0 && !format_->trigger.starts_with(std::string_view(buf_).substr(buf_.size() - hold))) hold--;
    size_t r = trim_end(std::string_view(buf_).substr(0, buf_.size() - hold));
    release(std::string_view(buf_).substr(0, r), out);
    buf_.erase(0, r);
    return false;
}

bool ToolCallParser::scan_call(std::vector<ToolCallEvent>& out) {
    for (; scan_pos_ < body_.size(); scan_pos_++) {
        char c = body_[scan_pos_];
        if (!started_) {
            if (is_space(c)) continue;
            if (c != '{' && !(c == '[' && format_->array)) break;
            started_ = true;
            brackets_.depth = 1;
            continue;
        }
        const int step = brackets_.step(c);
        if (step > 0 && brackets_.depth > MAX_DEPTH) break;
        if (step < 0 && brackets_.depth == 0) {
            size_t end = scan_pos_ + 1;
            std::vector<ToolCall> calls = calls_of(std::string_view(body_).substr(0, end), *format_);
            if (calls.empty()) break;
            for (ToolCall& call : calls) {
                if (call.id.empty()) call.id = next_id();
                ToolCallEvent e;
                e.index = static_cast<int>(calls_.size());
                e.call = call;
                out.push_back(std::move(e));
                calls_.push_back(std::move(call));
            }
            at_start_ = false;
            after_call_ = true;
            buf_ = body_.substr(end);
            body_.clear();
            ws_before_.clear();
            state_ = format_->close.empty() ? State::TEXT : State::CLOSE;
            return true;
        }
    }
    if (scan_pos_ == body_.size()) return false;  // the JSON goes on
    fail_call(out);
    return true;
}

bool ToolCallParser::scan_close() {
    size_t k = buf_.find_first_not_of(" \n\r\t");
    if (k == std::string::npos) return false;
    std::string_view rest = std::string_view(buf_).substr(k);
    if (rest.starts_with(format_->close)) {
        buf_.erase(0, k + format_->close.size());
    } else if (format_->close.starts_with(rest)) {
        return false;  // maybe the close tag, cut
    }
    // Without its close tag the call stands; what follows is text.
    state_ = State::TEXT;
    after_call_ = true;
    return true;
}

void ToolCallParser::fail_call(std::vector<ToolCallEvent>& out) {
    release(ws_before_, out);
    release(trigger_, out);
    at_start_ = false;
    buf_ = std::move(body_);
    body_.clear();
    ws_before_.clear();
    trigger_.clear();
    state_ = State::TEXT;
}

std::string ToolCallParser::next_id() {
    static const char ALNUM[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string id = format_->id_style == ToolCallIdStyle::OPENAI ? "call_" : "";
    size_t n = format_->id_style == ToolCallIdStyle::OPENAI ? 24 : 9;
    for (size_t i = 0; i < n; i++) {
        // splitmix64
        uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        id += ALNUM[z % 62];
    }
    return id;
}

ToolCallReply tool_calls_parse(const ToolCallFormat& format, std::string_view text, uint64_t id_seed) {
    ToolCallParser parser(format, id_seed);
    parser.push(text);
    parser.finish();
    return parser.reply();
}

nlohmann::ordered_json tool_call_json(const ToolCall& call) {
    ojson j;
    j["id"] = call.id;
    j["type"] = "function";
    j["function"]["name"] = call.name;
    j["function"]["arguments"] = call.arguments;
    return j;
}

std::string tool_call_envelope_gbnf(const ToolCallFormat& format, std::span<const ToolArgsGrammar> tools, bool parallel,
                                    GbnfBuilder& builder) {
    if (format.family == ToolCallFamily::NONE)
        throw MoeError("tool-call grammar: the chat template has no tool-call format");
    if (tools.empty()) throw MoeError("tool-call grammar: no tools");
    auto join = [](std::string& out, std::string_view piece) {
        if (piece.empty()) return;
        if (!out.empty()) out += ' ';
        out.append(piece);
    };
    std::string alternatives;
    for (const ToolArgsGrammar& t : tools) {
        std::string head = "{\"name\": ";
        head += ojson(t.name).dump();
        head += ", \"";
        head.append(format.args_key);
        head += "\": ";
        std::string body;
        join(body, format.gbnf_call_open);
        join(body, gbnf_literal(head));
        join(body, t.rule);
        join(body, "\"}\"");
        join(body, format.gbnf_call_close);
        if (!alternatives.empty()) alternatives += " | ";
        alternatives += builder.add_rule(std::string("tool-call-") + std::to_string(&t - tools.data()), body);
    }
    std::string call = builder.add_rule("tool-call", alternatives);
    std::string root;
    join(root, format.gbnf_open);
    join(root, call);
    if (parallel && format.multiple) {
        std::string more = "(";
        more.append(format.gbnf_separator);
        join(more, call);
        more += ")*";
        join(root, more);
    }
    join(root, format.gbnf_close);
    return builder.gbnf(root);
}

std::string tool_call_grammar(const ToolCallFormat& format, const nlohmann::ordered_json& tools,
                              std::string_view forced_name, bool parallel) {
    if (!tools.is_array()) throw MoeError("tools: expected an array");
    GbnfBuilder builder;
    std::vector<ToolArgsGrammar> args;
    for (size_t i = 0; i < tools.size(); i++) {
        std::string where = std::string("tools[") + std::to_string(i) + "]";
        const ojson& tool = tools[i];
        if (!tool.is_object() || tool.value("type", "") != "function" || !tool.contains("function") ||
            !tool["function"].is_object())
            throw MoeError(where + ": expected {\"type\": \"function\", \"function\": {...}}");
        const ojson& function = tool["function"];
        auto name = function.find("name");
        if (name == function.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
            throw MoeError(where + ".function.name: expected a non-empty string");
        if (!forced_name.empty() && *name != forced_name) continue;
        auto parameters = function.find("parameters");
        ojson schema = parameters == function.end() ? ojson{{"type", "object"}} : *parameters;
        if (!schema.is_object()) throw MoeError(where + ".function.parameters: expected an object (a JSON Schema)");
        std::string rule =
            builder.add_schema(schema, where + ".function.parameters", name->get<std::string>() + "-args");
        args.push_back({name->get<std::string>(), rule});
    }
    if (args.empty() && !forced_name.empty())
        throw MoeError(std::string("tool_choice: no tool named '") + std::string(forced_name) + "' in tools");
    return tool_call_envelope_gbnf(format, args, parallel, builder);
}
