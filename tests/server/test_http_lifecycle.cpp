// The server's life over real HTTP: a client that disconnects cancels its
// generation and the next request is served; a full queue answers 503 with
// Retry-After; a multi-turn chat reuses the KV cache of its history;
// SIGTERM / SIGINT stop the process cleanly with exit code 0, and SIGTERM
// answers a running non-streamed request 503 with Retry-After; bad flags and
// a bad model folder fail at start-up with exit code 2.
#include <sys/wait.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "apps/http_sse_client.h"
#include "server_fixture.h"
#include "support/test_support.h"

using json = nlohmann::json;

namespace {

// A generation far longer than any test waits for.
json long_stream(const std::string& text) {
    return {{"messages", {{{"role", "user"}, {"content", text}}}},
            {"stream", true},
            {"max_tokens", 4000},
            {"ignore_eos", true},
            {"temperature", 0}};
}

const char* CANCELLED = "moe_generations_total{finish_reason=\"cancelled\"}";

// Runs the binary with args, returns (exit code, output).
std::pair<int, std::string> run_binary(const std::string& args) {
    std::filesystem::path out = test_temp_dir("run") / "out.txt";
    std::string cmd = moe_server_binary().string() + " " + args + " > " + out.string() + " 2>&1";
    int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out)};
}

}  // namespace

TEST_CASE("a streaming client that disconnects cancels its generation", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    auto metrics_client = server.client();
    int frames = 0;
    SseResponse r = sse_post(c, "/v1/chat/completions", long_stream("Go on forever.").dump(), {},
                             [&](const std::string&) { return ++frames < 4; });  // role + 3 tokens, then hang up
    CHECK(r.status == 200);
    CHECK(r.cancelled);
    REQUIRE(eventually([&] { return metric_value(metrics_client, CANCELLED) == 1; }));
    // The generation is over: its token count is final and far below max_tokens.
    double generated = metric_value(metrics_client, "moe_generated_tokens_total");
    CHECK(generated >= 3);
    CHECK(generated < 4000);
    CHECK(eventually([&] { return metric_value(metrics_client, "moe_requests_running") == 0; }));

    // The next request is served, and only its own tokens are generated.
    auto c2 = server.client();
    JsonReply next =
        post_json(c2, "/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "next"}}}}, {"max_tokens", 4}, {"ignore_eos", true}});
    CHECK(next.status == 200);
    CHECK(next.body["usage"]["completion_tokens"] == 4);
    CHECK(metric_value(metrics_client, "moe_generated_tokens_total") == generated + 4);
}

TEST_CASE("a non-streaming client that gives up cancels its generation", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto impatient = server.client();
    // 4000 tokens of the tiny model take about 1 s on a fast machine: the
    // client gives up well before that.
    impatient.set_read_timeout(0, 200 * 1000);
    json body = long_stream("Go on forever.");
    body["stream"] = false;
    auto res = impatient.Post("/v1/chat/completions", body.dump(), "application/json");
    CHECK_FALSE(res);  // timed out and closed the connection
    auto m = server.client();
    REQUIRE(eventually([&] { return metric_value(m, CANCELLED) == 1; }));
    CHECK(metric_value(m, "moe_generated_tokens_total") < 4000);
    JsonReply next = post_json(m, "/v1/chat/completions",
                               {{"messages", {{{"role", "user"}, {"content", "next"}}}}, {"max_tokens", 2}});
    CHECK(next.status == 200);
}

TEST_CASE("a full queue answers 503 with Retry-After", "[server]") {
    ServerProcess server(test_model_dir("tiny"), {"--max-queue", "1"});
    std::atomic<bool> release{false};
    std::atomic<int> a_frames{0}, b_frames{0};
    std::atomic<int> a_status{0}, b_status{0};

    // A runs: a long stream whose client keeps reading until released.
    std::thread a([&] {
        auto c = server.client();
        SseResponse r = sse_post(c, "/v1/chat/completions", long_stream("A").dump(), {}, [&](const std::string&) {
            a_frames++;
            return !release.load();
        });
        a_status = r.status;
    });
    auto m = server.client();
    REQUIRE(eventually([&] { return a_frames.load() >= 2; }));  // A produces tokens
    // B waits in the queue (it has its role chunk, no tokens yet).
    std::thread b([&] {
        auto c = server.client();
        SseResponse r = sse_post(c, "/v1/chat/completions", long_stream("B").dump(), {}, [&](const std::string&) {
            b_frames++;
            return !release.load();
        });
        b_status = r.status;
    });
    REQUIRE(eventually([&] { return metric_value(m, "moe_queue_depth") == 1; }));
    CHECK(metric_value(m, "moe_requests_running") == 1);

    // C finds the queue full.
    JsonReply c = post_json(m, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "C"}}}}});
    INFO(c.raw);
    CHECK(c.status == 503);
    CHECK(c.headers.count("Retry-After") == 1);
    CHECK(c.body["error"]["code"] == "queue_full");
    CHECK(c.body["error"]["type"] == "server_error");
    JsonReply streamed_c = post_json(m, "/v1/chat/completions", long_stream("C"));
    CHECK(streamed_c.status == 503);

    // Both clients hang up: A is cancelled, B runs and is cancelled in turn.
    release = true;
    a.join();
    b.join();
    CHECK(a_status == 200);
    CHECK(b_status == 200);
    REQUIRE(eventually([&] { return metric_value(m, CANCELLED) == 2; }));
    JsonReply d =
        post_json(m, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "D"}}}}, {"max_tokens", 2}});
    CHECK(d.status == 200);
    CHECK(eventually([&] {
        return metric_value(m, "moe_http_requests_total{route=\"/v1/chat/completions\",status=\"503\"}") == 2;
    }));
}

TEST_CASE("a multi-turn chat reuses the KV cache of its history", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    json turn1 = {{"messages", {{{"role", "user"}, {"content", "What is a mixture of experts?"}}}},
                  {"max_tokens", 8},
                  {"temperature", 0},
                  {"ignore_eos", true}};
    JsonReply r1 = post_json(c, "/v1/chat/completions", turn1);
    REQUIRE(r1.status == 200);
    int prompt1 = r1.body["usage"]["prompt_tokens"];
    CHECK(r1.body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);

    std::string answer = r1.body["choices"][0]["message"]["content"];
    json turn2 = turn1;
    turn2["messages"].push_back({{"role", "assistant"}, {"content", answer.empty() ? "ok" : answer}});
    turn2["messages"].push_back({{"role", "user"}, {"content", "Say it shorter."}});
    JsonReply r2 = post_json(c, "/v1/chat/completions", turn2);
    REQUIRE(r2.status == 200);
    int prompt2 = r2.body["usage"]["prompt_tokens"];
    int cached2 = r2.body["usage"]["prompt_tokens_details"]["cached_tokens"];
    INFO("prompt1 " << prompt1 << " prompt2 " << prompt2 << " cached " << cached2);
    // Nothing of the first turn runs again: its prompt and the reply's ids
    // (all but the last, which was sampled but never fed back) are reused.
    CHECK(cached2 >= prompt1 + 8 - 1);
    CHECK(cached2 < prompt2);
    CHECK(r2.body["timings"]["cache_n"] == cached2);
    CHECK(r2.body["timings"]["prompt_n"] == prompt2 - cached2);

    // The same conversation with reuse switched off runs everything again.
    json cold = turn2;
    cold["cache_prompt"] = false;
    JsonReply r3 = post_json(c, "/v1/chat/completions", cold);
    CHECK(r3.body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
    CHECK(metric_value(c, "moe_prompt_tokens_cached_total") == cached2);
}

TEST_CASE("SIGTERM during a stream and SIGINT when idle stop the server with exit code 0", "[server]") {
    SECTION("SIGTERM while streaming") {
        ServerProcess server(test_model_dir("tiny"));
        std::atomic<int> frames{0};
        std::atomic<int> status{-1};
        std::thread reader([&] {
            auto c = server.client();
            SseResponse r =
                sse_post(c, "/v1/chat/completions", long_stream("stream").dump(), {}, [&](const std::string&) {
                    frames++;
                    return true;
                });
            status = r.status;
        });
        REQUIRE(eventually([&] { return frames.load() >= 3; }));
        CHECK(server.stop(SIGTERM) == 0);
        reader.join();  // the stream ended with the server
        CHECK(frames.load() < 4000);
        CHECK(server.log().find("shutting down") != std::string::npos);
    }
    SECTION("SIGINT when idle") {
        ServerProcess server(test_model_dir("tiny"));
        CHECK(server.stop(SIGINT) == 0);
    }
}

TEST_CASE("SIGTERM answers a running non-streamed request 503 with Retry-After", "[server]") {
    // The shutdown shuts the reading side of every connection: that must not
    // be taken for the client's half-close (which sends the answer as it
    // comes, status 200 with an error in the body).
    ServerProcess server(test_model_dir("tiny"), {"--ctx", "16384"});
    JsonReply reply;
    std::thread requester([&] {
        auto c = server.client();
        json body = long_stream("Go on forever.");
        body["stream"] = false;
        body["max_tokens"] = 16000;  // seconds of work: it is still running at SIGTERM
        reply = post_json(c, "/v1/chat/completions", body);
    });
    auto m = server.client();
    const bool running = eventually([&] { return metric_value(m, "moe_requests_running") == 1; });
    CHECK(running);  // CHECK, not REQUIRE: the server must stop before the thread is joined
    CHECK(server.stop(SIGTERM) == 0);
    requester.join();
    INFO("reply: " << reply.raw);
    CHECK(reply.status == 503);
    CHECK(reply.headers.count("Retry-After") == 1);
    REQUIRE(reply.body.is_object());
    CHECK(reply.body["error"]["type"] == "server_error");
    CHECK(reply.body["error"]["message"].get<std::string>().find("shutting down") != std::string::npos);
}

TEST_CASE("bad flags and a bad model folder fail at start-up with exit code 2", "[server]") {
    auto [code, out] = run_binary("serve --bogus 1");
    CHECK(code == 2);
    CHECK(out.find("--bogus") != std::string::npos);
    std::filesystem::path empty = test_temp_dir("empty-model");
    auto [code2, out2] = run_binary("serve --port " + std::to_string(free_port()) + " --model " + empty.string());
    CHECK(code2 == 2);
    CHECK(out2.find(empty.string()) != std::string::npos);
    auto [code3, out3] = run_binary("serve --port 99999");
    CHECK(code3 == 2);
    CHECK(out3.find("--port") != std::string::npos);
}
