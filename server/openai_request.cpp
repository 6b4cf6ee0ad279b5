// OpenAI request validation (see openai_request.h). Error messages follow
// OpenAI's wording closely enough that a client's user recognises them:
// they name the parameter, what was expected and what came instead.
#include "server/openai_request.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>
#include <random>

#include "engine/runtime/beam_search.h"

using json = nlohmann::json;

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_, std::string type_)
    : std::runtime_error(message),
      status(status_),
      type(std::move(type_)),
      param(std::move(param_)),
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

// Length of the well-formed UTF-8 sequence at text[i], 0 when ill-formed.
size_t utf8_sequence_length(std::string_view text, size_t i) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    unsigned char c = byte(i);
    if (c < 0x80) return 1;
    size_t n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (i + n > text.size()) return 0;
    for (size_t k = 1; k < n; k++) {
        if ((byte(i + k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (byte(i + k) & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;  // overlong
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;                        // surrogate
    if (cp > 0x10FFFF) return 0;
    return n;
}

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
    if (x == double(static_cast<long long>(x)) && x > -1e15 && x < 1e15) j = static_cast<long long>(x);
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
void refuse_unsupported(const json& body) {
    for (const char* key : {"tools", "functions"}) {
        const json* v = field(body, key);
        if (v && !(v->is_array() && v->empty()))
            throw ApiError(400, std::string("'") + key + "' (tool calling) is not supported by this server.", key,
                           "unsupported_parameter");
    }
    if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty()))
        throw ApiError(400, "'logit_bias' is not supported by this server.", "logit_bias", "unsupported_parameter");
    if (const json* v = field(body, "response_format")) {
        if (!v->is_object()) type_error("response_format", "an object", *v);
        auto type = v->find("type");
        if (type == v->end() || !type->is_string() || *type != "text")
            throw ApiError(400, "'response_format': only {\"type\": \"text\"} is supported by this server.",
                           "response_format", "unsupported_parameter");
    }
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
GenerationOptions parse_common(const json& body, int ctx) {
    refuse_unsupported(body);
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

}  // namespace

bool utf8_valid(std::string_view text) {
    for (size_t i = 0; i < text.size();) {
        size_t n = utf8_sequence_length(text, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string utf8_sanitize(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        size_t n = utf8_sequence_length(text, i);
        if (n == 0) {
            out += "\xEF\xBF\xBD";
            i++;
        } else {
            out.append(text.substr(i, n));
            i += n;
        }
    }
    return out;
}

json parse_json_body(const std::string& body) {
    if (!utf8_valid(body)) throw ApiError(400, "The request body is not valid UTF-8.", "", "invalid_utf8");
    json j;
    try {
        j = json::parse(body);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number beyond double's range
        throw ApiError(400,
                       std::string("We could not parse the JSON body of your request: ") + e.what() +
                           " (HINT: a request body must be a JSON object.)",
                       "", "invalid_json");
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
        std::string r = role->get<std::string>();
        if (r == "developer") r = "system";
        if (r != "system" && r != "user" && r != "assistant")
            throw ApiError(400,
                           "Invalid value: '" + role->get<std::string>() +
                               "'. Supported values are: 'system', 'developer', 'user' and 'assistant'.",
                           where + ".role", "invalid_value");
        messages.push_back({r, parse_content(m, where, r == "assistant")});
    }
    return messages;
}

ChatRequest chat_request_parse(const json& body, int ctx) {
    ChatRequest r;
    r.messages = chat_messages_parse(body);
    r.options = parse_common(body, ctx);
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
    r.options = parse_common(body, ctx);
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
    if (body.contains("messages")) {
        r.messages = chat_messages_parse(body);
        r.has_messages = true;
    } else if (auto c = get_string(body, "content")) {
        r.content = *c;
    } else {
        throw ApiError(400, "Missing required parameter: 'content' (a string) or 'messages' (a chat).", "content",
                       "missing_required_parameter");
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
