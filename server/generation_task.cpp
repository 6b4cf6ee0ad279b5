// Parsed request -> prompt ids -> engine task, and the tasks' work on the
// engine thread (see generation_task.h).
#include "server/generation_task.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "chat/json_schema.h"
#include "engine/text/work_budget.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// 400 context_length_exceeded for the messages or prompt (what) of a request;
// detail says how they exceed the context.
ApiError context_length_error(const char* what, int ctx, const std::string& detail) {
    return ApiError(400,
                    "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, your " + what +
                        " " + detail + ". Shorten the " + what + " or start the server with a larger --ctx.",
                    what, "context_length_exceeded");
}

// Refuses text that cannot fit the context before it is tokenized (the
// tokenizer needs ~70 bytes of memory per byte of text).
void check_text_length(const Session& e, size_t bytes, const char* what) {
    const size_t limit = size_t(e.ctx()) * MAX_TEXT_BYTES_PER_TOKEN;
    if (bytes > limit)
        throw context_length_error(what, e.ctx(),
                                   "hold " + std::to_string(bytes) + " bytes of text, more than the " +
                                       std::to_string(limit) + " (" + std::to_string(MAX_TEXT_BYTES_PER_TOKEN) +
                                       " per token) this server tokenizes for that context");
}

// A generation that the shutdown cut short ends in a 503 error, not in a
// result that looks finished.
template <class Result>
void push_result(Task& task, Result result) {
    if (result.finish_reason == FinishReason::CANCELLED && task.cut_by_shutdown())
        task.push(TaskError{503, SHUTTING_DOWN});
    else
        task.push(std::move(result));
}

}  // namespace

void release_tokenizer_memory(size_t text_bytes) {
#ifdef __GLIBC__
    if (text_bytes > (64u << 10)) malloc_trim(0);
#endif
}

ApiError grammar_error(const MoeError& error, const std::string& param) {
    return ApiError(400, "Invalid '" + param + "': " + error.what(), param, "invalid_value");
}

ApiError invalid_messages(const MoeError& error) {
    return ApiError(400, std::string("Invalid 'messages': ") + error.what(), "messages", "invalid_value");
}

namespace {

template <class Render>
auto render_chat(const ModelChat& chat, const ChatInput& input, Render render) {
    if (input.tools.is_array() && !input.tools.empty() && !chat.has_jinja())
        throw ApiError(400,
                       "'tools' (tool calling) needs the model's own Jinja chat_template, which this model lacks "
                       "(its chats use the " +
                           chat.name() + " renderer).",
                       "tools", "unsupported_parameter");
    try {
        return render();
    } catch (const WorkBudgetError& err) {
        if (err.end == WorkEnd::STOPPED) throw;  // answered 503 by the transport
        throw invalid_messages(err);
    } catch (const ChatTemplateError& err) {
        throw ApiError(400, std::string("The model's chat template failed on this request: ") + err.what(), "messages",
                       "template_error");
    } catch (const MoeError& err) {
        throw invalid_messages(err);
    }
}

// The request field an output format came from ("response_format", "grammar", ...).
std::string output_grammar_param(const OutputFormat& f) {
    return f.param.substr(0, f.param.find('.'));
}

// The grammar a request's output format asks for (none for text), parsed
// against the model's vocabulary: 400 naming the field for a schema or
// grammar the engine refuses.
std::shared_ptr<const Grammar> output_grammar(const Session& e, const OutputFormat& f) {
    const std::string param = output_grammar_param(f);
    try {
        switch (f.kind) {
        case OutputFormat::Kind::TEXT: return nullptr;
        case OutputFormat::Kind::JSON_OBJECT:
            return e.model().grammar(json_object_gbnf(), f.param);
        case OutputFormat::Kind::JSON_SCHEMA: return e.model().grammar(json_schema_gbnf(f.schema, f.param), f.param);
        case OutputFormat::Kind::GRAMMAR: return e.model().grammar(f.gbnf, f.param);
        }
    } catch (const MoeError& err) {
        throw grammar_error(err, param);
    }
    return nullptr;
}

// The grammar of a forced tool_choice (required, or one named function):
// the template family's call envelope around each tool's parameter schema.
std::shared_ptr<const Grammar> tool_grammar(const Session& e, const ModelChat& chat, const ChatRequest& r) {
    const ToolCallFormat& format = chat.tool_format();
    if (format.family == ToolCallFamily::NONE)
        throw ApiError(400,
                       "'tool_choice' cannot force a call: this model's chat template (" + chat.name() +
                           ") writes tool calls in no format this server knows.",
                       "tool_choice", "unsupported_parameter");
    const bool named = r.tool_choice.kind == ToolChoice::Kind::NAMED;
    try {
        return e.model().grammar(
            tool_call_grammar(format, r.chat.tools, named ? r.tool_choice.name : "", !named && r.parallel_tool_calls),
            "tool_choice");
    } catch (const MoeError& err) {
        throw grammar_error(err, "tools");
    }
}

}  // namespace

std::vector<int> chat_prompt_of(const Session& e, const ModelChat& chat, const ChatInput& input) {
    return render_chat(chat, input, [&] { return chat_prompt_ids(e, chat, input); });
}

std::vector<int> chat_prompt_ids(const Session& e, const ModelChat& chat, const ChatInput& input) {
    ChatPrompt prompt = chat.prompt(e.model().tokenizer(), input);
    std::vector<ReplySpan> replies;
    for (const ChatSpan& s : prompt.spans)
        if (s.reply) replies.push_back({s.begin, s.end, input.messages[size_t(s.message)].content});
    return e.carry_replies(std::move(prompt.ids), replies);
}

std::string chat_text_of(const ModelChat& chat, const ChatInput& input) {
    return render_chat(chat, input, [&] { return chat.text(input); });
}

std::vector<int> text_tokens(const Tokenizer& tokenizer, const std::string& text, bool add_bos) {
    // A tokenizer that adds no BOS (Qwen's) starts with the text either way.
    return add_bos ? tokenizer.encode_prompt(text) : tokenizer.encode(text);
}

GenerationTasks::GenerationTasks(Metrics& metrics) : metrics_(metrics) {}

ChatTask GenerationTasks::chat(const Session& e, const ModelChat& model_chat, const ChatRequest& chat) {
    const size_t bytes = chat_input_bytes(chat.chat);
    check_text_length(e, bytes, "messages");
    RequestGrammar grammar;
    switch (chat.tool_choice.kind) {
    case ToolChoice::Kind::REQUIRED:
    case ToolChoice::Kind::NAMED: grammar = {tool_grammar(e, model_chat, chat), "tools"}; break;
    default: grammar = {output_grammar(e, chat.options.format), output_grammar_param(chat.options.format)};
    }
    std::vector<int> prompt = chat_prompt_of(e, model_chat, chat.chat);
    release_tokenizer_memory(bytes);
    ChatTask out{make(e, Endpoint::CHAT, std::move(prompt), chat.options, std::move(grammar))};
    const ToolCallFormat& format = model_chat.tool_format();
    if (chat.tool_choice.kind != ToolChoice::Kind::NONE && format.family != ToolCallFamily::NONE) {
        out.tool_calls = &format;
        out.tool_trigger_token = model_chat.tool_trigger_token();
    }
    return out;
}

std::shared_ptr<Task> GenerationTasks::completion(const Session& e, const CompletionRequest& c) {
    if (!c.has_prompt_tokens) check_text_length(e, c.prompt.size(), "prompt");
    std::vector<int> prompt = c.has_prompt_tokens ? c.prompt_tokens : text_tokens(e.model().tokenizer(), c.prompt, true);
    release_tokenizer_memory(c.prompt.size());
    return make(e, Endpoint::COMPLETION, std::move(prompt), c.options,
                {output_grammar(e, c.options.format), output_grammar_param(c.options.format)});
}

std::shared_ptr<Task> GenerationTasks::make(const Session& e, Endpoint endpoint, std::vector<int> prompt,
                                            const GenerationOptions& o, RequestGrammar grammar) {
    try {
        e.check_prompt(prompt);
    } catch (const ContextLengthError& err) {
        throw context_length_error(
            endpoint == Endpoint::CHAT ? "messages" : "prompt", err.ctx,
            "resulted in " + std::to_string(err.n_prompt) + " tokens, which leaves no room for a reply");
    }
    GenerateRequest g;
    g.prompt = std::move(prompt);
    g.sampling = o.sampling;
    g.max_tokens = o.max_tokens.value_or(e.ctx());  // absent: until the context is full (the engine stops there)
    g.stop = o.stop;
    g.ignore_eos = o.ignore_eos;
    g.top_logprobs = o.top_logprobs;
    g.reuse_prefix = o.cache_prompt;
    g.continues_prompt = endpoint == Endpoint::COMPLETION;
    g.grammar = std::move(grammar.grammar);
    // The grammar is matched from its start here, on the HTTP thread, so a
    // grammar that cannot even start is a 400 before a stream's 200 goes
    // out; one found too ambiguous later is a 400 too (run_sampling).
    try {
        e.check_grammar(g);
    } catch (const GrammarError& err) {
        throw grammar_error(err, grammar.param);
    }

    if (o.beam_width > 0) {
        BeamRequest b = beam_request_from(g, o.beam_width, o.length_penalty, o.n);
        return std::make_shared<Task>(
            [this, b](Session& engine, Task& task) { run_beam_search(engine, task, b); });
    }
    return std::make_shared<Task>([this, g, param = grammar.param](Session& engine, Task& task) {
        run_sampling(engine, task, g, param);
    });
}

void GenerationTasks::run_sampling(Session& e, Task& task, const GenerateRequest& g,
                                   const std::string& grammar_param) {
    bool first = true;
    GenerateResult result;
    try {
        result = e.generate(g, [&](const TokenEvent& ev) {
            metrics_.add_generated_tokens(1);
            if (first) {
                first = false;
                metrics_.observe_ttft(seconds_since(task.admitted()));
            }
            task.push(ev);
            return !task.cancelled();
        });
    } catch (const GrammarError& err) {
        // The grammar's fault, found while decoding: the client's error (a
        // stream whose 200 is out gets it as its error event).
        const ApiError api = grammar_error(err, grammar_param);
        task.push(TaskError{api.status, api.what(), api.param});
        return;
    }
    metrics_.add_prompt_tokens(result.n_prompt, result.n_cached);
    metrics_.count_generation(finish_reason_name(result.finish_reason), result.prefill_tok_s(), result.decode_tok_s());
    push_result(task, std::move(result));
}

// No token events: the choices come with the BeamResult.
void GenerationTasks::run_beam_search(Session& e, Task& task, const BeamRequest& b) {
    BeamResult result = e.beam_search(b, [&](const BeamStep&) { return !task.cancelled(); });
    const bool done = result.finish_reason != FinishReason::CANCELLED && !result.hypotheses.empty();
    if (done) metrics_.observe_ttft(seconds_since(task.admitted()));
    metrics_.add_generated_tokens(completion_tokens(result));
    metrics_.add_prompt_tokens(result.n_prompt, result.n_cached);
    metrics_.count_generation(finish_reason_name(result.finish_reason), result.prefill_tok_s(), result.best_tok_s());
    metrics_.observe_beam_search(result.n_steps, result.expert_load.histogram, result.expert_load.max(),
                                 result.expert_load.mean());
    push_result(task, std::move(result));
}
