// Request -> task mapping: turns a parsed OpenAI request (openai.h)
// into the prompt's token ids and the engine Task (engine_worker.h) that
// runs its generation, sampled or beam search, and sends typed events back.
// The prompt is checked here, once, by the engine (Session::check_prompt),
// before the task is queued: the HTTP status must be known before the
// response starts. On the engine thread the task also keeps the server's
// books (metrics); prefix reuse across chat turns is the session's own
// business. The way back, task events -> OpenAI JSON, is openai.h's too.
// A generation the server's shutdown cut short ends in TaskError 503, never
// in a result. Must not know about HTTP transport or the queue's owner.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/errors.h"
#include "chat/model_chat.h"
#include "engine/runtime/beam_search.h"
#include "engine/runtime/session.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/engine_worker.h"

// A request's text (messages or prompt) may hold at most this many bytes per
// context position; longer text is refused before it is tokenized.
inline constexpr size_t MAX_TEXT_BYTES_PER_TOKEN = 32;

// Call after tokenizing text_bytes of text on an HTTP thread: past 64 KiB,
// gives the memory the tokenizer freed back to the system (glibc keeps
// freed small blocks in the thread's arena, ~70 bytes per byte of text).
void release_tokenizer_memory(size_t text_bytes);

// The ApiError (400, param "messages") for messages the chat template refuses.
ApiError invalid_messages(const MoeError& error);
// The ApiError (400, invalid_value) for a grammar, schema or tool set the
// engine refuses; param names the field it came from ("grammar",
// "response_format", "tools", ...).
ApiError grammar_error(const MoeError& error, const std::string& param);

// A request's grammar (none for plain text) and the field it came from.
struct RequestGrammar {
    std::shared_ptr<const Grammar> grammar;
    std::string param;
};

// A chat request's prompt ids: the model's rendering (ModelChat::prompt)
// with each reply the session generated carried by its ids
// (Session::carry_replies); or its text (ModelChat::text, for
// /apply-template). The refusals are ApiErrors: 400 "template_error" naming
// the template's problem (ChatTemplateError), 400 invalid messages
// (invalid_messages), 400 unsupported 'tools' for a model without a Jinja
// template.
std::vector<int> chat_prompt_of(const Session& engine, const ModelChat& chat, const ChatInput& input);
// The same ids with the rendering's own errors (ChatTemplateError, MoeError),
// for the CLI, which words them itself.
std::vector<int> chat_prompt_ids(const Session& engine, const ModelChat& chat, const ChatInput& input);
std::string chat_text_of(const ModelChat& chat, const ChatInput& input);

// Tokenizer::encode_prompt (BOS first when the tokenizer adds one) with
// add_bos, else the plain encoding of text.
std::vector<int> text_tokens(const Tokenizer& tokenizer, const std::string& text, bool add_bos);

// A chat request's task and how its reply's tool calls are read, decided
// in one place (GenerationTasks::chat) with the grammar that forces a call.
struct ChatTask {
    std::shared_ptr<Task> task;
    // The format the reply's tool calls are parsed in
    // (OpenAiResponder::parse_tool_calls): tool_choice is not "none" and the
    // model's template has a known tool-call format; null: the reply is text.
    const ToolCallFormat* tool_calls = nullptr;
    int tool_trigger_token = -1;  // its trigger's control-token id (-1: text)
};

class GenerationTasks {
public:
    // metrics: counted into on the engine thread; must outlive the tasks.
    explicit GenerationTasks(Metrics& metrics);

    // HTTP thread: the task of a chat request; its prompt is chat_prompt_of
    // (one rendering, remembered replies by their ids).
    // Throws ApiError: 400 for messages the template refuses, 400
    // context_length_exceeded when the prompt leaves no room for a reply
    // or its text is longer than MAX_TEXT_BYTES_PER_TOKEN per position,
    // 400 naming the field for a schema, grammar or tool the engine refuses.
    // The reply is constrained by a forced tool_choice's envelope grammar
    // (each tool's parameters a schema), else by the output format.
    ChatTask chat(const Session& engine, const ModelChat& chat, const ChatRequest& request);
    // HTTP thread: the task of a completion request (its token ids as
    // given, or BOS and the text's encoding). Throws as chat() does.
    std::shared_ptr<Task> completion(const Session& engine, const CompletionRequest& request);

private:
    // Checks the grammar from its start (Session::check_grammar) before the
    // task is queued: 400 naming grammar.param.
    std::shared_ptr<Task> make(const Session& engine, Endpoint endpoint, std::vector<int> prompt,
                               const GenerationOptions& options, RequestGrammar grammar);
    // Engine thread: the tasks' work. A GrammarError while decoding ends the
    // task in TaskError 400 naming grammar_param.
    void run_sampling(Session& engine, Task& task, const GenerateRequest& request,
                      const std::string& grammar_param);
    void run_beam_search(Session& engine, Task& task, const BeamRequest& request);

    Metrics& metrics_;
};
