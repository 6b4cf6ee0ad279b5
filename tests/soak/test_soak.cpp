// A bounded soak of the real server on the tiny synthetic model: 8 clients
// send a few hundred mixed requests (chat and completions, streaming and
// not, tokenize, health, metrics), 30 % of the streams hang up mid-stream,
// the queue is held full for a while (--max-queue 4, so requests get 503),
// and SIGTERM stops the server under two live streams. Asserts that every
// request was answered, cancelled or refused; that RSS after the warm-up
// grows by less than 5 %; and that /metrics counts what was sent. Bounded in
// requests, never in time (the deadlines only catch a hang).
#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "apps/http_sse_client.h"
#include "server_fixture.h"
#include "support/test_support.h"

using json = nlohmann::json;

namespace {

constexpr int CLIENTS = 8;
constexpr int QUEUE = 4;        // --max-queue
constexpr int CONTEXT = 16384;  // room for a holding stream that outlasts the full-queue phase

enum class Kind { CHAT, CHAT_STREAM, COMPLETION, COMPLETION_STREAM, TOKENIZE, HEALTH, METRICS };
enum class Outcome { ANSWERED, CANCELLED, REFUSED, BAD };

struct Result {
    std::string route;
    int status = 0;
    Outcome outcome = Outcome::BAD;
    bool generation = false;  // a chat or completion request
    std::string detail;       // what was wrong, for BAD
};

const char* route_of(Kind k) {
    switch (k) {
    case Kind::CHAT:
    case Kind::CHAT_STREAM:
        return "/v1/chat/completions";
    case Kind::COMPLETION:
    case Kind::COMPLETION_STREAM:
        return "/v1/completions";
    case Kind::TOKENIZE:
        return "/tokenize";
    case Kind::HEALTH:
        return "/health";
    case Kind::METRICS:
        return "/metrics";
    }
    return "";
}

// A chat or completion body; hold: a generation longer than the test waits for.
json generation_body(Kind k, const std::string& text, bool stream, bool hold) {
    json body = {{"max_tokens", hold ? CONTEXT / 2 : 8}, {"temperature", 0.7}, {"stream", stream}};
    if (hold) body["ignore_eos"] = true;
    if (k == Kind::CHAT || k == Kind::CHAT_STREAM)
        body["messages"] = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", text}}};
    else
        body["prompt"] = text;
    return body;
}

// Streams a body; the client hangs up when keep_reading(frames so far) says no.
Result stream(ServerProcess& server, Kind k, const json& body, const std::function<bool(int)>& keep_reading) {
    Result r{route_of(k), 0, Outcome::BAD, true, ""};
    auto c = server.client();
    int frames = 0;
    std::string last;
    bool finished = false;
    SseResponse s = sse_post(c, r.route, body.dump(), {}, [&](const std::string& data) {
        frames++;
        last = data;
        json j = json::parse(data, nullptr, false);
        if (j.is_object() && j.contains("choices") && !j["choices"].empty() &&
            !j["choices"][0].value("finish_reason", json()).is_null())
            finished = true;
        return keep_reading(frames);
    });
    r.status = s.status;
    if (s.status == 0 || s.status == 503)
        r.outcome = Outcome::REFUSED;  // a full queue, or a connection the server would not take
    else if (s.status == 200 && s.cancelled)
        r.outcome = Outcome::CANCELLED;
    else if (s.status == 200 && last == "[DONE]" && finished)
        r.outcome = Outcome::ANSWERED;
    else
        r.detail = "status " + std::to_string(s.status) + ", last frame '" + last + "', body " + s.raw.substr(0, 300);
    return r;
}

Result plain(ServerProcess& server, Kind k, const std::string& text) {
    Result r{route_of(k), 0, Outcome::BAD, k == Kind::CHAT || k == Kind::COMPLETION, ""};
    auto c = server.client();
    JsonReply reply;
    if (k == Kind::HEALTH || k == Kind::METRICS)
        reply = get_json(c, r.route);
    else if (k == Kind::TOKENIZE)
        reply = post_json(c, r.route, {{"content", text}});
    else
        reply = post_json(c, r.route, generation_body(k, text, false, false));
    r.status = reply.status;
    bool ok = false;
    switch (k) {
    case Kind::CHAT:
        ok = reply.body.is_object() && reply.body["choices"][0]["message"]["content"].is_string();
        break;
    case Kind::COMPLETION:
        ok = reply.body.is_object() && reply.body["choices"][0]["text"].is_string();
        break;
    case Kind::TOKENIZE:
        ok = reply.body.is_object() && reply.body["tokens"].is_array() && !reply.body["tokens"].empty();
        break;
    case Kind::HEALTH:
        ok = true;
        break;
    case Kind::METRICS:
        ok = reply.raw.find("moe_http_requests_total") != std::string::npos;
        break;
    default:
        break;
    }
    if (reply.status == 200 && ok)
        r.outcome = Outcome::ANSWERED;
    else if (reply.status == 0 || reply.status == 503)
        r.outcome = Outcome::REFUSED;
    else
        r.detail = "status " + std::to_string(reply.status) + ", body " + reply.raw.substr(0, 300);
    return r;
}

// One mixed request, drawn from rng: about 30 % of the streams hang up after
// the role chunk and two tokens (a running generation, so it is cancelled).
Result mixed_request(ServerProcess& server, std::mt19937& rng) {
    static const Kind KINDS[] = {Kind::CHAT,
                                 Kind::CHAT,
                                 Kind::CHAT_STREAM,
                                 Kind::CHAT_STREAM,
                                 Kind::CHAT_STREAM,
                                 Kind::COMPLETION,
                                 Kind::COMPLETION_STREAM,
                                 Kind::COMPLETION_STREAM,
                                 Kind::TOKENIZE,
                                 Kind::TOKENIZE,
                                 Kind::HEALTH,
                                 Kind::METRICS};
    static const char* const TEXTS[] = {"Tell me a story about a lighthouse.", "What is 2 + 2?",
                                        "Write a haiku on autumn.", "Summarise the plot of Hamlet."};
    Kind k = KINDS[rng() % std::size(KINDS)];
    std::string text = TEXTS[rng() % std::size(TEXTS)];
    if (k != Kind::CHAT_STREAM && k != Kind::COMPLETION_STREAM) return plain(server, k, text);
    bool hang_up = rng() % 10 < 3;
    return stream(server, k, generation_body(k, text, true, hang_up),
                  [hang_up](int frames) { return !hang_up || frames < 3; });
}

struct Tally {
    std::mutex mutex;
    std::vector<Result> results;
    void add(const Result& r) {
        std::lock_guard<std::mutex> lock(mutex);
        results.push_back(r);
    }
};

// Every client sends `count` mixed requests, all clients at once.
void run_clients(ServerProcess& server, Tally& tally, int phase, int count) {
    std::vector<std::thread> threads;
    for (int i = 0; i < CLIENTS; i++) {
        threads.emplace_back([&, i] {
            std::mt19937 rng(1000 * phase + i);
            for (int n = 0; n < count; n++) tally.add(mixed_request(server, rng));
        });
    }
    for (auto& t : threads) t.join();
}

// Sum of every sample of a metric family ("name{...} value" lines).
double metric_family_sum(httplib::Client& client, const std::string& name) {
    auto res = client.Get("/metrics");
    if (!res || res->status != 200) return -1;
    std::istringstream in(res->body);
    std::string line;
    double sum = 0;
    while (std::getline(in, line))
        if (line.rfind(name + "{", 0) == 0) sum += std::stod(line.substr(line.rfind(' ') + 1));
    return sum;
}

std::string requests_sample(const std::string& route, int status) {
    return "moe_http_requests_total{route=\"" + route + "\",status=\"" + std::to_string(status) + "\"}";
}

}  // namespace

TEST_CASE("mixed clients, disconnects, a full queue and SIGTERM", "[soak]") {
    ServerProcess server(test_model_dir("tiny"),
                         {"--max-queue", std::to_string(QUEUE), "--ctx", std::to_string(CONTEXT)});
    auto m = server.client();
    Tally tally;

    // Warm-up: every kind of request from every client.
    run_clients(server, tally, 0, 10);
    REQUIRE(eventually([&] { return metric_value(m, "moe_requests_running") == 0; }));
    const long rss_warm = process_rss_kib(server.pid());
    REQUIRE(rss_warm > 0);

    // Full queue: A runs (a stream read until released), QUEUE plain chats
    // wait, so every generation the clients send now is refused with 503.
    std::atomic<bool> release{false};
    Result held;
    std::vector<Result> queued(QUEUE);
    std::thread a([&] {
        held = stream(server, Kind::CHAT_STREAM, generation_body(Kind::CHAT_STREAM, "Hold.", true, true),
                      [&](int) { return !release.load(); });
    });
    REQUIRE(eventually([&] { return metric_value(m, "moe_requests_running") == 1; }));
    std::vector<std::thread> waiting;
    for (int i = 0; i < QUEUE; i++) {
        waiting.emplace_back([&, i] { queued[i] = plain(server, Kind::CHAT, "Queued."); });
        REQUIRE(eventually([&] { return metric_value(m, "moe_queue_depth") == i + 1; }));
    }
    run_clients(server, tally, 1, 10);
    release = true;  // A hangs up and is cancelled; the waiting ones run
    a.join();
    for (auto& t : waiting) t.join();
    tally.add(held);
    for (const Result& r : queued) tally.add(r);

    // The rest: free-running mixed load.
    run_clients(server, tally, 2, 20);
    REQUIRE(eventually(
        [&] { return metric_value(m, "moe_requests_running") == 0 && metric_value(m, "moe_queue_depth") == 0; }));
    const long rss_end = process_rss_kib(server.pid());

    // Every request was answered, cancelled or refused.
    std::map<std::pair<std::string, int>, int> by_route_status;
    int generations = 0, refused = 0, cancelled = 0;
    for (const Result& r : tally.results) {
        INFO(r.route << ": " << r.detail);
        CHECK(r.outcome != Outcome::BAD);
        by_route_status[{r.route, r.status}]++;
        if (r.generation && r.status == 200) generations++;
        if (r.outcome == Outcome::REFUSED) refused++;
        if (r.outcome == Outcome::CANCELLED) cancelled++;
    }
    INFO("requests " << tally.results.size() << ", refused " << refused << ", disconnects " << cancelled
                     << ", RSS after warm-up " << rss_warm << " kB, at the end " << rss_end << " kB");
    CHECK(tally.results.size() >= 300);
    CHECK(by_route_status[{"/v1/chat/completions", 503}] + by_route_status[{"/v1/completions", 503}] > 0);
    CHECK(cancelled > 1);
    CHECK(rss_end < rss_warm * 105 / 100);

    // /metrics counts what was sent (the fixture's start-up polls /health,
    // and reading /metrics counts there too).
    for (const auto& [key, n] : by_route_status) {
        if (key.second == 0) continue;  // never reached a route
        INFO(requests_sample(key.first, key.second));
        if (key.first == "/metrics" || key.first == "/health")
            CHECK(metric_value(m, requests_sample(key.first, key.second)) >= n);
        else
            CHECK(eventually(
                [&, key = key, n = n] { return metric_value(m, requests_sample(key.first, key.second)) == n; }));
    }
    CHECK(eventually([&] { return metric_family_sum(m, "moe_generations_total") == generations; }));
    CHECK(metric_value(m, "moe_generations_total{finish_reason=\"cancelled\"}") == cancelled);

    // SIGTERM under two live streams, one running and one queued: the
    // server exits 0 and both streams end.
    std::vector<std::thread> last;
    std::vector<Result> cut(2);
    for (int i = 0; i < 2; i++) {
        last.emplace_back([&, i] {
            json body = generation_body(Kind::CHAT_STREAM, "Go on.", true, true);
            cut[i] = stream(server, Kind::CHAT_STREAM, body, [](int) { return true; });
        });
        REQUIRE(eventually(
            [&] { return metric_value(m, "moe_requests_running") + metric_value(m, "moe_queue_depth") == i + 1; }));
    }
    CHECK(server.stop(SIGTERM) == 0);
    for (auto& t : last) t.join();
    for (const Result& r : cut) {
        INFO(r.detail);
        CHECK(r.status == 200);
    }
}
