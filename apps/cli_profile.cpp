// `moe-server profile`: each selected prompt (by default rendered by the
// model's chat template, as `generate` renders a chat) is prefilled and then
// decoded greedily for --gen-tokens tokens with prefix reuse off, so every
// prompt token is counted; the routing counts of the
// prefill (snapshot at the first token) and of the decode steps are added to
// the profile's two tables. Progress with an ETA goes to stderr; a first
// Ctrl-C stops after the current token and writes the prompts completed so
// far, a second one kills. The file is replaced atomically and always passes
// the profile validator. With --trace FILE the per-token routing of the
// same completed prompts (profiles/routing_trace.h) is written beside it,
// its sums equal to the profile's tables. Runs the engine; owns no model
// math.
#include "apps/cli_profile.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/args.h"
#include "apps/cli.h"
#include "base/errors.h"
#include "base/files.h"
#include "chat/model_chat.h"
#include "engine/model/fingerprint.h"
#include "engine/runtime/session.h"
#include "profiles/profile.h"
#include "profiles/prompts.h"
#include "profiles/routing_trace.h"
#include "server/generation_task.h"
#include "server/placement_text.h"

namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_profile_stop = 0;

extern "C" void profile_on_sigint(int) {
    g_profile_stop = 1;
}

// Ctrl-C handling for the run: the first SIGINT sets g_profile_stop and the
// handler resets itself (SA_RESETHAND), so a second SIGINT kills as usual.
class SigintGuard {
public:
    SigintGuard() {
        g_profile_stop = 0;
        struct sigaction sa = {};
        sa.sa_handler = profile_on_sigint;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &previous_);
    }
    ~SigintGuard() { sigaction(SIGINT, &previous_, nullptr); }
    SigintGuard(const SigintGuard&) = delete;
    SigintGuard& operator=(const SigintGuard&) = delete;

private:
    struct sigaction previous_ = {};
};

std::string duration_text(double secs) {
    long s = long(secs + 0.5);
    char buf[32];
    if (s >= 3600) {
        std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    } else {
        std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
    }
    return buf;
}

// A progress bar on stderr: redrawn in place (\r) on a terminal, otherwise
// one line per tenth of the work so logs stay readable.
class ProgressBar {
public:
    explicit ProgressBar(int total) : total_(total), tty_(isatty(STDERR_FILENO) != 0), t0_(Clock::now()) {}

    void update(int done, uint64_t tokens) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - t0_).count();
        if (tty_) {
            if (done < total_ && elapsed - last_draw_ < 0.2) return;
            last_draw_ = elapsed;
        } else {
            int decile = total_ > 0 ? done * 10 / total_ : 10;
            if (decile == last_decile_) return;
            last_decile_ = decile;
        }
        const int width = 24;
        int filled = total_ > 0 ? done * width / total_ : width;
        std::string bar(size_t(filled), '=');
        bar.resize(size_t(width), ' ');
        std::string eta = done > 0 ? duration_text(elapsed / done * (total_ - done)) : "?";
        std::fprintf(stderr, "%sprofile [%s] %d/%d prompts %3d%% | %llu tokens | %.0f tok/s | %s elapsed, ETA %s%s",
                     tty_ ? "\r" : "", bar.c_str(), done, total_, total_ > 0 ? done * 100 / total_ : 100,
                     (unsigned long long)tokens, elapsed > 0 ? double(tokens) / elapsed : 0.0,
                     duration_text(elapsed).c_str(), eta.c_str(), tty_ ? "   " : "\n");
        std::fflush(stderr);
    }
    // Ends the in-place line on a terminal.
    void finish() {
        if (tty_) std::fputs("\n", stderr);
    }
    double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

private:
    int total_;
    bool tty_;
    Clock::time_point t0_;
    double last_draw_ = -1;
    int last_decile_ = -1;
};

// Indices of the prompts to run: all, the first `limit`, or with `spread`
// `limit` indices evenly spaced over the file (for files sorted by length).
std::vector<int> select_prompts(int n, int limit, bool spread) {
    int k = limit > 0 && limit < n ? limit : n;
    std::vector<int> idx(static_cast<size_t>(k));
    for (int i = 0; i < k; i++) idx[size_t(i)] = spread ? int(int64_t(i) * n / k) : i;
    return idx;
}

bool parse_on_off(const std::string& flag, const std::string& value) {
    if (value == "on") return true;
    if (value == "off") return false;
    throw MoeError(flag + ": expected on or off, got '" + value + "'");
}

}  // namespace

int cli_profile(const std::vector<std::string>& words) {
    Args args(words);
    const std::string model_dir = parse_model_flag(args).text;
    SessionOptions options;
    const std::string prompts_path = args.required("--prompts");
    const std::string out_path = args.required("--out");
    const std::string format_name = args.get("--format", "auto");
    auto format = prompt_format_parse(format_name);
    if (!format)
        throw MoeError("--format: unknown format '" + format_name + "' (auto, sharegpt, mtbench, jsonl, text)");
    const int limit = int(args.get_int("--limit", 0, 0, 1 << 30));
    const bool spread = args.flag("--spread");
    const int gen_tokens = int(args.get_int("--gen-tokens", 32, 1, 1 << 20));
    const bool chat = parse_on_off("--chat-template", args.get("--chat-template", "on"));
    options.threads = int(args.get_int("--threads", 0, 0, 1024));
    options.ctx = int(args.get_int("--ctx", 4096, 16, 1 << 20));
    const std::optional<std::string> trace_path = args.get("--trace");
    args.finish();

    // Refuse an unwritable --out or --trace now, not after the whole workload has run.
    file_check_output("--out", out_path);
    if (trace_path) file_check_output("--trace", *trace_path);

    PromptSet set = prompts_read(prompts_path, *format);
    std::vector<int> selected = select_prompts(int(set.prompts.size()), limit, spread);

    check_session_options(options);
    Session engine(load_model({model_dir, options.threads}), options);
    std::string chat_warning;
    const ModelChat model_chat(engine.model(), &chat_warning);
    for (const std::string& w : {chat_warning, placement_warning(engine.placement())})
        if (!w.empty()) std::fprintf(stderr, "moe-server: warning: %s\n", w.c_str());
    const ModelConfig& config = engine.model().config();
    if (!config.is_moe())
        throw MoeError(model_dir + ": a dense model (no experts): there is nothing to profile");

    Profile profile = profile_empty(model_fingerprint(config));
    std::optional<RoutingTraceRecorder> recorder;
    if (trace_path) {
        recorder.emplace(profile.model);
        engine.set_routing_observer(&*recorder);
    }
    ProfileWorkload& w = profile.workload;
    w.source = prompts_path;
    w.prompt_format = prompt_format_name(set.format);
    w.chat_template = chat;
    w.sampling = "greedy";
    w.gen_tokens = gen_tokens;
    w.ctx = engine.ctx();
    w.prompts_available = int(set.prompts.size());
    std::fprintf(stderr,
                 "profile: %zu of %zu prompts from %s (%s, %d entries without a prompt skipped), %d tokens each, "
                 "%d threads\n",
                 selected.size(), set.prompts.size(), prompts_path.c_str(), w.prompt_format.c_str(), set.n_skipped,
                 gen_tokens, engine.threads());

    GenerateRequest request;
    request.sampling.temperature = 0.0f;
    request.max_tokens = gen_tokens;
    request.reuse_prefix = false;
    const size_t cells = profile.prefill.size();
    std::vector<uint64_t> at_first_token(cells);
    ProgressBar progress(int(selected.size()));
    SigintGuard sigint;
    int done = 0;
    for (int idx : selected) {
        const std::string& text = set.prompts[size_t(idx)];
        if (chat) {
            // The model's own template, as generate and the server render it
            // (Qwen's ChatML has no BOS; the built-in renderer wants one).
            request.prompt = chat_prompt_ids(engine, model_chat, ChatInput::of({{ChatRole::USER, text}}));
        } else {
            request.prompt = engine.model().tokenizer().encode_prompt(text);
        }
        if (int(request.prompt.size()) + gen_tokens > engine.ctx()) {
            w.prompts_skipped++;
        } else {
            bool first = true;
            const int request_index = int(w.prompt_indices.size());  // the trace's request: completed prompts so far
            if (recorder) recorder->set(request_index, TracePhase::PREFILL);
            GenerateResult r = engine.generate(request, [&](const TokenEvent&) {
                if (first) at_first_token = engine.routing_counts().last;  // the prefill's counts only
                if (first && recorder) recorder->set(request_index, TracePhase::DECODE);
                first = false;
                return g_profile_stop == 0;
            });
            if (r.finish_reason == FinishReason::CANCELLED) {  // an unfinished prompt is not counted
                if (recorder) recorder->drop_request();
                break;
            }
            std::vector<uint64_t> all = engine.routing_counts().last;
            for (size_t i = 0; i < cells; i++) {
                profile.prefill[i] += at_first_token[i];
                profile.decode[i] += all[i] - at_first_token[i];
            }
            w.prompt_indices.push_back(idx);
            w.prefill_tokens += uint64_t(r.n_prompt);
            w.generated_tokens += uint64_t(r.n_generated);
            w.decode_tokens += uint64_t(r.n_generated - 1);  // the first token comes from the prefill's logits
        }
        done++;
        progress.update(done, w.prefill_tokens + w.generated_tokens);
        if (g_profile_stop) break;
    }
    progress.finish();
    w.interrupted = g_profile_stop != 0;
    profile_sum_phases(profile);
    // Never write a file the reader would refuse.
    profile_parse(profile_to_json(profile), out_path);
    profile_write(profile, out_path);
    if (recorder) {
        engine.set_routing_observer(nullptr);
        // The trace sums to the profile's tables, or something is wrong here.
        const Profile summed = routing_trace_profile(recorder->trace());
        if (summed.prefill != profile.prefill || summed.decode != profile.decode)
            throw MoeError(*trace_path + ": the routing trace does not sum to the profile (a bug; not written)");
        routing_trace_write(recorder->trace(), *trace_path);
        std::fprintf(stderr, "profile: routing trace of %zu tokens -> %s\n", recorder->trace().n_tokens(),
                     trace_path->c_str());
    }

    std::fprintf(stderr,
                 "profile: %zu prompts (%d skipped: prompt + %d tokens longer than the context of %d), %llu prefill + "
                 "%llu decode tokens in %s -> %s\n",
                 w.prompt_indices.size(), w.prompts_skipped, gen_tokens, w.ctx, (unsigned long long)w.prefill_tokens,
                 (unsigned long long)w.decode_tokens, duration_text(progress.elapsed()).c_str(), out_path.c_str());
    if (w.interrupted)
        std::fprintf(stderr, "profile: interrupted: wrote the %zu prompts completed of %zu\n", w.prompt_indices.size(),
                     selected.size());
    return 0;
}
