// The OpenAI mapping, both ways.
//
// Requests: validates JSON bodies of /v1/chat/completions,
// /v1/completions, /tokenize and /detokenize into native structs early, so
// the rest of the server never looks at JSON from a client again. Every
// problem becomes an ApiError carrying the HTTP status and OpenAI's error
// fields (message, type, param, code). Must not tokenize, run the model or
// know about HTTP transport.
//
// Responses: turns the engine's token events and its
// GenerateResult into chat.completion / text_completion objects, their
// streaming chunks (SSE "data: ...\n\n" frames ending in "data: [DONE]"),
// usage and the timings extension. Pure text in, text out: it must not touch
// sockets, the queue or the model.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_bounded.h"
#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/session.h"
#include "server/engine_worker.h"

// Limits of a request body's JSON, checked as it is parsed, before anything
// is built (json_parse_bounded). The JSON texts a body carries (tool calls'
// string `arguments`) are parsed under the same limits, their elements
// counted together against one more MAX_JSON_ELEMENTS per request.
inline constexpr size_t MAX_JSON_DEPTH = 64;           // nested arrays and objects
inline constexpr size_t MAX_JSON_ELEMENTS = 1u << 18;  // values, arrays and objects
inline constexpr size_t MAX_JSON_KEYS = 1u << 13;      // members of one object
inline constexpr size_t MAX_JSON_BYTES = size_t(8) << 20;  // the HTTP layer's body limit
inline constexpr JsonLimits JSON_BODY_LIMITS = {MAX_JSON_BYTES, MAX_JSON_DEPTH, MAX_JSON_ELEMENTS, MAX_JSON_KEYS,
                                                MAX_JSON_BYTES};
// The longest text /tokenize encodes (the tokenizer needs ~70 bytes per byte).
inline constexpr size_t MAX_TOKENIZE_BYTES = 256u << 10;

// An error answered to the client as {"error":{"message","type","param","code"}}.
class ApiError : public std::runtime_error {
public:
    // type defaults from the status: "invalid_request_error" for 4xx,
    // "server_error" for 5xx. Empty param / code become JSON null. Control
    // characters in message and param are escaped (escape_control): they
    // may quote what the client sent.
    ApiError(int status, const std::string& message, std::string param = "", std::string code = "",
             std::string type = "");
    int status;
    std::string type;
    std::string param;
    std::string code;
};

// The OpenAI error body for an ApiError.
nlohmann::ordered_json api_error_json(const ApiError& error);

// Text safe for a log line or an error message: C0 and C1 control
// characters, DEL and ill-formed UTF-8 bytes become "\xHH", a backslash
// "\\"; everything else is kept.
std::string escape_control(std::string_view text);

// Request body -> JSON object: 400 for invalid UTF-8, malformed JSON, a JSON
// limit (JSON_BODY_LIMITS) or a value that is not an object.
nlohmann::ordered_json parse_json_body(const std::string& body);

// What the reply must parse as (constrained decoding, engine/text/grammar.h):
// response_format {"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"schema": ...}}, or the `grammar` extension (GBNF text).
// The schema and grammar are checked when the task is made (they need the
// model's vocabulary), with errors naming `param`.
struct OutputFormat {
    enum class Kind { TEXT, JSON_OBJECT, JSON_SCHEMA, GRAMMAR };
    Kind kind = Kind::TEXT;
    nlohmann::ordered_json schema;  // JSON_SCHEMA (properties in the order sent)
    std::string gbnf;       // GRAMMAR
    std::string param;      // "response_format.json_schema.schema", "grammar"
};

// Fields the chat and completion endpoints share, already range-checked.
struct GenerationOptions {
    SamplingParams sampling;        // SamplingParams' defaults where not given; a random seed when none
    std::optional<int> max_tokens;  // absent: the rest of the context
    std::vector<std::string> stop;  // at most 4, empty strings dropped
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool ignore_eos = false;     // extension: keep going past end-of-sequence
    bool cache_prompt = true;    // extension: reuse the KV cache of the previous request
    int top_logprobs = -1;       // -1: no logprobs; else alternatives per token (chosen token always)
    // Extension: beam search. 0 = sampling; 1..32 = beams kept per step,
    // ranked by raw log-probabilities (the sampling fields must then be
    // absent or neutral; seed is ignored: beam search is deterministic).
    int beam_width = 0;
    float length_penalty = 1.0f;  // extension: alpha of score = logprob / length^alpha, with beam_width
    int n = 1;                    // choices; > 1 only with beam_width (the n best hypotheses)
    OutputFormat format;          // TEXT unless asked; not with beam_width
};

// tool_choice: auto (the model decides; its calls are parsed from the
// reply), none (the reply is text), required (the grammar forces a call to
// one of the tools) or one named function (a call to it).
struct ToolChoice {
    enum class Kind { AUTO, NONE, REQUIRED, NAMED };
    Kind kind = Kind::AUTO;
    std::string name;  // NAMED
};

struct ChatRequest {
    // Roles system / user / assistant / tool ("developer" -> system in
    // chat.messages). tools: each {"type": "function", "function": {"name",
    // "description"?, "parameters"? (an object)}}; an assistant message's
    // tool_calls reach the template with their arguments as objects.
    ChatInput chat;
    GenerationOptions options;
    ToolChoice tool_choice;  // AUTO; NONE without tools
    bool parallel_tool_calls = true;
};

struct CompletionRequest {
    std::string prompt;              // when given as text
    std::vector<int> prompt_tokens;  // when given as token ids (used as they are, no BOS added)
    bool has_prompt_tokens = false;
    GenerationOptions options;
};

// ctx bounds max_tokens; vocab_size bounds token ids.
ChatRequest chat_request_parse(const nlohmann::ordered_json& body, int ctx);
CompletionRequest completion_request_parse(const nlohmann::ordered_json& body, int ctx, int vocab_size);

// The messages array alone (also used by /tokenize).
std::vector<ChatMessage> chat_messages_parse(const nlohmann::ordered_json& body);
// What a chat template sees of a chat request (/v1/chat/completions,
// /tokenize, /apply-template): the messages (as text, and as sent), `tools`
// (an array or absent), the template variables of `chat_template_kwargs` (an
// object; it may not set messages, tools, documents or
// add_generation_prompt) and a top-level `enable_thinking` (the kwargs'
// wins), and `add_generation_prompt` (default true). With `tool_choice`
// "none" the tools are left out: the template is not told of them.
ChatInput chat_input_parse(const nlohmann::ordered_json& body);
// The bytes of text a chat input brings to the template, counted before it
// is rendered: messages' content, every other field of a message (tool
// calls' names and arguments, reasoning_content ...) as JSON text, the tools
// and the template variables (chat_template_kwargs) as JSON text.
size_t chat_input_bytes(const ChatInput& chat);

struct TokenizeRequest {
    std::string content;                // when given as text
    ChatInput chat;                     // when given as a chat (rendered with the template)
    bool has_messages = false;
    size_t text_bytes = 0;     // of the content or of all messages, at most MAX_TOKENIZE_BYTES
    bool add_special = false;  // text: prepend BOS
    bool with_pieces = false;  // answer [{id, piece}] instead of ids
};
TokenizeRequest tokenize_request_parse(const nlohmann::ordered_json& body);

// {"tokens": [ids]} with every id in [0, vocab_size).
std::vector<int> detokenize_request_parse(const nlohmann::ordered_json& body, int vocab_size);

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
