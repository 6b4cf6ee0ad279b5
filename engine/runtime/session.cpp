// Session: runs generation and scoring requests on a Model, on the calling
// thread (see session.h). The prompt's prefix shared with the previous
// request is reused where the sequence state can be cut back to it, and a
// chat prompt carries the ids generated for earlier replies (ReplyMemory),
// so a multi-turn chat only prefills what is new.
//
// Remembered replies and their splice into a prompt (see reply_memory.h).
#include "engine/runtime/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>

#include "base/errors.h"
#include "cpu_kernels/kernels.h"
#include "engine/devices/device_setup.h"
#include "engine/devices/expert_executor.h"
#include "engine/devices/hybrid_executor.h"
#include "engine/model/weights.h"
#include "engine/runtime/beam_search.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/reply_memory.h"
#include "engine/runtime/token_mixer.h"
#include "engine/state/sequence_state.h"
#include "profiles/routing_stats.h"

namespace {

using Clock = std::chrono::steady_clock;

// How far before a prompt's end a state that cannot be cut back anywhere
// keeps a reuse point (Impl::prefill_prompt).
constexpr int REUSE_POINT_BACK = 4;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

ContextLengthError::ContextLengthError(int n_prompt_, int ctx_)
    : MoeError("prompt of " + std::to_string(n_prompt_) + " tokens does not fit in the context of " +
               std::to_string(ctx_) + " tokens"),
      n_prompt(n_prompt_),
      ctx(ctx_) {}

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
    case FinishReason::STOP: return "stop";
    case FinishReason::LENGTH: return "length";
    case FinishReason::CANCELLED: return "cancelled";
    }
    return "?";
}

struct Session::Impl {
    std::shared_ptr<const Model> model_held;
    const Model& model;
    const ModelConfig& config;
    const ModelWeights& weights;
    const Tokenizer& tokenizer;
    int ctx;
    ThreadPool pool;
    DeviceSetup device;  // the backend, and the device experts may run on
    std::unique_ptr<SequenceState> state;  // sequence 0 holds `cached`; beams use 1..
    CpuExpertExecutor cpu_executor;
    // With a device only: the planner, the device's experts beside the CPU's,
    // and the execution statistics it records. Without one the forward pass
    // calls the CPU executor directly.
    std::unique_ptr<HybridExpertExecutor> hybrid;
    ForwardPass forward;
    Batch batch;
    std::vector<int> cached;  // tokens whose keys/values are in slot 0, in order
    ReplyMemory replies;      // recent replies' ids, so a chat's next turn reuses cached
    mutable std::mutex stats_mutex;
    RoutingStats stats_total, stats_last, stats_step;
    ExecutionStats exec_total, exec_last;        // with a device
    std::vector<uint8_t> slots_now;              // Session::expert_slots, after the last pass
    uint64_t passes_total = 0, passes_last = 0;  // without one: forward passes, for ExecutionStats::layers

    Impl(std::shared_ptr<const Model> m, const SessionOptions& o, int n_threads)
        : model_held(std::move(m)),
          model(*model_held),
          config(model.config()),
          weights(model.weights()),
          tokenizer(model.tokenizer()),
          ctx(config.max_position_embeddings > 0 ? std::min(o.ctx, config.max_position_embeddings) : o.ctx),
          pool(n_threads),
          device(device_setup(o.device, o.max_batch, config, weights, ctx, pool)),
          state(make_sequence_state(config, 1, ctx, device.backend->state_memory())),
          cpu_executor(config, weights, pool, o.max_batch),
          hybrid(device.device
                     ? std::make_unique<HybridExpertExecutor>(config, *device.backend, cpu_executor,
                                                              device.device.get(), std::move(device.placement))
                     : nullptr),
          forward(config, *device.backend, *state, hybrid ? static_cast<ExpertExecutor&>(*hybrid) : cpu_executor,
                  o.max_batch, o.max_batch),
          stats_total(config.n_layers, std::max(1, config.n_experts)),
          stats_last(config.n_layers, std::max(1, config.n_experts)),
          stats_step(config.n_layers, std::max(1, config.n_experts)),
          exec_total(config.n_layers, std::max(1, config.n_experts)),
          exec_last(config.n_layers, std::max(1, config.n_experts)) {
        batch.reserve(o.max_batch);
        forward.set_predict_next_layer(o.predict_next_layer);
        slots_now.assign(size_t(config.n_layers) * std::max(1, config.n_experts), Session::EXPERT_CPU);
        if (hybrid) copy_slots();
    }

    // Runs tokens[from..to) (to -1: the end) at positions from.. in chunks;
    // hands on_logits the logits of the last token (or of every token when
    // all_logits).
    template <class OnLogits>
    void prefill(const std::vector<int>& tokens, int from, bool all_logits, OnLogits&& on_logits, int to = -1) {
        int n = to < 0 ? int(tokens.size()) : to;
        for (int b = from; b < n; b += forward.max_batch()) {
            int e = std::min(n, b + forward.max_batch());
            batch.clear();
            for (int i = b; i < e; i++) batch.add(tokens[i], i, 0, all_logits || i == n - 1);
            stats_step.clear();
            const float* logits = forward.run(batch, &stats_step);
            record_stats();
            on_logits(b, e, logits);
        }
    }

    // Prefills the prompt into sequence 0 after the longest prefix shared
    // with what the state holds and can be cut back to (when reuse; at least
    // the last prompt token is run again so its logits exist). Returns those
    // logits; sets n_cached. A state that cannot be cut back anywhere (a
    // recurrent one) gets a reuse point REUSE_POINT_BACK tokens before the
    // prompt's end: a chat's next prompt repeats this one up to about there
    // (a template that drops the last turn's thinking parts from it in the
    // assistant's opening tokens), as llama.cpp's server checkpoints 4
    // tokens before a prompt's end.
    const float* prefill_prompt(const std::vector<int>& prompt, bool reuse, int& n_cached) {
        const int n_prompt = int(prompt.size());
        int common = 0;
        if (reuse) {
            int limit = std::min<int>(int(cached.size()), n_prompt - 1);
            while (common < limit && cached[common] == prompt[common]) common++;
            common = state->reusable_prefix(0, common);
        }
        n_cached = common;
        state->truncate(0, common);
        cached.assign(prompt.begin(), prompt.begin() + common);
        const float* logits = nullptr;
        const int mark = n_prompt - REUSE_POINT_BACK;
        if (!state->cuts_anywhere() && mark > common) {
            prefill(prompt, common, false, [](int, int, const float*) {}, mark);
            state->mark_reuse_point(0);
            common = mark;
        }
        prefill(prompt, common, false, [&](int, int, const float* l) { logits = l; });
        cached = prompt;
        return logits;
    }

    // A request starts: the "last request" statistics start over.
    void clear_last_stats() {
        std::lock_guard lock(stats_mutex);
        stats_last.clear();
        exec_last.clear();
        passes_last = 0;
    }

    // After each forward pass: its routing counts, and with a device what
    // the hybrid executor recorded.
    void record_stats() {
        std::lock_guard lock(stats_mutex);
        stats_total.merge(stats_step);
        stats_last.merge(stats_step);
        if (!hybrid) {
            passes_total++;
            passes_last++;
            return;
        }
        exec_total.merge(hybrid->step());
        exec_last.merge(hybrid->step());
        hybrid->clear_step();
        copy_slots();
    }

    // The hybrid executor's pinned and cached experts into slots_now.
    void copy_slots() {
        const int E = std::max(1, config.n_experts);
        for (int l = 0; l < config.n_layers; l++)
            for (int e = 0; e < E; e++)
                slots_now[size_t(l) * E + e] = hybrid->pinned(l, e)   ? Session::EXPERT_PINNED
                                               : hybrid->cached(l, e) ? Session::EXPERT_CACHED
                                                                      : Session::EXPERT_CPU;
    }

    // Without a device every routed expert ran on the CPU, untimed: the
    // execution statistics are the routing counts (stats_mutex held).
    ExecutionStats cpu_only_stats(const RoutingStats& routing, uint64_t passes) const {
        ExecutionStats s(routing.n_layers(), routing.n_experts());
        s.tokens[int(ExpertSite::CPU)] = routing.counts();
        s.runs[int(ExpertSite::CPU)] = routing.runs();
        s.layers = passes * uint64_t(config.n_layers);
        return s;
    }
};

void check_session_options(const SessionOptions& options) {
    if (options.ctx < 16)
        throw OptionError(SessionOption::CTX, "", "must be at least 16, got " + std::to_string(options.ctx));
    if (options.max_batch < 1) throw OptionError(SessionOption::MAX_BATCH, "", "must be at least 1");
}

namespace {

int session_threads(const SessionOptions& options) {
    check_session_options(options);
    return options.threads > 0 ? options.threads : physical_core_count();
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const SessionOptions& options)
    : impl_(std::make_unique<Impl>(std::move(model), options, session_threads(options))) {}

Session::~Session() = default;

const Model& Session::model() const { return impl_->model; }
const std::shared_ptr<const Model>& Session::shared_model() const { return impl_->model_held; }
int Session::ctx() const { return impl_->ctx; }
int Session::threads() const { return impl_->pool.size(); }

std::vector<int> Session::carry_replies(std::vector<int> ids, std::span<ReplySpan> replies) const {
    return impl_->replies.splice(std::move(ids), replies, impl_->tokenizer);
}

void Session::set_routing_observer(RoutingObserver* observer) {
    impl_->forward.set_routing_observer(observer);
}

RoutingCounts Session::routing_counts() const {
    std::lock_guard lock(impl_->stats_mutex);
    RoutingCounts r;
    r.n_layers = impl_->stats_total.n_layers();
    r.n_experts = impl_->stats_total.n_experts();
    r.total = impl_->stats_total.counts();
    r.last = impl_->stats_last.counts();
    r.predicted_total = impl_->stats_total.predicted();
    r.predicted_right_total = impl_->stats_total.predicted_right();
    r.predicted_last = impl_->stats_last.predicted();
    r.predicted_right_last = impl_->stats_last.predicted_right();
    return r;
}

const PlacementInfo& Session::placement() const { return impl_->device.info; }

Session::Execution Session::execution_stats() const {
    const Impl& m = *impl_;
    std::lock_guard lock(m.stats_mutex);
    if (!m.hybrid)
        return {m.cpu_only_stats(m.stats_total, m.passes_total), m.cpu_only_stats(m.stats_last, m.passes_last)};
    return {m.exec_total, m.exec_last};
}

std::vector<uint8_t> Session::expert_slots() const {
    std::lock_guard lock(impl_->stats_mutex);
    return impl_->slots_now;
}

void Session::check_prompt(const std::vector<int>& prompt) const {
    const int n_prompt = int(prompt.size());
    if (n_prompt == 0) throw MoeError("prompt is empty");
    if (n_prompt >= impl_->ctx) throw ContextLengthError(n_prompt, impl_->ctx);
    for (int t : prompt)
        if (t < 0 || t >= impl_->tokenizer.vocab_size())
            throw MoeError("prompt token " + std::to_string(t) + " is out of range");
}

bool reply_keeps_leading_space(const Tokenizer& tokenizer, std::span<const int> prompt, bool continues_prompt) {
    return continues_prompt &&
           std::any_of(prompt.begin(), prompt.end(), [&](int id) { return !tokenizer.is_control(id); });
}

namespace {

// The matcher of a request's grammar (none without one), as generate() runs
// it: the model's end tokens unless ignore_eos, the reply's first space
// stripped as the Detokenizer strips it.
std::optional<GrammarMatcher> request_grammar_matcher(const GenerateRequest& request, const Tokenizer& tokenizer,
                                                      const GrammarVocab* vocab, const std::vector<int>& eos) {
    if (!request.grammar) return std::nullopt;
    if (&request.grammar->vocab() != vocab) throw MoeError("the request's grammar was parsed for another model's vocabulary");
    std::span<const int> ends;
    if (!request.ignore_eos) ends = eos;
    return GrammarMatcher(request.grammar, ends,
                          !reply_keeps_leading_space(tokenizer, request.prompt, request.continues_prompt));
}

}  // namespace

void Session::check_grammar(const GenerateRequest& request) const {
    const Impl& m = *impl_;
    std::optional<GrammarMatcher> grammar =
        request_grammar_matcher(request, m.tokenizer, &m.model.grammar_vocab(), m.config.eos_token_ids);
    if (!grammar) return;
    std::vector<float> logits(size_t(m.tokenizer.vocab_size()), 0.0f);
    grammar->mask(logits.data());
}

GenerateResult Session::generate(const GenerateRequest& request,
                                const std::function<bool(const TokenEvent&)>& on_token) {
    Impl& m = *impl_;
    const auto t_start = Clock::now();
    const int n_prompt = int(request.prompt.size());
    check_prompt(request.prompt);
    if (request.max_tokens < 1) throw MoeError("max_tokens must be at least 1");
    const int max_reply = std::min(request.max_tokens, m.ctx - n_prompt);  // prompt + reply fit in the context

    GenerateResult result;
    result.n_prompt = n_prompt;
    m.clear_last_stats();

    const float* logits = m.prefill_prompt(request.prompt, request.reuse_prefix, result.n_cached);
    result.prefill_ms = ms_since(t_start);

    // A padded vocab_size (Qwen's) has ids the tokenizer lacks: never sampled.
    const int vocab = m.tokenizer.vocab_size();
    Sampler sampler(request.sampling, vocab);
    Detokenizer detok(m.tokenizer, !reply_keeps_leading_space(m.tokenizer, request.prompt, request.continues_prompt));
    StopMatcher stops(request.stop);
    std::vector<int> history = request.prompt;
    history.reserve(n_prompt + request.max_tokens);
    std::vector<float> work(vocab);
    Clock::time_point t_first{};
    TokenEvent event;
    std::optional<GrammarMatcher> grammar =
        request_grammar_matcher(request, m.tokenizer, &m.model.grammar_vocab(), m.config.eos_token_ids);

    for (;;) {
        std::copy_n(logits, vocab, work.data());
        if (grammar) grammar->mask(work.data());
        int token = sampler.sample(work.data(), history);
        bool eos = !request.ignore_eos && std::find(m.config.eos_token_ids.begin(), m.config.eos_token_ids.end(),
                                                    token) != m.config.eos_token_ids.end();
        event.token = token;
        event.text.clear();
        if (request.top_logprobs >= 0) {
            event.logprob = sampler.last_logprob(token);
            sampler.last_top_logprobs(request.top_logprobs, event.top_logprobs);
        }
        bool stopped = false;
        if (eos) {
            auto r = stops.push(detok.flush());
            event.text = r.emit + (r.stopped ? "" : stops.flush());
            result.finish_reason = FinishReason::STOP;
            stopped = true;
        } else {
            result.tokens.push_back(token);
            history.push_back(token);
            auto r = stops.push(detok.push(token));
            event.text = r.emit;
            if (r.stopped) {
                result.finish_reason = FinishReason::STOP;
                stopped = true;
            }
            if (grammar) {
                grammar->accept(token);
                if (!stopped && grammar->must_end()) {  // complete: what an end token would do, one pass sooner
                    auto rest = stops.push(detok.flush());
                    event.text += rest.emit + (rest.stopped ? "" : stops.flush());
                    result.finish_reason = FinishReason::STOP;
                    stopped = true;
                }
            }
        }
        result.n_generated++;
        bool at_limit = !stopped && result.n_generated >= max_reply;
        if (at_limit) {
            auto r = stops.push(detok.flush());
            event.text += r.emit;
            if (!r.stopped) event.text += stops.flush();
            result.finish_reason = r.stopped ? FinishReason::STOP : FinishReason::LENGTH;
            stopped = true;
        }
        result.text += event.text;
        if (result.n_generated == 1) {
            t_first = Clock::now();
            result.ttft_ms = ms_since(t_start);
        }
        bool keep_going = on_token(event);
        if (stopped) break;
        if (!keep_going) {
            result.finish_reason = FinishReason::CANCELLED;
            break;
        }
        // Decode step: the new token at the next position.
        m.batch.clear();
        m.batch.add(token, int(m.cached.size()), 0, true);
        m.stats_step.clear();
        logits = m.forward.run(m.batch, &m.stats_step);
        m.record_stats();
        m.cached.push_back(token);
    }
    if (result.n_generated > 0) result.decode_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_first).count();
    if (result.finish_reason != FinishReason::CANCELLED) m.replies.remember(result.text, result.tokens);
    return result;
}

BeamResult Session::beam_search(const BeamRequest& request, const std::function<bool(const BeamStep&)>& on_step) {
    Impl& m = *impl_;
    const auto t_start = Clock::now();
    check_prompt(request.prompt);
    beam_request_check(request, m.tokenizer.vocab_size());
    if (request.beam_width > m.forward.max_batch())
        throw MoeError("beam_width " + std::to_string(request.beam_width) + " exceeds the batch capacity of " +
                       std::to_string(m.forward.max_batch()));
    BeamResult result;
    result.n_prompt = int(request.prompt.size());
    m.clear_last_stats();
    const float* logits = m.prefill_prompt(request.prompt, request.reuse_prefix, result.n_cached);
    result.prefill_ms = ms_since(t_start);

    // Sequence 0 keeps the prompt (its state is all that is in use now);
    // beams use 1..w, room for the worst case: each beam writing its
    // longest reply.
    const int longest = std::min(request.max_tokens, m.ctx - result.n_prompt);
    m.state->reserve_seqs(1 + request.beam_width);
    m.state->reserve_growth(request.beam_width, longest);
    BeamModel model{m.config, m.tokenizer, *m.state, 1,
                    [&m](const Batch& batch) {
                        m.stats_step.clear();
                        const float* l = m.forward.run(batch, &m.stats_step);
                        m.record_stats();
                        return l;
                    },
                    m.stats_step, m.pool};
    beam_search_decode(model, request, 0, logits, on_step, result);
    if (result.finish_reason != FinishReason::CANCELLED && !result.hypotheses.empty())
        m.replies.remember(result.hypotheses[0].text, result.hypotheses[0].tokens);
    return result;
}

Session::Score Session::score(const std::vector<int>& tokens, int window, bool chunks) {
    Impl& m = *impl_;
    if (tokens.size() < 2) throw MoeError("need at least 2 tokens to score");
    window = std::min(window, m.ctx);
    if (window < 2) throw OptionError(SessionOption::SCORE_WINDOW, "", "the scoring window must be at least 2 tokens");
    const int vocab = m.config.vocab_size;
    Score s;
    m.cached.clear();  // the state is overwritten window by window
    m.state->clear(0);
    // Windows overlap by one token, so every token after the first is scored
    // exactly once, each window starting from an empty cache; chunks do not
    // overlap and score from their middle.
    if (chunks && tokens.size() < size_t(window))
        throw OptionError(SessionOption::SCORE_CHUNKS, "",
                          "the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of " +
                              std::to_string(window));
    const size_t step = chunks ? size_t(window) : size_t(window - 1);
    const int first = chunks ? window / 2 : 0;
    for (size_t start = 0; chunks ? start + window <= tokens.size() : start + 1 < tokens.size(); start += step) {
        size_t end = std::min(tokens.size(), start + window);
        std::vector<int> win(tokens.begin() + start, tokens.begin() + end);
        if (chunks && m.tokenizer.prompt_bos() >= 0) win[0] = m.tokenizer.prompt_bos();
        m.prefill(win, 0, true, [&](int b, int e, const float* logits) {
            for (int i = std::max(b, first); i < e && i + 1 < int(win.size()); i++) {
                const float* l = logits + size_t(i - b) * vocab;
                float mx = *std::max_element(l, l + vocab);
                double sum = 0;
                for (int v = 0; v < vocab; v++) sum += std::exp(double(l[v] - mx));
                s.nll_sum += std::log(sum) + mx - l[win[i + 1]];
                s.n_scored++;
            }
        });
    }
    return s;
}

void ReplyMemory::remember(const std::string& text, const std::vector<int>& tokens) {
    if (text.empty() || tokens.empty()) return;
    std::lock_guard lock(mutex_);
    std::erase_if(replies_, [&](const auto& r) { return r.first == text; });
    replies_.emplace_back(text, tokens);
    if (replies_.size() > MAX_REPLIES) replies_.pop_front();
}

std::vector<int> ReplyMemory::splice(std::vector<int> ids, std::span<ReplySpan> spans,
                                     const Tokenizer& tokenizer) const {
    // The generated ids for each span, found under the lock (replies_ holds
    // each text once); empty where none is remembered.
    std::vector<std::vector<int>> generated(spans.size());
    bool any = false;
    {
        std::lock_guard lock(mutex_);
        for (size_t s = 0; s < spans.size(); s++) {
            const auto it =
                std::find_if(replies_.begin(), replies_.end(), [&](const auto& r) { return r.first == spans[s].text; });
            if (it == replies_.end()) continue;
            generated[s] = it->second;
            any = true;
        }
    }
    if (!any) return ids;
    std::vector<int> out;
    out.reserve(ids.size());
    size_t copied = 0;  // ids before this are in out
    for (size_t s = 0; s < spans.size(); s++) {
        ReplySpan& span = spans[s];
        out.insert(out.end(), ids.begin() + long(copied), ids.begin() + long(span.begin));
        const std::vector<int>& mine = generated[s];
        // Ids that do not decode to the text would change what the model reads.
        const bool use = !mine.empty() && tokenizer.decode(mine) == span.text;
        const size_t begin = out.size();
        if (use)
            out.insert(out.end(), mine.begin(), mine.end());
        else
            out.insert(out.end(), ids.begin() + long(span.begin), ids.begin() + long(span.end));
        copied = span.end;
        span.begin = begin;
        span.end = out.size();
    }
    out.insert(out.end(), ids.begin() + long(copied), ids.end());
    return out;
}
