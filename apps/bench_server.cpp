// `moe-server bench server`: the HTTP layer's cost, measured in one process.
// It starts the server on a free loopback port and prints JSON lines, each
// with its figure and the baseline beside it:
//   server_decode: decode tok/s seen by an SSE client vs Session::generate on
//                  the same prompt, engine thread and threads (target >= 0.97);
//   server_ttft:   second-turn vs first-turn time to first token of MT-Bench
//                  two-turn conversations, with the second turn's no-reuse
//                  TTFT beside it (target <= 0.25).
// Benchmarks only; nothing here is a test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "apps/args.h"
#include "apps/cli.h"
#include "apps/demo_model.h"
#include "apps/http_sse_client.h"
#include "apps/serve.h"
#include "base/errors.h"
#include "base/json_bounded.h"
#include "chat/model_chat.h"
#include "engine/runtime/session.h"
#include "server/generation_task.h"
#include "server/http_server.h"
#include "server/openai.h"

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

fs::path default_prompts_file() {
    const char* rel = "prompts/mt_bench_question.jsonl";
    if (const char* env = std::getenv("MOE_SHARED_DATA")) return fs::path(env) / rel;
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        fs::path beside = exe.parent_path().parent_path().parent_path() / "shared" / "data" / rel;
        if (fs::exists(beside)) return beside;
    }
    return fs::path("..") / "shared" / "data" / rel;
}

struct Conversation {
    std::string turn1, turn2;
};

std::vector<Conversation> read_mt_bench(const fs::path& path, int n) {
    std::ifstream in(path);
    if (!in) throw MoeError(path.string() + ": cannot read the MT-Bench questions (use --prompts FILE)");
    std::vector<Conversation> out;
    std::string line;
    int line_no = 0;
    while (int(out.size()) < n && std::getline(in, line)) {
        line_no++;
        if (line.empty()) continue;
        const json j = json_parse_bounded<json>(line, JSON_FILE_LIMITS, path.string() + ":" + std::to_string(line_no));
        auto turns = j.find("turns");
        if (turns == j.end() || !turns->is_array() || turns->size() < 2 || !(*turns)[0].is_string() ||
            !(*turns)[1].is_string())
            throw MoeError(path.string() + ":" + std::to_string(line_no) + ": expected \"turns\" with two strings");
        out.push_back({(*turns)[0].get<std::string>(), (*turns)[1].get<std::string>()});
    }
    if (out.empty()) throw MoeError(path.string() + ": no conversations");
    return out;
}

// One streamed chat request as a client sees it.
struct StreamStats {
    double ttft_ms = 0;       // request sent -> first content delta
    double decode_tok_s = 0;  // (completion_tokens - 1) / (first delta -> finish chunk)
    int completion_tokens = 0;
    int prompt_tokens = 0;
    int cached_tokens = 0;
    double server_ttft_ms = 0;  // the engine's own figure (timings.ttft_ms)
    std::string text;
};

StreamStats stream_chat(httplib::Client& client, const json& body) {
    StreamStats s;
    Clock::time_point t0 = Clock::now(), t_first{}, t_finish{};
    bool have_first = false;
    std::string error;
    SseResponse res = sse_post(client, "/v1/chat/completions", body.dump(), {}, [&](const std::string& data) {
        Clock::time_point now = Clock::now();
        if (data == "[DONE]") return true;
        json chunk;
        try {
            chunk = json_parse_bounded<json>(data, JSON_FILE_LIMITS, "event");
        } catch (const JsonError&) {
        }
        if (!chunk.is_object()) {
            error = "malformed event: " + data;
            return false;
        }
        if (chunk.contains("error")) {
            error = "server error: " + data;
            return false;
        }
        if (chunk.contains("usage") && chunk["usage"].is_object()) {
            s.completion_tokens = chunk["usage"].value("completion_tokens", 0);
            s.prompt_tokens = chunk["usage"].value("prompt_tokens", 0);
            s.cached_tokens = chunk["usage"].value("prompt_tokens_details", json::object()).value("cached_tokens", 0);
        }
        if (chunk.contains("timings")) s.server_ttft_ms = chunk["timings"].value("ttft_ms", 0.0);
        for (const json& choice : chunk.value("choices", json::array())) {
            if (choice.contains("delta") && choice["delta"].contains("content") &&
                choice["delta"]["content"].is_string() && !choice["delta"]["content"].get<std::string>().empty()) {
                s.text += choice["delta"]["content"].get<std::string>();
                if (!have_first) {
                    have_first = true;
                    t_first = now;
                }
            }
            if (choice.contains("finish_reason") && !choice["finish_reason"].is_null()) t_finish = now;
        }
        return true;
    });
    if (!error.empty()) throw MoeError("bench: " + error);
    if (res.status != 200) throw MoeError("bench: HTTP " + std::to_string(res.status) + ": " + res.raw);
    if (!have_first) throw MoeError("bench: the stream carried no content");
    s.ttft_ms = ms_between(t0, t_first);
    double decode_ms = ms_between(t_first, t_finish);
    if (s.completion_tokens > 1) s.decode_tok_s = per_second(s.completion_tokens - 1, decode_ms);
    return s;
}

json chat_body(const std::vector<std::pair<std::string, std::string>>& turns, int max_tokens, bool cache_prompt) {
    json messages = json::array();
    for (const auto& [role, content] : turns) messages.push_back({{"role", role}, {"content", content}});
    return json{{"messages", messages},        {"stream", true},   {"stream_options", {{"include_usage", true}}},
                {"max_tokens", max_tokens},    {"temperature", 0}, {"ignore_eos", true},
                {"cache_prompt", cache_prompt}};
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / double(v.size());
}

// Prints the server_decode and server_ttft lines.
void run_benchmarks(HttpServer& server, const std::string& host, int port, const std::vector<Conversation>& convs,
                    int tokens, int repeats, int reply_tokens) {
    httplib::Client client(host, port);  // the server's own address (an IPv6 one unbracketed, as httplib takes it)
    client.set_read_timeout(600, 0);

    // ---- decode tok/s: HTTP + SSE vs the engine's own loop ----
    const std::vector<std::pair<std::string, std::string>> turn1 = {{"user", convs[0].turn1}};
    double best_engine = 0, best_http = 0;
    int threads = 0, n_prompt = 0;
    for (int r = 0; r < repeats; r++) {
        server.with_engine([&](Session& engine) {
            // The model's own template, as the server renders the HTTP request.
            GenerateRequest g;
            std::string warning;
            g.prompt = chat_prompt_ids(engine, ModelChat(engine.model(), &warning), ChatInput::of({{ChatRole::USER, convs[0].turn1}}));
            g.sampling.temperature = 0;
            g.max_tokens = tokens;
            g.ignore_eos = true;
            g.reuse_prefix = false;
            GenerateResult result = engine.generate(g, [](const TokenEvent&) { return true; });
            best_engine = std::max(best_engine, result.decode_tok_s());
            threads = engine.threads();
            n_prompt = result.n_prompt;
        });
        StreamStats s = stream_chat(client, chat_body(turn1, tokens, false));
        if (s.completion_tokens != tokens)
            throw MoeError("bench: expected " + std::to_string(tokens) + " tokens over HTTP, got " +
                           std::to_string(s.completion_tokens));
        best_http = std::max(best_http, s.decode_tok_s);
    }
    json decode{{"bench", "server_decode"},
                {"model", server.model_id()},
                {"threads", threads},
                {"prompt_tokens", n_prompt},
                {"tokens", tokens},
                {"repeats", repeats},
                {"http_sse_decode_tok_s", best_http},
                {"engine_decode_tok_s", best_engine},
                {"ratio", best_engine > 0 ? best_http / best_engine : 0},
                {"target_min_ratio", 0.97}};
    std::printf("%s\n", json_dump(decode).c_str());
    std::fflush(stdout);

    // ---- TTFT: first turn vs second turn with and without prefix reuse ----
    // Each conversation is replayed `repeats` times (greedy, so the same
    // reply each time); the fastest of each measurement counts, which keeps
    // other processes' noise out of the ratio.
    std::vector<double> ttft1, ttft2, ttft2_cold, server1, server2, server2_cold, prompt1, new2;
    json per_conv = json::array();
    for (const Conversation& c : convs) {
        StreamStats best1, best2, best_cold;
        for (int r = 0; r < repeats; r++) {
            std::vector<std::pair<std::string, std::string>> turns = {{"user", c.turn1}};
            // A first turn starts a new conversation: nothing of it is cached.
            StreamStats first = stream_chat(client, chat_body(turns, reply_tokens, false));
            turns.push_back({"assistant", first.text});
            turns.push_back({"user", c.turn2});
            StreamStats second = stream_chat(client, chat_body(turns, reply_tokens, true));
            StreamStats cold = stream_chat(client, chat_body(turns, reply_tokens, false));
            if (r == 0 || first.ttft_ms < best1.ttft_ms) best1 = first;
            if (r == 0 || second.ttft_ms < best2.ttft_ms) best2 = second;
            if (r == 0 || cold.ttft_ms < best_cold.ttft_ms) best_cold = cold;
        }
        ttft1.push_back(best1.ttft_ms);
        ttft2.push_back(best2.ttft_ms);
        ttft2_cold.push_back(best_cold.ttft_ms);
        server1.push_back(best1.server_ttft_ms);
        server2.push_back(best2.server_ttft_ms);
        server2_cold.push_back(best_cold.server_ttft_ms);
        prompt1.push_back(best1.prompt_tokens);
        new2.push_back(best2.prompt_tokens - best2.cached_tokens);
        per_conv.push_back({{"turn1_prompt_tokens", best1.prompt_tokens},
                            {"turn1_ttft_ms", best1.ttft_ms},
                            {"turn2_prompt_tokens", best2.prompt_tokens},
                            {"turn2_cached_tokens", best2.cached_tokens},
                            {"turn2_ttft_ms", best2.ttft_ms},
                            {"turn2_no_reuse_ttft_ms", best_cold.ttft_ms}});
    }
    double t1 = mean(ttft1), t2 = mean(ttft2), t2c = mean(ttft2_cold);
    json ttft{{"bench", "server_ttft"},
              {"model", server.model_id()},
              {"conversations", int(convs.size())},
              {"repeats", repeats},
              {"reply_tokens", reply_tokens},
              {"turn1_prompt_tokens", mean(prompt1)},
              {"turn2_uncached_tokens", mean(new2)},
              {"turn1_ttft_ms", t1},
              {"turn2_ttft_ms", t2},
              {"turn2_no_reuse_ttft_ms", t2c},
              {"ratio", t1 > 0 ? t2 / t1 : 0},
              {"ratio_vs_no_reuse", t2c > 0 ? t2 / t2c : 0},
              {"engine_turn1_ttft_ms", mean(server1)},
              {"engine_turn2_ttft_ms", mean(server2)},
              {"engine_turn2_no_reuse_ttft_ms", mean(server2_cold)},
              {"target_max_ratio", 0.25},
              {"per_conversation", per_conv}};
    std::printf("%s\n", json_dump(ttft).c_str());
}

}  // namespace

int bench_server_main(const std::vector<std::string>& words) {
    Args args(words);
    ServerOptions options;
    if (std::optional<ModelSource> source = parse_optional_model_flag(args)) options.model_dir = source->text;
    int tokens = int(args.get_int("--tokens", 128, 2, 1 << 16));
    options.ctx = int(args.get_int("--ctx", 4096, 16, 1 << 20));
    options.threads = int(args.get_int("--threads", 0, 0, 1024));
    int conversations = int(args.get_int("--conversations", 5, 1, 80));
    int repeats = int(args.get_int("--repeats", 3, 1, 100));
    int reply_tokens = int(args.get_int("--reply-tokens", 64, 1, 4096));
    fs::path prompts = args.get("--prompts", default_prompts_file().string());
    options.device = parse_device_flags(args);
    args.finish();
    if (options.model_dir.empty()) options.model_dir = demo_model_ensure();
    std::vector<Conversation> convs = read_mt_bench(prompts, conversations);

    options.host = "127.0.0.1";
    options.port = 0;
    options.log_requests = false;
    HttpServer server(options);
    int port = server.bind();
    std::string serve_error;
    std::thread serving([&] {
        try {
            server.run();
        } catch (const std::exception& e) {
            serve_error = e.what();
        }
    });
    std::string bench_error;
    try {
        run_benchmarks(server, options.host, port, convs, tokens, repeats, reply_tokens);
    } catch (const std::exception& e) {
        bench_error = e.what();
    }
    server.stop();
    serving.join();
    if (!serve_error.empty()) throw MoeError(serve_error);
    if (!bench_error.empty()) throw MoeError(bench_error);
    return 0;
}
