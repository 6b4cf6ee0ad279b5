// CLI subcommands over the engine library (see cli.h).
#include "apps/cli.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "base/errors.h"
#include "base/files.h"
#include "chat/json_schema.h"
#include "chat/model_chat.h"
#include "cpu_kernels/isa.h"
#include "engine/devices/calibration_key.h"
#include "engine/model/synth_model.h"
#include "engine/runtime/beam_search.h"
#include "engine/runtime/session.h"
#include "engine/text/tokenizer.h"
#include "server/generation_task.h"
#include "server/placement_text.h"

using json = nlohmann::json;

namespace {

// A --model string into its source, announcing a synthetic one.
ModelSource model_flag_source(const std::string& text) {
    ModelSource source = model_source_parse(text);
    if (source.synthetic) std::fprintf(stderr, "moe-server: %s\n", model_source_note(source).c_str());
    return source;
}

}  // namespace

std::optional<ModelSource> parse_optional_model_flag(Args& args) {
    auto text = args.get("--model");
    if (!text) return std::nullopt;
    return model_flag_source(*text);
}

ModelSource parse_model_flag(Args& args, const std::string& context) {
    return model_flag_source(args.required("--model", context));
}

Isa parse_isa(const std::string& source, const std::string& name) {
    std::optional<Isa> isa = isa_parse(name);
    if (!isa) throw MoeError(source + ": unknown path '" + name + "' (scalar, avx2, avx512, avx512bf16)");
    if (!isa_supported(*isa)) throw MoeError(source + ": this CPU cannot run the " + name + " path");
    return *isa;
}

void apply_isa_env() {
    const char* name = std::getenv("MOE_CPU_ISA");
    if (name && *name) isa_select(parse_isa("MOE_CPU_ISA", name));
}

void apply_isa_flag(Args& args) {
    if (std::optional<std::string> name = args.get("--cpu-isa")) isa_select(parse_isa("--cpu-isa", *name));
}

SamplingParams parse_sampling_flags(Args& args) {
    SamplingParams p;
    p.temperature = float(args.get_double("--temperature", p.temperature, 0.0, 100.0));
    p.top_k = int(args.get_int("--top-k", p.top_k, 0, 1 << 30));
    p.top_p = float(args.get_double("--top-p", p.top_p, 0.0, 1.0));
    p.min_p = float(args.get_double("--min-p", p.min_p, 0.0, 1.0));
    p.repetition_penalty = float(args.get_double("--repeat-penalty", p.repetition_penalty, 0.01, 100.0));
    p.presence_penalty = float(args.get_double("--presence-penalty", p.presence_penalty, -2.0, 2.0));
    p.frequency_penalty = float(args.get_double("--frequency-penalty", p.frequency_penalty, -2.0, 2.0));
    p.seed = uint64_t(args.get_int("--seed", 0, 0, (1L << 62)));
    if (args.flag("--greedy")) p.temperature = 0.0f;
    return p;
}

std::string execution_stats_line(const ExecutionStats& s) {
    if (s.layers == 0) return "experts: none run";
    // "label figures" parts, walking execution_stats_fields(): per site every
    // site with its share; the other counts and times when not 0; of the
    // per-layer times only the furthest layer, at the end.
    std::string text = "experts:";
    const char* separator = " ";
    char part[160];
    for (const ExecutionField& f : execution_stats_fields()) {
        if (auto* site_value = std::get_if<ExecutionField::PerSite>(&f.value)) {
            uint64_t all = 0;
            for (int i = 0; i < EXPERT_SITE_COUNT; i++) all += (*site_value)(s, ExpertSite(i));
            text += separator + std::string(f.label);
            for (int i = 0; i < EXPERT_SITE_COUNT; i++) {
                uint64_t v = (*site_value)(s, ExpertSite(i));
                std::snprintf(part, sizeof part, "%s %s %llu (%.1f%%)", i ? "," : "", expert_site_name(ExpertSite(i)),
                              (unsigned long long)v, all ? 100.0 * double(v) / double(all) : 0.0);
                text += part;
            }
        } else if (auto* count = std::get_if<ExecutionField::Count>(&f.value)) {
            uint64_t v = s.*count->member;
            if (v == 0) continue;
            if (count->bytes)
                std::snprintf(part, sizeof part, "%s%s %.1f MiB", separator, f.label, double(v) / (1 << 20));
            else
                std::snprintf(part, sizeof part, "%s%s %llu", separator, f.label, (unsigned long long)v);
            text += part;
        } else if (auto* ms = std::get_if<ExecutionField::Ms>(&f.value)) {
            if (s.*(*ms) == 0) continue;
            std::snprintf(part, sizeof part, "%s%s %.1f ms", separator, f.label, s.*(*ms));
            text += part;
        } else {
            continue;
        }
        separator = " | ";
    }
    std::snprintf(part, sizeof part, " | hit rate %.1f%%", 100.0 * s.hit_rate());
    text += part;
    ExecutionStats::WorstLayer w = s.worst_layer();
    if (w.layer >= 0) {
        std::snprintf(part, sizeof part, " | furthest layer: %d %s predicted %.1f ms, measured %.1f ms", w.layer,
                      w.device ? "device" : "cpu", w.predicted_ms, w.measured_ms);
        text += part;
    }
    return text;
}

namespace {

// The largest --emulate-gpu or --gpu-memory size: more than any device or
// host holds, so a larger one is a typo (1e99), not a machine.
constexpr double SIZE_GIB_MAX = 65536;

// "12" (GiB, into *bytes) or "25%" (a share of all experts, into *share).
void parse_size_or_share(const std::string& flag, const std::string& text, double* bytes, double* share) {
    bool is_share = !text.empty() && text.back() == '%';
    std::optional<double> value = Args::number(is_share ? text.substr(0, text.size() - 1) : text);
    if (!value || *value <= 0 || *value > (is_share ? 100 : SIZE_GIB_MAX))
        throw MoeError(flag + ": expected a size in GiB (e.g. 12, at most " + std::to_string(int(SIZE_GIB_MAX)) +
                       ") or a share of experts (e.g. 25%), got '" + text + "'");
    if (is_share)
        *share = *value / 100.0;
    else
        *bytes = *value * double(1u << 30);
}

}  // namespace

int parse_gpu_device_flag(Args& args, bool* given) {
    auto v = args.get("--gpu-device");
    if (!v) return GPU_DEVICE_DEFAULT;
    if (given) *given = true;
    if (*v == "none") return -1;
    std::optional<long> index = Args::integer(*v);
    if (!index || *index < 0 || *index > INT_MAX)
        throw MoeError("--gpu-device: expected a device index (0, 1, ...) or 'none', got '" + *v + "'");
    return int(*index);
}

DeviceOptions parse_device_flags(Args& args) {
    DeviceOptions d;
    if (auto v = args.get("--emulate-gpu")) parse_size_or_share("--emulate-gpu", *v, &d.emulate_gpu_bytes, &d.emulate_gpu_expert_share);
    d.gpu_device = parse_gpu_device_flag(args, &d.gpu_required);
    if (auto v = args.get("--gpu-memory")) {
        parse_size_or_share("--gpu-memory", *v, &d.gpu_memory_bytes, &d.gpu_expert_share);
        d.gpu_required = true;
    }
    if (d.gpu_device < 0 && (d.gpu_memory_bytes > 0 || d.gpu_expert_share > 0))
        throw MoeError("--gpu-memory: --gpu-device none uses no GPU");
    if ((d.emulate_gpu_bytes > 0 || d.emulate_gpu_expert_share > 0) && d.gpu_required)
        throw MoeError("--emulate-gpu: a dry run on the emulated device; it does not combine with --gpu-memory or "
                       "--gpu-device");
    // The placement options: each one given is remembered, refused at load
    // when no device takes experts (device_setup).
    for (SessionOption option : {SessionOption::PROFILE, SessionOption::CACHE_POLICY, SessionOption::CACHE_SHARE,
                                 SessionOption::CACHE_SCOPE, SessionOption::PREFETCH})
        if (args.has(session_option_flag(option))) d.placement_set.push_back(option);
    d.profile = args.get("--profile", "");
    // The dynamic cache: the policy, its share of the device's experts, its
    // scope, prefetch (on by default with a policy, refused without one).
    if (auto policy = args.get("--cache-policy")) {
        CachePolicy p;
        if (*policy == "static") {
            d.cache_policy.reset();
        } else if (cache_policy_parse(*policy, p) && p != CachePolicy::BELADY) {
            d.cache_policy = p;
        } else {
            throw MoeError("--cache-policy: expected static, lru, lfu or score, got '" + *policy + "'");
        }
    }
    d.cache_share = args.get_double("--cache-share", d.cache_share, 0, 1);
    if (auto scope = args.get("--cache-scope")) {
        if (*scope == "global")
            d.cache_scope = CacheScope::GLOBAL;
        else if (*scope == "layer")
            d.cache_scope = CacheScope::PER_LAYER;
        else
            throw MoeError("--cache-scope: expected layer or global, got '" + *scope + "'");
    }
    d.prefetch = d.cache_policy.has_value();
    if (auto prefetch = args.get("--prefetch")) {
        if (*prefetch != "on" && *prefetch != "off")
            throw MoeError("--prefetch: expected on or off, got '" + *prefetch + "'");
        d.prefetch = *prefetch == "on";
        if (d.prefetch && !d.cache_policy)
            throw MoeError("--prefetch on: needs a cache to prefetch into (--cache-policy lru, lfu or score)");
    }
    return d;
}

ChatInput read_chat_file(const std::string& path) {
    const nlohmann::ordered_json j = file_read_json<nlohmann::ordered_json>(path);
    const nlohmann::ordered_json& list = j.is_object() && j.contains("messages") ? j["messages"] : j;
    if (!list.is_array() || list.empty()) throw MoeError(path + ": expected a non-empty \"messages\" array");
    ChatInput input;
    input.messages_json = list;
    if (j.is_object() && j.contains("tools") && !j["tools"].is_null()) {
        if (!j["tools"].is_array()) throw MoeError(path + ": tools: expected an array");
        input.tools = j["tools"];
    }
    if (j.is_object() && j.contains("chat_template_kwargs")) {
        if (!j["chat_template_kwargs"].is_object()) throw MoeError(path + ": chat_template_kwargs: expected an object");
        input.extras = j["chat_template_kwargs"];
    }
    for (size_t i = 0; i < list.size(); i++) {
        const nlohmann::ordered_json& m = list[i];
        std::string where = path + ": messages[" + std::to_string(i) + "]";
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw MoeError(where + ": needs a string \"role\"");
        const std::optional<ChatRole> role = chat_role_parse(m["role"].get_ref<const std::string&>());
        if (!role)
            throw MoeError(where + ": unknown role '" + m["role"].get<std::string>() +
                           "' (expected system, developer, user, assistant or tool)");
        ChatMessage msg{*role, ""};
        const nlohmann::ordered_json& c = m.contains("content") ? m["content"] : nlohmann::ordered_json();
        if (c.is_string()) {
            msg.content = c.get<std::string>();
        } else if (c.is_array()) {
            for (const auto& part : c) {
                if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                    !part["text"].is_string())
                    throw MoeError(where + ": content parts must be {\"type\":\"text\",\"text\":...}");
                msg.content += part["text"].get<std::string>();
            }
        } else if (!(c.is_null() && m.contains("tool_calls"))) {
            throw MoeError(where + ": \"content\" must be a string or an array of text parts");
        }
        input.messages.push_back(std::move(msg));
    }
    return input;
}

namespace {

// The beam flags of `generate`; width 0 when --beam-width is absent.
struct BeamFlags {
    int width = 0;
    float length_penalty = 1.0f;
    int num_return = 1;
};

BeamFlags parse_beam_flags(Args& args) {
    BeamFlags b;
    b.width = int(args.get_int("--beam-width", 0, 1, BEAM_WIDTH_MAX));
    double penalty = args.get_double("--length-penalty", NAN, 0.0, 10.0);
    long num_return = args.get_int("--num-return", 0, 1, BEAM_WIDTH_MAX);
    if (b.width == 0) {
        if (!std::isnan(penalty)) throw MoeError("--length-penalty: only with --beam-width");
        if (num_return) throw MoeError("--num-return: only with --beam-width");
        return b;
    }
    if (!std::isnan(penalty)) b.length_penalty = float(penalty);
    if (num_return > b.width)
        throw MoeError("--num-return: " + std::to_string(num_return) + " is more than --beam-width " +
                       std::to_string(b.width));
    if (num_return) b.num_return = int(num_return);
    // Beam search ranks raw log-probabilities: sampling flags would be
    // silently ignored, so they are refused (a zero temperature is fine).
    if (args.get_double("--temperature", 0.0, 0.0, 100.0) != 0.0)
        throw MoeError("--temperature: must be 0 with --beam-width (beam search ranks raw log-probabilities)");
    for (const char* flag : {"--top-k", "--top-p", "--min-p", "--repeat-penalty", "--presence-penalty",
                             "--frequency-penalty", "--seed"})
        if (args.get(flag))
            throw MoeError(std::string(flag) + ": a sampling flag, not used by beam search (--beam-width)");
    args.flag("--greedy");
    return b;
}

void print_beam_result(const Session& engine, const BeamResult& r, const std::optional<std::string>& prompt) {
    if (r.hypotheses.size() == 1) {
        if (prompt) std::fputs(prompt->c_str(), stdout);
        std::printf("%s\n", r.hypotheses[0].text.c_str());
    } else {
        for (size_t i = 0; i < r.hypotheses.size(); i++) {
            const BeamHypothesis& h = r.hypotheses[i];
            std::printf("[%zu] score %.4f, logprob %.4f, %d tokens, finish %s\n%s%s\n", i, h.score, h.logprob,
                        h.length, finish_reason_name(h.finish_reason), prompt ? prompt->c_str() : "", h.text.c_str());
        }
    }
    std::fflush(stdout);
    const BeamHypothesis* best = r.hypotheses.empty() ? nullptr : &r.hypotheses[0];
    std::fprintf(stderr,
                 "prompt %d tokens (%d cached), prefill %.1f tok/s | beam search: %d steps (%ld beam tokens), "
                 "%.2f steps/s, best %d tokens at %.2f tok/s, score %.4f | tokens per routed expert per step: "
                 "max %d, mean %.2f | finish %s | %d threads, %s\n",
                 r.n_prompt, r.n_cached, r.prefill_tok_s(), r.n_steps, r.n_beam_tokens, r.steps_per_s(),
                 r.n_generated(), r.best_tok_s(), best ? best->score : 0.0, r.expert_load.max(), r.expert_load.mean(),
                 finish_reason_name(r.finish_reason), engine.threads(), isa_name(isa_active()));
    std::fprintf(stderr, "%s\n", execution_stats_line(engine.execution_stats().last).c_str());
}

}  // namespace

int cli_generate(const std::vector<std::string>& words) {
    Args args(words);
    const std::string model_dir = parse_model_flag(args).text;
    SessionOptions options;
    options.threads = int(args.get_int("--threads", 0, 0, 1024));
    options.ctx = int(args.get_int("--ctx", 4096, 16, 1 << 20));
    auto prompt = args.get("--prompt");
    auto user = args.get("--user");
    auto chat = args.get("--chat");
    if (int(bool(prompt)) + int(bool(user)) + int(bool(chat)) != 1)
        throw MoeError("give exactly one of --prompt TEXT, --user TEXT or --chat FILE.json");
    GenerateRequest request;
    request.max_tokens = int(args.get_int("--max-tokens", 128, 1, 1 << 20));
    BeamFlags beam = parse_beam_flags(args);
    request.sampling = parse_sampling_flags(args);
    request.stop = args.get_all("--stop");
    request.ignore_eos = args.flag("--ignore-eos");
    options.device = parse_device_flags(args);
    apply_isa_flag(args);
    ChatInput messages = chat ? read_chat_file(*chat) : ChatInput{};
    // Constrained output: a GBNF grammar, a JSON Schema, or any JSON object.
    auto grammar_file = args.get("--grammar");
    auto schema_file = args.get("--json-schema");
    const bool json_object = args.flag("--json");
    if (int(bool(grammar_file)) + int(bool(schema_file)) + int(json_object) > 1)
        throw MoeError("give at most one of --grammar FILE, --json-schema FILE and --json");
    if ((grammar_file || schema_file || json_object) && beam.width > 0)
        throw MoeError("--beam-width: constrained decoding (--grammar, --json-schema, --json) is not supported with beams");
    std::string gbnf;
    if (grammar_file) gbnf = file_read_text(*grammar_file);
    if (schema_file) {
        gbnf = json_schema_gbnf(file_read_json<nlohmann::ordered_json>(*schema_file), *schema_file);
    }
    if (json_object) gbnf = json_object_gbnf();
    args.finish();

    check_session_options(options);
    Session engine(load_model({model_dir, options.threads}), options);
    if (grammar_file || schema_file || json_object)
        request.grammar = engine.model().grammar(gbnf, grammar_file ? *grammar_file : schema_file ? *schema_file : "--json");
    std::string chat_warning;
    const ModelChat model_chat(engine.model(), &chat_warning);
    for (const std::string& w : {chat_warning, placement_warning(engine.placement())})
        if (!w.empty()) std::fprintf(stderr, "moe-server: warning: %s\n", w.c_str());
    if (const std::string unread = model_unread_text(engine.model().config()); !unread.empty())
        std::fprintf(stderr, "moe-server: %s\n", unread.c_str());
    std::fprintf(stderr, "moe-server: %s\n", placement_summary(engine.placement()).c_str());
    if (prompt) {
        request.prompt = engine.model().tokenizer().encode_prompt(*prompt);
        request.continues_prompt = true;
    } else {
        if (user) messages = ChatInput::of({{ChatRole::USER, *user}});
        request.prompt = chat_prompt_ids(engine, model_chat, messages);
    }
    if (beam.width > 0) {
        BeamRequest b = beam_request_from(request, beam.width, beam.length_penalty, beam.num_return);
        print_beam_result(engine, engine.beam_search(b, [](const BeamStep&) { return true; }), prompt);
        return 0;
    }
    if (prompt) std::fputs(prompt->c_str(), stdout);
    GenerateResult r = engine.generate(request, [](const TokenEvent& e) {
        std::fputs(e.text.c_str(), stdout);
        std::fflush(stdout);
        return true;
    });
    std::fputs("\n", stdout);
    std::fflush(stdout);
    std::fprintf(stderr,
                 "prompt %d tokens (%d cached), prefill %.1f tok/s | generated %d tokens, decode %.2f tok/s | "
                 "ttft %.0f ms | finish %s | %d threads, %s\n",
                 r.n_prompt, r.n_cached, r.prefill_tok_s(), r.n_generated, r.decode_tok_s(), r.ttft_ms,
                 finish_reason_name(r.finish_reason), engine.threads(), isa_name(isa_active()));
    std::fprintf(stderr, "%s\n", execution_stats_line(engine.execution_stats().last).c_str());
    return 0;
}

int cli_tokenize(const std::vector<std::string>& words) {
    Args args(words);
    ModelSource source = parse_model_flag(args);
    auto text = args.get("--text");
    auto chat = args.get("--chat");
    bool no_bos = args.flag("--no-bos");
    if (bool(text) == bool(chat)) throw MoeError("give exactly one of --text TEXT or --chat FILE.json");
    ChatInput messages = chat ? read_chat_file(*chat) : ChatInput{};
    args.finish();
    ModelConfig config = model_source_config(source);
    Tokenizer tokenizer = model_source_tokenizer(source, config);
    std::vector<int> tokens;
    // The tokenizer's BOS: one that adds none (Qwen's) starts with the text.
    const int bos = tokenizer.prompt_bos();
    if (text) {
        tokens = no_bos ? tokenizer.encode(*text) : tokenizer.encode_prompt(*text);
    } else {
        std::string warning;
        const ModelChat model_chat(source, tokenizer, &warning);
        if (!warning.empty()) std::fprintf(stderr, "moe-server: warning: %s\n", warning.c_str());
        tokens = model_chat.prompt(tokenizer, messages).ids;
        if (no_bos && bos >= 0 && !tokens.empty() && tokens[0] == bos) tokens.erase(tokens.begin());
    }
    std::printf("%s\n", json{{"tokens", tokens}}.dump().c_str());
    return 0;
}

int cli_perplexity(const std::vector<std::string>& words) {
    Args args(words);
    SessionOptions options;
    ModelSource source = parse_model_flag(args);
    std::string text_path = args.required("--text");
    long ctx = args.get_int("--ctx", 0, 0, 1 << 20);
    options.threads = int(args.get_int("--threads", 0, 0, 1024));
    bool as_json = args.flag("--json");
    bool chunks = args.flag("--chunks");
    options.device = parse_device_flags(args);
    apply_isa_flag(args);
    args.finish();

    std::string text = file_read_text(text_path);
    ModelConfig config = model_source_config(source);
    Tokenizer tokenizer = model_source_tokenizer(source, config);
    std::vector<int> tokens = tokenizer.encode_prompt(text);
    if (tokens.size() < 2) throw MoeError(text_path + ": too short to score (needs at least 2 tokens, BOS included)");
    // Default window: the whole file when it fits in the model's positions.
    long max_pos = config.max_position_embeddings > 0 ? config.max_position_embeddings : long(tokens.size());
    int window = int(ctx > 0 ? ctx : std::min<long>(long(tokens.size()), max_pos));
    if (window < 2) throw MoeError("--ctx: must be at least 2");
    options.ctx = std::max(16, window);
    check_session_options(options);
    Session engine(load_model({source.text, options.threads}), options);
    std::fprintf(stderr, "moe-server: %s\n", placement_summary(engine.placement()).c_str());
    auto t0 = std::chrono::steady_clock::now();
    Session::Score s = engine.score(tokens, window, chunks);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double mean = s.nll_sum / double(s.n_scored);
    if (as_json) {
        std::printf("%s\n", json{{"tokens", s.n_scored}, {"mean_nll", mean}, {"ppl", std::exp(mean)}}.dump().c_str());
    } else {
        std::printf("%ld tokens scored in %s of %d: mean NLL %.6f, perplexity %.4f (%.1f tok/s)\n", s.n_scored,
                    chunks ? "chunks" : "windows", window, mean, std::exp(mean), double(tokens.size()) / secs);
    }
    if (engine.placement().device != DeviceKind::NONE)
        std::fprintf(stderr, "%s\n", execution_stats_line(engine.execution_stats().total).c_str());
    return 0;
}

int cli_synth_model(const std::vector<std::string>& words) {
    Args args(words);
    SynthOptions o;
    const std::string preset = args.required("--preset");
    o.out = args.required("--out");
    o.seed = uint64_t(args.get_int("--seed", 0, 0, 1L << 62));
    o.tokenizer = args.get("--tokenizer", "");
    o.max_shard_bytes = size_t(args.get_int("--shard-mb", long(o.max_shard_bytes >> 20), 1, 1 << 30)) << 20;
    args.finish();
    // An unknown preset, or a tokenizer it does not take: refused before touching the disk.
    o.preset = synth_preset_parse(preset);
    if (synth_uses_standin_tokenizer(synth_preset(o.preset)) && !o.tokenizer.empty())
        throw MoeError("synth-model: --tokenizer takes a SentencePiece model, for the Mixtral presets only; preset '" +
                       preset + "' writes its own tokenizer.json");
    auto t0 = std::chrono::steady_clock::now();
    synth_model_write(o);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "wrote %s model to %s in %.1f s (random weights: its text is gibberish)\n", preset.c_str(),
                 o.out.c_str(), secs);
    return 0;
}
