// OpenAI response objects and SSE framing (see openai_response.h).
#include "server/openai_response.h"

#include <chrono>
#include <functional>
#include <mutex>
#include <random>

#include "base/utf8.h"

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
