// OpenAI request parsing: validates JSON bodies of /v1/chat/completions,
// /v1/completions, /tokenize and /detokenize into native structs early, so
// the rest of the server never looks at JSON from a client again. Every
// problem becomes an ApiError carrying the HTTP status and OpenAI's error
// fields (message, type, param, code). Must not tokenize, run the model or
// know about HTTP transport.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_bounded.h"
#include "chat/chat_template.h"
#include "engine/runtime/sampler.h"

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
