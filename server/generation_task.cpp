// Parsed request -> prompt ids -> engine task, and the tasks' work on the
// engine thread (see generation_task.h).
#include "server/generation_task.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

ApiError invalid_messages(const MoeError& error) {
    return ApiError(400, std::string("Invalid 'messages': ") + error.what(), "messages", "invalid_value");
}

std::vector<int> text_tokens(const Tokenizer& tokenizer, const std::string& text, bool add_bos) {
    std::vector<int> ids;
    if (add_bos) ids.push_back(tokenizer.bos_id());
    std::vector<int> encoded = tokenizer.encode(text);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    return ids;
}

GenerationTasks::GenerationTasks(Metrics& metrics) : metrics_(metrics) {}

std::shared_ptr<Task> GenerationTasks::chat(const Engine& e, const ChatRequest& chat) {
    std::vector<int> prompt;
    try {
        prompt = e.chat_prompt(chat.messages).ids;
    } catch (const MoeError& err) {
        throw invalid_messages(err);
    }
    return make(e, Endpoint::CHAT, std::move(prompt), chat.options);
}

std::shared_ptr<Task> GenerationTasks::completion(const Engine& e, const CompletionRequest& c) {
    std::vector<int> prompt = c.has_prompt_tokens ? c.prompt_tokens : text_tokens(e.tokenizer(), c.prompt, true);
    return make(e, Endpoint::COMPLETION, std::move(prompt), c.options);
}

std::shared_ptr<Task> GenerationTasks::make(const Engine& e, Endpoint endpoint, std::vector<int> prompt,
                                            const GenerationOptions& o) {
    try {
        e.check_prompt(prompt);
    } catch (const ContextLengthError& err) {
        const char* what = endpoint == Endpoint::CHAT ? "messages" : "prompt";
        throw ApiError(400,
                       "This model's maximum context length is " + std::to_string(err.ctx) + " tokens. However, your " +
                           what + " resulted in " + std::to_string(err.n_prompt) +
                           " tokens, which leaves no room for a reply. Shorten the " + what +
                           " or start the server with a larger --ctx.",
                       what, "context_length_exceeded");
    }
    GenerateRequest g;
    g.prompt = std::move(prompt);
    g.sampling = o.sampling;
    g.max_tokens = o.max_tokens.value_or(e.ctx());  // absent: until the context is full (the engine stops there)
    g.stop = o.stop;
    g.ignore_eos = o.ignore_eos;
    g.top_logprobs = o.top_logprobs;
    g.reuse_prefix = o.cache_prompt;

    const bool is_chat = endpoint == Endpoint::CHAT;
    if (o.beam_width > 0) {
        BeamRequest b = beam_request_from(g, o.beam_width, o.length_penalty, o.n);
        return std::make_shared<Task>(
            [this, b, is_chat](Engine& engine, Task& task) { run_beam_search(engine, task, b, is_chat); });
    }
    return std::make_shared<Task>(
        [this, g, is_chat](Engine& engine, Task& task) { run_sampling(engine, task, g, is_chat); });
}

void GenerationTasks::run_sampling(Engine& e, Task& task, const GenerateRequest& g, bool is_chat) {
    bool first = true;
    GenerateResult result = e.generate(g, [&](const TokenEvent& ev) {
        metrics_.add_generated_tokens(1);
        if (first) {
            first = false;
            metrics_.observe_ttft(seconds_since(task.admitted()));
        }
        task.push(ev);
        return !task.cancelled();
    });
    if (is_chat && result.finish_reason != FinishReason::CANCELLED) e.remember_reply(result.text, result.tokens);
    metrics_.add_prompt_tokens(result.n_prompt, result.n_cached);
    metrics_.count_generation(finish_reason_name(result.finish_reason), result.prefill_tok_s(), result.decode_tok_s());
    task.push(std::move(result));
}

// No token events: the choices come with the BeamResult.
void GenerationTasks::run_beam_search(Engine& e, Task& task, const BeamRequest& b, bool is_chat) {
    BeamResult result = e.beam_search(b, [&](const BeamStep&) { return !task.cancelled(); });
    const bool done = result.finish_reason != FinishReason::CANCELLED && !result.hypotheses.empty();
    if (is_chat && done) e.remember_reply(result.hypotheses[0].text, result.hypotheses[0].tokens);
    if (done) metrics_.observe_ttft(seconds_since(task.admitted()));
    metrics_.add_generated_tokens(completion_tokens(result));
    metrics_.add_prompt_tokens(result.n_prompt, result.n_cached);
    metrics_.count_generation(finish_reason_name(result.finish_reason), result.prefill_tok_s(), result.best_tok_s());
    metrics_.observe_beam_search(result.n_steps, result.expert_load.histogram, result.expert_load.max(),
                                 result.expert_load.mean());
    task.push(std::move(result));
}
