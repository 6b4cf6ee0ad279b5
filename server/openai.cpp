// The OpenAI mapping (see openai.h). Request validation: error messages follow
// OpenAI's wording closely enough that a client's user recognises them:
// they name the parameter, what was expected and what came instead.
//
// Then the response objects and the SSE framing.
#include "server/openai.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <unordered_set>

#include "base/utf8.h"
#include "engine/runtime/beam_search.h"

using json = nlohmann::ordered_json;

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_, std::string type_)
    : std::runtime_error(escape_control(message)),
      status(status_),
      type(std::move(type_)),
      param(escape_control(param_)),
      code(std::move(code_)) {
    if (type.empty()) type = status >= 500 ? "server_error" : "invalid_request_error";
}

nlohmann::ordered_json api_error_json(const ApiError& error) {
    nlohmann::ordered_json e;
    e["message"] = error.what();
    e["type"] = error.type;
    e["param"] = error.param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(error.param);
    e["code"] = error.code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(error.code);
    return nlohmann::ordered_json{{"error", e}};
}

namespace {

const char* json_type_name(const json& v) {
    switch (v.type()) {
    case json::value_t::null:
        return "null";
    case json::value_t::boolean:
        return "a boolean";
    case json::value_t::string:
        return "a string";
    case json::value_t::array:
        return "an array";
    case json::value_t::object:
        return "an object";
    case json::value_t::number_float:
        return "a decimal number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
        return "an integer";
    default:
        return "an unsupported value";
    }
}

[[noreturn]] void type_error(const std::string& name, const char* expected, const json& v) {
    throw ApiError(
        400, "Invalid type for '" + name + "': expected " + expected + ", but got " + json_type_name(v) + " instead.",
        name, "invalid_type");
}

std::string format_number(double x) {
    json j = x;
    // The range test first: a double outside long long's range must not be cast.
    if (x > -1e15 && x < 1e15 && x == double(static_cast<long long>(x))) j = static_cast<long long>(x);
    return j.dump();
}

[[noreturn]] void range_error(const std::string& name, double lo, double hi, const json& v) {
    throw ApiError(400,
                   "Invalid '" + name + "': expected a value between " + format_number(lo) + " and " +
                       format_number(hi) + ", but got " + v.dump() + " instead.",
                   name, "invalid_value");
}

// The field, or nullptr when it is absent or null (null means "not given").
const json* field(const json& body, const char* key) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

std::optional<bool> get_bool(const json& body, const char* key) {
    const json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) type_error(key, "a boolean", *v);
    return v->get<bool>();
}

std::optional<long long> get_int(const json& body, const char* key, long long lo, long long hi) {
    const json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) type_error(key, "an integer", *v);
    if (v->is_number_unsigned() && v->get<unsigned long long>() > static_cast<unsigned long long>(LLONG_MAX))
        range_error(key, double(lo), double(hi), *v);
    long long x = v->get<long long>();
    if (x < lo || x > hi) range_error(key, double(lo), double(hi), *v);
    return x;
}

std::optional<double> get_number(const json& body, const char* key, double lo, double hi) {
    const json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) type_error(key, "a number", *v);
    double x = v->get<double>();
    if (!(x >= lo && x <= hi)) range_error(key, lo, hi, *v);
    return x;
}

std::optional<std::string> get_string(const json& body, const char* key) {
    const json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) type_error(key, "a string", *v);
    return v->get<std::string>();
}

uint64_t random_seed() {
    static std::mutex mutex;
    static std::mt19937_64 rng{std::random_device{}()};
    std::lock_guard lock(mutex);
    return rng();
}

// Fields that would change the answer but are not supported: refused rather
// than silently ignored.
// `tools` reaches a chat's Jinja template (chat_input_parse); a completion
// has no template to take it.
void refuse_unsupported(const json& body, bool chat) {
    for (const char* key : {"tools", "functions"}) {
        if (chat && std::string_view(key) == "tools") continue;
        const json* v = field(body, key);
        if (v && !(v->is_array() && v->empty()))
            throw ApiError(400, std::string("'") + key + "' (tool calling) is not supported by this server.", key,
                           "unsupported_parameter");
    }
    if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty()))
        throw ApiError(400, "'logit_bias' is not supported by this server.", "logit_bias", "unsupported_parameter");
}

// response_format, and the `grammar` extension: at most one of them.
OutputFormat parse_output_format(const json& body) {
    OutputFormat f;
    if (const json* v = field(body, "grammar")) {
        if (!v->is_string()) type_error("grammar", "a string (a GBNF grammar)", *v);
        f.kind = OutputFormat::Kind::GRAMMAR;
        f.gbnf = v->get<std::string>();
        f.param = "grammar";
    }
    const json* v = field(body, "response_format");
    if (!v) return f;
    if (!v->is_object()) type_error("response_format", "an object", *v);
    auto type = v->find("type");
    if (type == v->end() || type->is_null())
        throw ApiError(400, "Missing required parameter: 'response_format.type'.", "response_format.type",
                       "missing_required_parameter");
    if (!type->is_string()) type_error("response_format.type", "a string", *type);
    const std::string t = type->get<std::string>();
    if (t == "text") return f;
    if (f.kind == OutputFormat::Kind::GRAMMAR)
        throw ApiError(400, "Set either 'grammar' or a 'response_format' other than text, not both.", "grammar",
                       "invalid_value");
    if (t == "json_object") {
        f.kind = OutputFormat::Kind::JSON_OBJECT;
        f.param = "response_format";
        // llama.cpp's form: a schema beside json_object.
        if (const json* schema = field(*v, "schema")) {
            f.kind = OutputFormat::Kind::JSON_SCHEMA;
            f.schema = *schema;
            f.param = "response_format.schema";
        }
        return f;
    }
    if (t != "json_schema")
        throw ApiError(400,
                       "Invalid value: '" + t +
                           "'. Supported values are: 'text', 'json_object' and 'json_schema'.",
                       "response_format.type", "invalid_value");
    const json* js = field(*v, "json_schema");
    if (!js)
        throw ApiError(400, "Missing required parameter: 'response_format.json_schema'.", "response_format.json_schema",
                       "missing_required_parameter");
    if (!js->is_object()) type_error("response_format.json_schema", "an object", *js);
    if (const json* name = field(*js, "name"); name && !name->is_string())
        type_error("response_format.json_schema.name", "a string", *name);
    if (auto strict = field(*js, "strict"); strict && !strict->is_boolean())
        type_error("response_format.json_schema.strict", "a boolean", *strict);
    const json* schema = field(*js, "schema");
    if (!schema)
        throw ApiError(400, "Missing required parameter: 'response_format.json_schema.schema'.",
                       "response_format.json_schema.schema", "missing_required_parameter");
    f.kind = OutputFormat::Kind::JSON_SCHEMA;
    f.schema = *schema;
    f.param = "response_format.json_schema.schema";
    return f;
}

std::vector<std::string> parse_stop(const json& body) {
    const json* v = field(body, "stop");
    std::vector<std::string> stop;
    if (!v) return stop;
    if (v->is_string()) {
        stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
        if (v->size() > 4)
            throw ApiError(
                400, "Invalid 'stop': expected at most 4 stop sequences, but got " + std::to_string(v->size()) + ".",
                "stop", "invalid_value");
        for (size_t i = 0; i < v->size(); i++) {
            if (!(*v)[i].is_string()) type_error("stop[" + std::to_string(i) + "]", "a string", (*v)[i]);
            stop.push_back((*v)[i].get<std::string>());
        }
    } else {
        type_error("stop", "a string or an array of strings", *v);
    }
    std::erase_if(stop, [](const std::string& s) { return s.empty(); });
    return stop;
}

// beam_width, length_penalty and n. With beam_width, n may name up to
// beam_width choices, and the sampling fields must be absent or neutral:
// beam search ranks raw log-probabilities, so they would be ignored.
void parse_beam(const json& body, GenerationOptions& o) {
    auto width = get_int(body, "beam_width", 1, BEAM_WIDTH_MAX);
    auto penalty = get_number(body, "length_penalty", 0, 10);
    auto n = get_int(body, "n", LLONG_MIN, LLONG_MAX);
    if (!width) {
        if (n && *n != 1)
            throw ApiError(400,
                           "Invalid 'n': only n = 1 is supported without 'beam_width' (n > 1 returns the n best "
                           "beams), but got " +
                               std::to_string(*n) + ".",
                           "n", "invalid_value");
        if (penalty)
            throw ApiError(400, "'length_penalty' applies only to beam search: set 'beam_width' too.",
                           "length_penalty", "invalid_value");
        return;
    }
    o.beam_width = int(*width);
    if (n && (*n < 1 || *n > *width))
        throw ApiError(400,
                       "Invalid 'n': with 'beam_width' " + std::to_string(*width) + ", n must be between 1 and " +
                           std::to_string(*width) + ", but got " + std::to_string(*n) + ".",
                       "n", "invalid_value");
    o.n = int(n.value_or(1));
    if (penalty) o.length_penalty = float(*penalty);
    static const std::pair<const char*, double> NEUTRAL[] = {
        {"temperature", 0.0}, {"top_p", 1.0},          {"top_k", 0.0}, {"min_p", 0.0}, {"repetition_penalty", 1.0},
        {"presence_penalty", 0.0}, {"frequency_penalty", 0.0}};
    for (const auto& [key, neutral] : NEUTRAL) {
        const json* v = field(body, key);
        if (v && !(v->is_number() && v->get<double>() == neutral))
            throw ApiError(400,
                           std::string("Invalid '") + key + "': beam search ('beam_width') ranks raw log-probabilities, " +
                               "so '" + key + "' must be absent or " + format_number(neutral) + ", but got " + v->dump() +
                               ".",
                           key, "invalid_value");
    }
}

// Everything but the prompt / messages and the logprobs fields, which differ.
GenerationOptions parse_common(const json& body, int ctx, bool chat) {
    refuse_unsupported(body, chat);
    GenerationOptions o;
    if (const json* v = field(body, "model"); v && !v->is_string()) type_error("model", "a string", *v);
    parse_beam(body, o);
    SamplingParams& s = o.sampling;
    if (auto x = get_number(body, "temperature", 0, 2)) s.temperature = float(*x);
    if (auto x = get_number(body, "top_p", 0, 1)) s.top_p = float(*x);
    if (auto x = get_number(body, "presence_penalty", -2, 2)) s.presence_penalty = float(*x);
    if (auto x = get_number(body, "frequency_penalty", -2, 2)) s.frequency_penalty = float(*x);
    if (auto x = get_int(body, "top_k", 0, INT_MAX)) s.top_k = int(*x);
    if (auto x = get_number(body, "min_p", 0, 1)) s.min_p = float(*x);
    if (auto x = get_number(body, "repetition_penalty", 0, 10)) {
        if (*x <= 0)
            throw ApiError(400, "Invalid 'repetition_penalty': expected a value above 0, but got 0 instead.",
                           "repetition_penalty", "invalid_value");
        s.repetition_penalty = float(*x);
    }
    if (const json* v = field(body, "seed")) {
        if (!v->is_number_integer()) type_error("seed", "an integer", *v);
        s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
    } else {
        s.seed = random_seed();
    }
    o.stop = parse_stop(body);
    o.stream = get_bool(body, "stream").value_or(false);
    if (const json* v = field(body, "stream_options")) {
        if (!v->is_object()) type_error("stream_options", "an object", *v);
        if (!o.stream)
            throw ApiError(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                           "stream_options", "invalid_value");
        if (auto u = get_bool(*v, "include_usage")) o.include_usage = *u;
    }
    o.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
    o.cache_prompt = get_bool(body, "cache_prompt").value_or(true);
    if (auto x = get_int(body, "max_tokens", 1, ctx)) o.max_tokens = int(*x);
    o.format = parse_output_format(body);
    if (o.beam_width > 0 && o.format.kind != OutputFormat::Kind::TEXT)
        throw ApiError(400,
                       "'" + o.format.param.substr(0, o.format.param.find('.')) +
                           "' (constrained decoding) is not supported with 'beam_width'.",
                       "beam_width", "unsupported_parameter");
    return o;
}

void refuse_beam_logprobs(const GenerationOptions& o) {
    if (o.beam_width > 0 && o.top_logprobs >= 0)
        throw ApiError(400, "'logprobs' is not supported with 'beam_width' (beam scores are in 'timings.beam').",
                       "logprobs", "unsupported_parameter");
}

std::string parse_content(const json& message, const std::string& where, bool may_be_empty) {
    auto it = message.find("content");
    if (it == message.end() || it->is_null()) {
        if (may_be_empty) return "";
        throw ApiError(400, "Missing required parameter: '" + where + ".content'.", where + ".content",
                       "missing_required_parameter");
    }
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_array()) type_error(where + ".content", "a string or an array of content parts", *it);
    std::string text;
    for (size_t j = 0; j < it->size(); j++) {
        const json& part = (*it)[j];
        std::string at = where + ".content[" + std::to_string(j) + "]";
        if (!part.is_object()) type_error(at, "an object", part);
        auto type = part.find("type");
        if (type == part.end() || !type->is_string())
            throw ApiError(400, "Missing required parameter: '" + at + ".type'.", at + ".type",
                           "missing_required_parameter");
        if (*type != "text")
            throw ApiError(400,
                           "Invalid value: '" + type->get<std::string>() +
                               "'. This server supports only content parts "
                               "of type 'text'.",
                           at + ".type", "invalid_value");
        auto t = part.find("text");
        if (t == part.end() || !t->is_string())
            throw ApiError(400, "Missing required parameter: '" + at + ".text' (a string).", at + ".text",
                           "missing_required_parameter");
        if (!text.empty()) text += "\n";
        text += t->get<std::string>();
    }
    return text;
}

ApiError json_syntax_error(const std::string& what) {
    return ApiError(
        400,
        "We could not parse the JSON body of your request: " + what + " (HINT: a request body must be a JSON object.)",
        "", "invalid_json");
}

// The 400 for a JSON text of a request (the body, or `param`'s string inside
// it) that json_parse_bounded refused: it names the field of a number that
// overflows a double ("temperature": 1e400), and `param` (the body: none)
// for the rest.
ApiError request_json_error(const JsonError& e, const std::string& param) {
    if (e.kind == JsonError::Kind::NUMBER) {
        const std::string name = json_path_join(param, e.path);
        return ApiError(400, "Invalid '" + name + "': " + e.reason + ".", name, "invalid_value");
    }
    if (param.empty()) {
        if (e.kind == JsonError::Kind::SYNTAX) return json_syntax_error(e.reason);
        return ApiError(400, "The request body is refused: " + e.detail + ".", "", "invalid_json");
    }
    if (e.kind == JsonError::Kind::SYNTAX)
        return ApiError(400, "Invalid '" + param + "': not a JSON text (" + e.reason + ").", param, "invalid_value");
    return ApiError(400, "Invalid '" + param + "': " + e.detail + ".", param, "invalid_value");
}

// The bytes of j as JSON text, escapes aside.
size_t json_text_bytes(const json& j) {
    switch (j.type()) {
    case json::value_t::string:
        return j.get_ref<const std::string&>().size() + 2;
    case json::value_t::array: {
        size_t bytes = 2;
        for (const json& e : j) bytes += json_text_bytes(e) + 1;
        return bytes;
    }
    case json::value_t::object: {
        size_t bytes = 2;
        for (auto it = j.begin(); it != j.end(); ++it) bytes += it.key().size() + 4 + json_text_bytes(it.value());
        return bytes;
    }
    default:
        return j.dump().size();
    }
}

}  // namespace

std::string escape_control(std::string_view text) {
    static const char HEX[] = "0123456789abcdef";
    std::string out;
    out.reserve(text.size());
    auto escape = [&](unsigned char c) {
        out += "\\x";
        out += HEX[c >> 4];
        out += HEX[c & 15];
    };
    for (size_t i = 0; i < text.size();) {
        const Utf8Char c = utf8_decode(text, i);
        if (c.status != Utf8Status::VALID || c.cp < 0x20 || c.cp == 0x7F) {  // ill-formed UTF-8 or a C0 control
            escape(static_cast<unsigned char>(text[i]));
        } else if (c.cp == '\\') {
            out += "\\\\";
        } else if (c.cp >= 0x80 && c.cp < 0xA0) {  // C1 control
            escape(static_cast<unsigned char>(text[i]));
            escape(static_cast<unsigned char>(text[i + 1]));
        } else {
            out.append(text.substr(i, c.len));
        }
        i += c.len;
    }
    return out;
}

size_t chat_input_bytes(const ChatInput& chat) {
    size_t bytes = 0;
    for (const ChatMessage& m : chat.messages) bytes += m.content.size();
    for (const json& m : chat.messages_json) {
        if (!m.is_object()) continue;
        for (auto it = m.begin(); it != m.end(); ++it)
            if (it.key() != "role" && it.key() != "content") bytes += it.key().size() + json_text_bytes(it.value());
    }
    if (!chat.tools.is_null()) bytes += json_text_bytes(chat.tools);
    if (!chat.extras.empty()) bytes += json_text_bytes(chat.extras);
    return bytes;
}

json parse_json_body(const std::string& body) {
    if (!utf8_valid(body)) throw ApiError(400, "The request body is not valid UTF-8.", "", "invalid_utf8");
    // Checked as it is parsed: 4 MiB of '[' would cost ~300 MB as a DOM.
    json j;
    try {
        j = json_parse_bounded<json>(body, JSON_BODY_LIMITS, "request body");
    } catch (const JsonError& e) {
        throw request_json_error(e, "");
    }
    if (!j.is_object())
        throw ApiError(400, std::string("The request body must be a JSON object, but got ") + json_type_name(j) + ".",
                       "", "invalid_json");
    return j;
}

std::vector<ChatMessage> chat_messages_parse(const json& body) {
    auto it = body.find("messages");
    if (it == body.end() || it->is_null())
        throw ApiError(400, "Missing required parameter: 'messages'.", "messages", "missing_required_parameter");
    if (!it->is_array()) type_error("messages", "an array", *it);
    if (it->empty())
        throw ApiError(400,
                       "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty "
                       "array instead.",
                       "messages", "empty_array");
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < it->size(); i++) {
        const json& m = (*it)[i];
        std::string where = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) type_error(where, "an object", m);
        auto role = m.find("role");
        if (role == m.end() || role->is_null())
            throw ApiError(400, "Missing required parameter: '" + where + ".role'.", where + ".role",
                           "missing_required_parameter");
        if (!role->is_string()) type_error(where + ".role", "a string", *role);
        const std::optional<ChatRole> r = chat_role_parse(role->get_ref<const std::string&>());
        if (!r)
            throw ApiError(400,
                           "Invalid value: '" + role->get<std::string>() +
                               "'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'.",
                           where + ".role", "invalid_value");
        messages.push_back({*r, parse_content(m, where, *r == ChatRole::ASSISTANT)});
    }
    return messages;
}

namespace {

[[noreturn]] void missing(const std::string& name) {
    throw ApiError(400, "Missing required parameter: '" + name + "'.", name, "missing_required_parameter");
}

// A function name as OpenAI allows it: a-z, A-Z, 0-9, '_' and '-', 1 to 64 characters.
void check_function_name(const json& name, const std::string& where) {
    if (!name.is_string()) type_error(where, "a string", name);
    const std::string& n = name.get_ref<const std::string&>();
    bool ok = !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
    if (!ok)
        throw ApiError(400,
                       "Invalid '" + where + "': '" + n +
                           "' does not match '^[a-zA-Z0-9_-]{1,64}$' (letters, digits, '_' and '-', at most 64).",
                       where, "invalid_value");
}

// tools: an array of {"type": "function", "function": {...}}, names unique.
// An object with neither `type` nor `function` is another template's own
// tool shape (Command-R's {"name", "parameter_definitions"}): it reaches the
// template as sent, and no call to it can be forced.
void check_tools(const json& tools) {
    if (!tools.is_array()) type_error("tools", "an array", tools);
    std::unordered_set<std::string> names;
    for (size_t i = 0; i < tools.size(); i++) {
        const std::string at = "tools[" + std::to_string(i) + "]";
        const json& t = tools[i];
        if (!t.is_object()) type_error(at, "an object", t);
        if (!t.contains("type") && !t.contains("function")) continue;
        const json* type = field(t, "type");
        if (!type) missing(at + ".type");
        if (*type != "function")
            throw ApiError(400, "Invalid value for '" + at + ".type': only 'function' is supported.", at + ".type",
                           "invalid_value");
        const json* f = field(t, "function");
        if (!f) missing(at + ".function");
        if (!f->is_object()) type_error(at + ".function", "an object", *f);
        const json* name = field(*f, "name");
        if (!name) missing(at + ".function.name");
        check_function_name(*name, at + ".function.name");
        if (const json* d = field(*f, "description"); d && !d->is_string())
            type_error(at + ".function.description", "a string", *d);
        if (const json* p = field(*f, "parameters"); p && !p->is_object())
            type_error(at + ".function.parameters", "an object (a JSON Schema)", *p);
        if (const json* st = field(*f, "strict"); st && !st->is_boolean())
            type_error(at + ".function.strict", "a boolean", *st);
        if (!names.insert(name->get<std::string>()).second)
            throw ApiError(400, "Invalid '" + at + ".function.name': '" + name->get<std::string>() +
                                    "' names two tools.",
                           at + ".function.name", "invalid_value");
    }
}

// A message's tool parts: a tool message's tool_call_id, an assistant's
// tool_calls (whose string arguments become objects for the template:
// Hugging Face templates are written for dicts, OpenAI sends JSON text).
// The arguments' JSON texts share *elements_left of the request's elements.
void check_tool_parts(json& m, const std::string& where, ChatRole role, size_t* elements_left) {
    if (role == ChatRole::TOOL) {
        const json* id = field(m, "tool_call_id");
        if (!id) missing(where + ".tool_call_id");
        if (!id->is_string()) type_error(where + ".tool_call_id", "a string", *id);
    }
    auto calls = m.find("tool_calls");
    if (calls == m.end() || calls->is_null()) return;
    if (role != ChatRole::ASSISTANT)
        throw ApiError(400, "Invalid '" + where + ".tool_calls': only assistant messages carry tool calls.",
                       where + ".tool_calls", "invalid_value");
    if (!calls->is_array()) type_error(where + ".tool_calls", "an array", *calls);
    for (size_t j = 0; j < calls->size(); j++) {
        const std::string at = where + ".tool_calls[" + std::to_string(j) + "]";
        json& c = (*calls)[j];
        if (!c.is_object()) type_error(at, "an object", c);
        const json* id = field(c, "id");
        if (!id) missing(at + ".id");
        if (!id->is_string()) type_error(at + ".id", "a string", *id);
        if (const json* type = field(c, "type"); type && *type != "function")
            throw ApiError(400, "Invalid value for '" + at + ".type': only 'function' is supported.", at + ".type",
                           "invalid_value");
        auto f = c.find("function");
        if (f == c.end() || f->is_null()) missing(at + ".function");
        if (!f->is_object()) type_error(at + ".function", "an object", *f);
        const json* name = field(*f, "name");
        if (!name) missing(at + ".function.name");
        if (!name->is_string()) type_error(at + ".function.name", "a string", *name);
        auto args = f->find("arguments");
        if (args == f->end() || args->is_null()) missing(at + ".function.arguments");
        if (args->is_string()) {
            const std::string param = at + ".function.arguments";
            JsonLimits limits = JSON_BODY_LIMITS;
            limits.max_elements = *elements_left;
            size_t used = 0;
            try {
                *args = json_parse_bounded<json>(args->get_ref<const std::string&>(), limits, param, &used);
            } catch (const JsonError& e) {
                if (e.kind == JsonError::Kind::ELEMENTS && limits.max_elements < MAX_JSON_ELEMENTS)
                    throw ApiError(400,
                                   "Invalid '" + param + "': the tool calls' arguments of this request hold more than " +
                                       std::to_string(MAX_JSON_ELEMENTS) +
                                       " JSON elements (values, arrays and objects) together, the limit.",
                                   param, "invalid_value");
                throw request_json_error(e, param);
            }
            *elements_left -= used;
        } else if (!args->is_object()) {
            type_error(at + ".function.arguments", "a string (JSON text)", *args);
        }
    }
    // OpenAI's clients send content null beside tool calls; templates (Qwen3's) test `content is string`.
    // (Last: adding a key moves an ordered_json's members, and `calls` with them.)
    if (auto content = m.find("content"); content == m.end() || content->is_null()) m["content"] = "";
}

}  // namespace

ChatInput chat_input_parse(const json& body) {
    ChatInput in;
    in.messages = chat_messages_parse(body);
    in.messages_json = body.at("messages");
    size_t elements_left = MAX_JSON_ELEMENTS;
    for (size_t i = 0; i < in.messages.size(); i++)
        check_tool_parts(in.messages_json[i], "messages[" + std::to_string(i) + "]", in.messages[i].role,
                         &elements_left);
    if (const json* v = field(body, "tools")) {
        check_tools(*v);
        in.tools = *v;
    }
    // tool_choice "none": the template is not told of the tools (the reply is text).
    if (const json* c = field(body, "tool_choice"); c && *c == "none") in.tools = nullptr;
    // llama.cpp's and vLLM's top-level switch; chat_template_kwargs wins.
    const std::optional<bool> thinking = get_bool(body, "enable_thinking");
    if (const json* v = field(body, "chat_template_kwargs")) {
        if (!v->is_object()) type_error("chat_template_kwargs", "an object", *v);
        for (auto it = v->begin(); it != v->end(); ++it) {
            for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"})
                if (it.key() == reserved)
                    throw ApiError(400,
                                   "Invalid 'chat_template_kwargs." + it.key() +
                                       "': the request sets it in its own field, not as a template variable.",
                                   "chat_template_kwargs", "invalid_value");
        }
        in.extras = *v;  // a copy, not one insertion (a search of the keys so far) per key
    }
    if (thinking && !in.extras.contains("enable_thinking")) in.extras["enable_thinking"] = *thinking;
    // OpenAI's reasoning_effort, a variable of gpt-oss's (harmony) template
    // ("Reasoning: low" in its system message); chat_template_kwargs wins.
    if (const json* v = field(body, "reasoning_effort")) {
        if (!v->is_string()) type_error("reasoning_effort", "a string", *v);
        const std::string effort = v->get<std::string>();
        if (effort != "low" && effort != "medium" && effort != "high")
            throw ApiError(400,
                           "Invalid value: '" + effort + "'. Supported values are: 'low', 'medium' and 'high'.",
                           "reasoning_effort", "invalid_value");
        if (!in.extras.contains("reasoning_effort")) in.extras["reasoning_effort"] = effort;
    }
    in.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
    return in;
}

namespace {

// tool_choice: "auto", "none", "required" or {"type": "function",
// "function": {"name"}} naming one of the tools.
ToolChoice parse_tool_choice(const json& body, const json& tools) {
    ToolChoice c;
    const bool has_tools = tools.is_array() && !tools.empty();
    if (!has_tools) c.kind = ToolChoice::Kind::NONE;
    const json* v = field(body, "tool_choice");
    if (!v) return c;
    if (v->is_string()) {
        const std::string s = v->get<std::string>();
        if (s == "none") return {ToolChoice::Kind::NONE, ""};
        if (s != "auto" && s != "required")
            throw ApiError(400,
                           "Invalid value: '" + s + "'. Supported values are: 'none', 'auto' and 'required'.",
                           "tool_choice", "invalid_value");
        c.kind = s == "auto" ? ToolChoice::Kind::AUTO : ToolChoice::Kind::REQUIRED;
    } else if (v->is_object()) {
        const json* type = field(*v, "type");
        if (!type) missing("tool_choice.type");
        if (*type != "function")
            throw ApiError(400, "Invalid value for 'tool_choice.type': only 'function' is supported.",
                           "tool_choice.type", "invalid_value");
        const json* f = field(*v, "function");
        if (!f) missing("tool_choice.function");
        if (!f->is_object()) type_error("tool_choice.function", "an object", *f);
        const json* name = field(*f, "name");
        if (!name) missing("tool_choice.function.name");
        check_function_name(*name, "tool_choice.function.name");
        c = {ToolChoice::Kind::NAMED, name->get<std::string>()};
        if (has_tools && std::none_of(tools.begin(), tools.end(), [&](const json& t) {
                const json* f = field(t, "function");
                return f && f->is_object() && f->value("name", "") == c.name;
            }))
            throw ApiError(400, "Invalid 'tool_choice.function.name': no tool is named '" + c.name + "'.",
                           "tool_choice.function.name", "invalid_value");
    } else {
        type_error("tool_choice", "a string or an object", *v);
    }
    if (!has_tools)
        throw ApiError(400, "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
                       "tool_choice", "invalid_value");
    return c;
}

}  // namespace

ChatRequest chat_request_parse(const json& body, int ctx) {
    ChatRequest r;
    r.chat = chat_input_parse(body);
    r.options = parse_common(body, ctx, true);
    r.tool_choice = parse_tool_choice(body, r.chat.tools);
    r.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
    if (r.tool_choice.kind != ToolChoice::Kind::NONE && r.options.beam_width > 0)
        throw ApiError(400, "'tools' (tool calling) is not supported with 'beam_width'.", "beam_width",
                       "unsupported_parameter");
    if (r.tool_choice.kind != ToolChoice::Kind::NONE && r.tool_choice.kind != ToolChoice::Kind::AUTO &&
        r.options.format.kind != OutputFormat::Kind::TEXT)
        throw ApiError(400, "A forced 'tool_choice' and a 'response_format' or 'grammar' cannot both constrain the reply.",
                       "tool_choice", "invalid_value");
    if (auto x = get_int(body, "max_completion_tokens", 1, ctx)) r.options.max_tokens = int(*x);
    bool logprobs = get_bool(body, "logprobs").value_or(false);
    auto top = get_int(body, "top_logprobs", 0, 20);
    if (top && !logprobs)
        throw ApiError(400, "Invalid 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.",
                       "top_logprobs", "invalid_value");
    if (logprobs) r.options.top_logprobs = int(top.value_or(0));
    refuse_beam_logprobs(r.options);
    return r;
}

CompletionRequest completion_request_parse(const json& body, int ctx, int vocab_size) {
    CompletionRequest r;
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null())
        throw ApiError(400, "Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter");
    const json* prompt = &*it;
    // A batch of one prompt is accepted; several are not (one engine, n = 1).
    if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
        prompt = &(*prompt)[0];
    if (prompt->is_string()) {
        r.prompt = prompt->get<std::string>();
    } else if (prompt->is_array()) {
        if (prompt->empty())
            throw ApiError(400, "Invalid 'prompt': empty array. Expected at least one token.", "prompt", "empty_array");
        for (size_t i = 0; i < prompt->size(); i++) {
            const json& t = (*prompt)[i];
            if (t.is_string() || t.is_array())
                throw ApiError(400, "Invalid 'prompt': only one prompt per request is supported.", "prompt",
                               "invalid_value");
            if (!t.is_number_integer()) type_error("prompt[" + std::to_string(i) + "]", "an integer token id", t);
            if (t.is_number_unsigned() ? t.get<uint64_t>() >= uint64_t(vocab_size)
                                       : (t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size))
                throw ApiError(400,
                               "Invalid 'prompt[" + std::to_string(i) + "]': token id " + t.dump() +
                                   " is outside the vocabulary [0, " + std::to_string(vocab_size) + ").",
                               "prompt", "invalid_value");
            r.prompt_tokens.push_back(t.get<int>());
        }
        r.has_prompt_tokens = true;
    } else {
        type_error("prompt", "a string or an array of token ids", *prompt);
    }
    r.options = parse_common(body, ctx, false);
    if (get_bool(body, "echo").value_or(false))
        throw ApiError(400, "'echo' is not supported by this server.", "echo", "unsupported_parameter");
    if (auto s = get_string(body, "suffix"); s && !s->empty())
        throw ApiError(400, "'suffix' is not supported by this server.", "suffix", "unsupported_parameter");
    if (auto b = get_int(body, "best_of", 1, 1); b && *b != 1)
        throw ApiError(400, "'best_of' must be 1.", "best_of", "invalid_value");
    if (auto lp = get_int(body, "logprobs", 0, 5)) r.options.top_logprobs = int(*lp);
    refuse_beam_logprobs(r.options);
    return r;
}

TokenizeRequest tokenize_request_parse(const json& body) {
    TokenizeRequest r;
    size_t& bytes = r.text_bytes;
    if (body.contains("messages")) {
        r.chat = chat_input_parse(body);
        r.has_messages = true;
        bytes = chat_input_bytes(r.chat);
    } else if (auto c = get_string(body, "content")) {
        r.content = *c;
        bytes = r.content.size();
    } else {
        throw ApiError(400, "Missing required parameter: 'content' (a string) or 'messages' (a chat).", "content",
                       "missing_required_parameter");
    }
    if (bytes > MAX_TOKENIZE_BYTES) {
        const char* what = r.has_messages ? "messages" : "content";
        throw ApiError(400,
                       std::string("Invalid '") + what + "': " + std::to_string(bytes) +
                           " bytes of text, but /tokenize encodes at most " + std::to_string(MAX_TOKENIZE_BYTES) +
                           " bytes per request.",
                       what, "invalid_value");
    }
    r.add_special = get_bool(body, "add_special").value_or(false);
    r.with_pieces = get_bool(body, "with_pieces").value_or(false);
    return r;
}

std::vector<int> detokenize_request_parse(const json& body, int vocab_size) {
    auto it = body.find("tokens");
    if (it == body.end() || it->is_null())
        throw ApiError(400, "Missing required parameter: 'tokens'.", "tokens", "missing_required_parameter");
    if (!it->is_array()) type_error("tokens", "an array of token ids", *it);
    std::vector<int> ids;
    for (size_t i = 0; i < it->size(); i++) {
        const json& t = (*it)[i];
        if (!t.is_number_integer()) type_error("tokens[" + std::to_string(i) + "]", "an integer token id", t);
        if (t.is_number_unsigned() ? t.get<uint64_t>() >= uint64_t(vocab_size)
                                   : (t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_size))
            throw ApiError(400,
                           "Invalid 'tokens[" + std::to_string(i) + "]': token id " + t.dump() +
                               " is outside the vocabulary [0, " + std::to_string(vocab_size) + ").",
                           "tokens", "invalid_value");
        ids.push_back(t.get<int>());
    }
    return ids;
}

using json = nlohmann::ordered_json;

std::string json_dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_data(const json& j) {
    return "data: " + json_dump(j) + "\n\n";
}

std::string completion_id(Endpoint endpoint) {
    static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static std::mutex mutex;
    static std::mt19937_64 rng{std::random_device{}()};
    std::string id = endpoint == Endpoint::CHAT ? "chatcmpl-" : "cmpl-";
    std::lock_guard lock(mutex);
    for (int i = 0; i < 24; i++) id += ALPHABET[rng() % (sizeof ALPHABET - 1)];
    return id;
}

const char* openai_finish_reason(FinishReason reason) {
    return reason == FinishReason::LENGTH ? "length" : "stop";
}

json usage_json(const GenerateResult& r) {
    return json{{"prompt_tokens", r.n_prompt},
                {"completion_tokens", r.n_generated},
                {"total_tokens", r.n_prompt + r.n_generated},
                {"prompt_tokens_details", {{"cached_tokens", r.n_cached}}}};
}

json timings_json(const GenerateResult& r) {
    return json{{"prompt_n", r.n_prompt - r.n_cached},
                {"prompt_ms", r.prefill_ms},
                {"prompt_per_second", r.prefill_tok_s()},
                {"cache_n", r.n_cached},
                {"predicted_n", r.n_generated},
                {"predicted_ms", r.decode_ms},
                {"predicted_per_second", r.decode_tok_s()},
                {"ttft_ms", r.ttft_ms}};
}

int completion_tokens(const BeamResult& r) {
    int completion = 0;
    for (const BeamHypothesis& h : r.hypotheses) completion += h.length;
    return completion;
}

json usage_json(const BeamResult& r) {
    const int completion = completion_tokens(r);
    return json{{"prompt_tokens", r.n_prompt},
                {"completion_tokens", completion},
                {"total_tokens", r.n_prompt + completion},
                {"prompt_tokens_details", {{"cached_tokens", r.n_cached}}}};
}

json timings_json(const BeamResult& r, const GenerationOptions& o) {
    json scores = json::array(), logprobs = json::array();
    for (const BeamHypothesis& h : r.hypotheses) {
        scores.push_back(h.score);
        logprobs.push_back(h.logprob);
    }
    const ExpertLoad& load = r.expert_load;
    return json{{"prompt_n", r.n_prompt - r.n_cached},
                {"prompt_ms", r.prefill_ms},
                {"prompt_per_second", r.prefill_tok_s()},
                {"cache_n", r.n_cached},
                {"predicted_n", r.hypotheses.empty() ? 0 : r.hypotheses[0].length},
                {"predicted_ms", r.decode_ms},
                {"predicted_per_second", r.best_tok_s()},
                {"beam",
                 {{"width", o.beam_width},
                  {"length_penalty", o.length_penalty},
                  {"steps", r.n_steps},
                  {"steps_per_second", r.steps_per_s()},
                  {"beam_tokens", r.n_beam_tokens},
                  {"scores", scores},
                  {"logprobs", logprobs},
                  {"expert_tokens_per_step",
                   {{"max", load.max()},
                    {"mean", load.mean()},
                    {"per_step_max", load.step_max},
                    {"per_step_mean", load.step_mean},
                    {"histogram", load.histogram}}}}}};
}

OpenAiResponder::OpenAiResponder(Endpoint endpoint, const GenerationOptions& options, std::string model,
                                 const Tokenizer& tokenizer)
    : endpoint_(endpoint),
      options_(options),
      model_(std::move(model)),
      tokenizer_(&tokenizer),
      id_(completion_id(endpoint)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

json OpenAiResponder::chunk(json choice) const {
    json j{{"id", id_},
           {"object", endpoint_ == Endpoint::CHAT ? "chat.completion.chunk" : "text_completion"},
           {"created", created_},
           {"model", model_},
           {"choices", choice.is_null() ? json::array() : json::array({std::move(choice)})}};
    if (options_.include_usage) j["usage"] = nullptr;
    return j;
}

json OpenAiResponder::logprob_entry(int token, float logprob) const {
    std::string raw = tokenizer_->token_bytes(token);
    json bytes = json::array();
    for (unsigned char c : raw) bytes.push_back(int(c));
    return json{{"token", utf8_sanitize(raw)}, {"logprob", logprob}, {"bytes", bytes}};
}

void OpenAiResponder::add_logprobs(const TokenEvent& event) {
    if (options_.top_logprobs < 0) return;
    if (endpoint_ == Endpoint::CHAT) {
        json entry = logprob_entry(event.token, event.logprob);
        json top = json::array();
        for (const auto& [id, lp] : event.top_logprobs) top.push_back(logprob_entry(id, lp));
        entry["top_logprobs"] = top;
        if (pending_logprobs_.is_null()) pending_logprobs_ = json::array();
        pending_logprobs_.push_back(entry);
    } else {
        if (pending_logprobs_.is_null())
            pending_logprobs_ = json{{"tokens", json::array()},
                                     {"token_logprobs", json::array()},
                                     {"top_logprobs", json::array()},
                                     {"text_offset", json::array()}};
        pending_logprobs_["tokens"].push_back(utf8_sanitize(tokenizer_->token_bytes(event.token)));
        pending_logprobs_["token_logprobs"].push_back(event.logprob);
        json top = json::object();
        for (const auto& [id, lp] : event.top_logprobs) top[utf8_sanitize(tokenizer_->token_bytes(id))] = lp;
        pending_logprobs_["top_logprobs"].push_back(top);
        pending_logprobs_["text_offset"].push_back(text_length_);
    }
}

json OpenAiResponder::take_logprobs() {
    if (options_.top_logprobs < 0) return nullptr;
    json taken = std::move(pending_logprobs_);
    pending_logprobs_ = nullptr;
    if (endpoint_ == Endpoint::CHAT) return json{{"content", taken.is_null() ? json::array() : taken}};
    return taken;
}

std::string OpenAiResponder::start() {
    if (!options_.stream || endpoint_ != Endpoint::CHAT) return "";
    std::string out;
    for (int i = 0; i < options_.n; i++)
        out += sse_data(chunk(json{{"index", i},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}));
    return out;
}

void OpenAiResponder::parse_tool_calls(const ToolCallFormat& format, int trigger_token) {
    tools_.emplace(format, std::hash<std::string>{}(id_), trigger_token);
}

// Content deltas and finished calls as chunks (streaming only).
std::string OpenAiResponder::tool_events(const std::vector<ToolCallEvent>& events) {
    std::string out;
    if (!options_.stream) return out;
    for (const ToolCallEvent& ev : events) {
        json delta;
        if (ev.index >= 0) {
            json call{{"index", ev.index}};  // OpenAI's order: index, id, type, function
            const json fields = tool_call_json(ev.call);
            for (auto it = fields.begin(); it != fields.end(); ++it) call[it.key()] = *it;
            delta = json{{"tool_calls", json::array({std::move(call)})}};
        } else if (!ev.content.empty()) {
            delta = json{{"content", ev.content}};
        } else {
            continue;
        }
        json choice{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", take_logprobs()}, {"finish_reason", nullptr}};
        out += sse_data(chunk(std::move(choice)));
    }
    return out;
}

std::string OpenAiResponder::on(const TokenEvent& event) {
    add_logprobs(event);
    text_length_ += event.text.size();
    if (tools_) return tool_events(tools_->push_token(event.token, event.text));
    if (!options_.stream || event.text.empty()) return "";
    json choice = endpoint_ == Endpoint::CHAT ? json{{"index", 0}, {"delta", {{"content", event.text}}}}
                                              : json{{"index", 0}, {"text", event.text}};
    choice["logprobs"] = take_logprobs();
    choice["finish_reason"] = nullptr;
    return sse_data(chunk(std::move(choice)));
}

std::string OpenAiResponder::on(const GenerateResult& result) {
    const char* reason = openai_finish_reason(result.finish_reason);
    std::string out;
    std::optional<ToolCallReply> reply;
    if (tools_) {
        out = tool_events(tools_->finish());
        reply = tools_->reply();
        if (!reply->calls.empty() && result.finish_reason == FinishReason::STOP) reason = "tool_calls";
    }
    if (options_.stream) {
        json choice = finish_choice(0, reason);
        choice["logprobs"] = take_logprobs();
        return out + streamed_end({std::move(choice)}, usage_json(result), timings_json(result));
    }
    json choice{{"index", 0}};
    if (reply && !reply->calls.empty()) {
        json calls = json::array();
        for (const ToolCall& call : reply->calls) calls.push_back(tool_call_json(call));
        choice["message"] = json{{"role", "assistant"},
                                 {"content", reply->content ? json(*reply->content) : json(nullptr)},
                                 {"tool_calls", std::move(calls)}};
    } else if (endpoint_ == Endpoint::CHAT)
        choice["message"] = json{{"role", "assistant"}, {"content", result.text}};
    else
        choice["text"] = result.text;
    choice["logprobs"] = take_logprobs();
    choice["finish_reason"] = reason;
    return whole_reply(json::array({std::move(choice)}), usage_json(result), timings_json(result));
}

std::string OpenAiResponder::on(const BeamResult& result) {
    const bool chat = endpoint_ == Endpoint::CHAT;
    json choices = json::array();
    std::string out;
    for (size_t i = 0; i < result.hypotheses.size(); i++) {
        const BeamHypothesis& h = result.hypotheses[i];
        json choice{{"index", i}};
        if (options_.stream) {
            if (chat)
                choice["delta"] = json{{"content", h.text}};
            else
                choice["text"] = h.text;
            choice["logprobs"] = nullptr;
            choice["finish_reason"] = nullptr;
            out += sse_data(chunk(std::move(choice)));
            continue;
        }
        if (chat)
            choice["message"] = json{{"role", "assistant"}, {"content", h.text}};
        else
            choice["text"] = h.text;
        choice["logprobs"] = nullptr;
        choice["finish_reason"] = openai_finish_reason(h.finish_reason);
        choices.push_back(std::move(choice));
    }
    if (options_.stream) {
        std::vector<json> finishes;
        for (size_t i = 0; i < result.hypotheses.size(); i++)
            finishes.push_back(finish_choice(i, openai_finish_reason(result.hypotheses[i].finish_reason)));
        return out + streamed_end(std::move(finishes), usage_json(result), timings_json(result, options_));
    }
    return whole_reply(std::move(choices), usage_json(result), timings_json(result, options_));
}

json OpenAiResponder::finish_choice(size_t index, const char* reason) const {
    json choice = endpoint_ == Endpoint::CHAT ? json{{"index", index}, {"delta", json::object()}}
                                              : json{{"index", index}, {"text", ""}};
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = reason;
    return choice;
}

std::string OpenAiResponder::streamed_end(std::vector<json> finishes, json usage, json timings) const {
    std::string out;
    for (size_t i = 0; i < finishes.size(); i++) {
        json last = chunk(std::move(finishes[i]));
        if (i + 1 == finishes.size()) last["timings"] = std::move(timings);
        out += sse_data(last);
    }
    if (options_.include_usage) {
        json usage_chunk = chunk(nullptr);
        usage_chunk["usage"] = std::move(usage);
        out += sse_data(usage_chunk);
    }
    return out + SSE_DONE;
}

std::string OpenAiResponder::whole_reply(json choices, json usage, json timings) const {
    json j{{"id", id_},
           {"object", endpoint_ == Endpoint::CHAT ? "chat.completion" : "text_completion"},
           {"created", created_},
           {"model", model_},
           {"choices", std::move(choices)},
           {"usage", std::move(usage)},
           {"timings", std::move(timings)}};
    return json_dump(j);
}

std::string OpenAiResponder::on(const TaskDone&) {
    return "";
}

std::string OpenAiResponder::on(const TaskError& error) {
    status_ = error.status;
    json body = api_error_json(ApiError(error.status, error.message, error.param,
                                        error.param.empty() ? "" : "invalid_value"));
    return options_.stream ? sse_data(body) + SSE_DONE : json_dump(body);
}

std::string OpenAiResponder::on_event(const TaskEvent& event) {
    if (finished_) return "";
    finished_ = !std::holds_alternative<TokenEvent>(event);
    return std::visit([this](const auto& e) { return on(e); }, event);
}
