// OpenAI response mapping: turns the engine's token events and its
// GenerateResult into chat.completion / text_completion objects, their
// streaming chunks (SSE "data: ...\n\n" frames ending in "data: [DONE]"),
// usage and the timings extension. Pure text in, text out: it must not touch
// sockets, the queue or the model.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/tool_calls.h"
#include "engine/runtime/session.h"
#include "server/openai_request.h"
#include "server/request_queue.h"

enum class Endpoint { CHAT, COMPLETION };

// Serialises (keys in insertion order, as OpenAI prints them) with invalid UTF-8 replaced by U+FFFD (never throws on
// text).
std::string json_dump(const nlohmann::ordered_json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse_data(const nlohmann::ordered_json& j);
inline constexpr const char* SSE_DONE = "data: [DONE]\n\n";

// "chatcmpl-" / "cmpl-" followed by 24 random letters and digits.
std::string completion_id(Endpoint endpoint);

// "stop" or "length" (a cancelled generation has no client left to tell).
const char* openai_finish_reason(FinishReason reason);
// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details{cached_tokens}}
nlohmann::ordered_json usage_json(const GenerateResult& result);
// Extension in llama.cpp's names: prompt_n, prompt_ms, prompt_per_second,
// cache_n, predicted_n, predicted_ms, predicted_per_second, ttft_ms.
nlohmann::ordered_json timings_json(const GenerateResult& result);
// Beam search: usage counts every returned choice's tokens; timings as
// above for the best hypothesis (predicted_ms: the whole beam decode), plus
// "beam": width, length_penalty, steps (forward passes), steps_per_second,
// beam_tokens, the choices' scores and logprobs, and expert_tokens_per_step
// {max, mean, per_step_max, per_step_mean, histogram}.
nlohmann::ordered_json usage_json(const BeamResult& result);
// Tokens of every returned choice (EOS counted): usage's completion_tokens.
int completion_tokens(const BeamResult& result);
nlohmann::ordered_json timings_json(const BeamResult& result, const GenerationOptions& options);

// Builds what one request's response body is made of from its task events.
// Streaming: start() gives the first chunk (chat: the assistant role), each
// TokenEvent its content chunk, the GenerateResult the finish chunk, the
// usage chunk when asked and [DONE]. Not streaming: everything is written at
// the result as one object. A TaskError becomes an OpenAI error object (in
// a stream one data frame, then [DONE]; a client tells a stream cut by
// shutdown or a failure from a finished one by this error event, since the
// stream has no finish chunk then) and sets status(). Beam search has no
// token events: its n
// choices come with the BeamResult, streamed as one content chunk per
// choice (the whole hypothesis), then one finish chunk per choice.
class OpenAiResponder {
public:
    OpenAiResponder(Endpoint endpoint, const GenerationOptions& options, std::string model, const Tokenizer& tokenizer);

    // Chat: parse the reply for tool calls in `format` (trigger_token: its
    // control-token trigger, -1 for text). Calls stream as
    // delta.tool_calls (one chunk per call, whole, once its JSON is
    // complete), the rest as content; the result's message carries
    // tool_calls (content null when nothing else was said) and
    // finish_reason "tool_calls". Call ids are drawn from the response's id.
    void parse_tool_calls(const ToolCallFormat& format, int trigger_token);

    std::string start();
    std::string on_event(const TaskEvent& event);
    bool finished() const { return finished_; }
    bool streaming() const { return options_.stream; }
    // The HTTP status that fits the answer: 200, or the TaskError's.
    int status() const { return status_; }
    const std::string& id() const { return id_; }

private:
    nlohmann::ordered_json chunk(nlohmann::ordered_json choice) const;
    nlohmann::ordered_json logprob_entry(int token, float logprob) const;
    void add_logprobs(const TokenEvent& event);
    nlohmann::ordered_json take_logprobs();
    // The end of a reply, written once for every kind of result: streamed,
    // each choice's finish chunk (finish_choice: an empty delta or text; the
    // last chunk with the timings), the usage chunk when asked, [DONE];
    // whole, the one body with its choices, usage and timings.
    nlohmann::ordered_json finish_choice(size_t index, const char* reason) const;
    std::string streamed_end(std::vector<nlohmann::ordered_json> finishes, nlohmann::ordered_json usage,
                             nlohmann::ordered_json timings) const;
    std::string whole_reply(nlohmann::ordered_json choices, nlohmann::ordered_json usage,
                            nlohmann::ordered_json timings) const;
    // One per kind of task event (on_event visits them).
    std::string on(const TokenEvent& event);
    std::string on(const GenerateResult& result);
    std::string on(const BeamResult& result);
    std::string on(const TaskDone& done);
    std::string on(const TaskError& error);

    Endpoint endpoint_;
    GenerationOptions options_;
    std::string model_;
    const Tokenizer* tokenizer_;
    std::string id_;
    int64_t created_;
    bool finished_ = false;
    int status_ = 200;
    size_t text_length_ = 0;                   // completion logprobs: text_offset of the next token
    nlohmann::ordered_json pending_logprobs_;  // chat: content entries; completion: the legacy object
    std::optional<ToolCallParser> tools_;      // parse_tool_calls
    std::string tool_events(const std::vector<ToolCallEvent>& events);
};
