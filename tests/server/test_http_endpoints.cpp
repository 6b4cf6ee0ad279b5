// Every endpoint over real HTTP on loopback, against the moe-server binary
// serving the tiny synthetic model: chat and text completions (plain and
// streamed, with their SSE framing), stop strings, logprobs, tokenize /
// detokenize, models, experts, metrics, the web UI, auth and CORS.
#include <catch2/catch.hpp>

#include "apps/http_sse_client.h"
#include "base/utf8.h"
#include "server/openai.h"
#include "server_fixture.h"
#include "support/test_support.h"

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

json user_chat(const std::string& text, json extra = json::object()) {
    json body = {{"messages", {{{"role", "user"}, {"content", text}}}}};
    body.update(extra);
    return body;
}

// Greedy and without prefix reuse, so the same request gives the same text.
const json GREEDY = {{"temperature", 0}, {"cache_prompt", false}, {"ignore_eos", true}};

json merged(json a, const json& b) {
    a.update(b);
    return a;
}

// The data payloads of an SSE body; every frame must be exactly "data: X\n\n".
std::vector<std::string> sse_frames(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < body.size()) {
        INFO("body: " << body);
        REQUIRE(body.compare(pos, 6, "data: ") == 0);
        size_t end = body.find("\n\n", pos);
        REQUIRE(end != std::string::npos);
        out.push_back(body.substr(pos + 6, end - pos - 6));
        pos = end + 2;
    }
    return out;
}

void check_error_shape(const JsonReply& r, int status) {
    INFO(r.raw);
    CHECK(r.status == status);
    REQUIRE(r.body.is_object());
    REQUIRE(r.body.contains("error"));
    const json& e = r.body["error"];
    CHECK(e["message"].is_string());
    CHECK_FALSE(e["message"].get<std::string>().empty());
    CHECK(e["type"].is_string());
    CHECK(e.contains("param"));
    CHECK(e.contains("code"));
}

// Greedy chats of `texts` (max_tokens each), then GET /v1/experts.
JsonReply experts_after_chats(httplib::Client& c, std::initializer_list<const char*> texts, int max_tokens) {
    for (const char* text : texts) {
        JsonReply r =
            post_json(c, "/v1/chat/completions", merged(user_chat(text), merged(GREEDY, {{"max_tokens", max_tokens}})));
        REQUIRE(r.status == 200);
    }
    return get_json(c, "/v1/experts");
}

}  // namespace

TEST_CASE("health, models and metrics", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    JsonReply health = get_json(c, "/health");
    CHECK(health.status == 200);
    CHECK(health.body["status"] == "ok");

    std::string id = test_model_dir("tiny").filename().string();
    JsonReply models = get_json(c, "/v1/models");
    REQUIRE(models.status == 200);
    CHECK(models.body["object"] == "list");
    REQUIRE(models.body["data"].size() == 1);
    CHECK(models.body["data"][0]["id"] == id);
    CHECK(models.body["data"][0]["object"] == "model");
    CHECK(models.body["data"][0]["owned_by"].is_string());
    CHECK(models.body["data"][0]["meta"]["n_ctx"] == 4096);

    JsonReply one = get_json(c, "/v1/models/" + id);
    CHECK(one.status == 200);
    CHECK(one.body["id"] == id);
    JsonReply missing = get_json(c, "/v1/models/gpt-4");
    check_error_shape(missing, 404);
    CHECK(missing.body["error"]["code"] == "model_not_found");

    auto metrics = c.Get("/metrics");
    REQUIRE(metrics);
    CHECK(metrics->status == 200);
    CHECK(metrics->get_header_value("Content-Type").rfind("text/plain", 0) == 0);
    for (const char* name :
         {"# TYPE moe_http_requests_total counter", "# TYPE moe_generated_tokens_total counter",
          "# TYPE moe_prompt_tokens_total counter", "# TYPE moe_queue_depth gauge",
          "# TYPE moe_time_to_first_token_seconds histogram", "# TYPE moe_decode_tokens_per_second gauge"})
        CHECK(metrics->body.find(name) != std::string::npos);
    // Requests are counted once answered (the count may trail the reply a little).
    CHECK(eventually(
        [&] { return metric_value(c, "moe_http_requests_total{route=\"/v1/models\",status=\"200\"}") == 1; }));
    CHECK(metric_value(c, "moe_queue_depth") == 0);

    // A generation moves the token counters and the TTFT histogram.
    JsonReply r = post_json(c, "/v1/chat/completions", merged(user_chat("count"), merged(GREEDY, {{"max_tokens", 5}})));
    REQUIRE(r.status == 200);
    CHECK(metric_value(c, "moe_generated_tokens_total") == 5);
    CHECK(metric_value(c, "moe_prompt_tokens_total") == r.body["usage"]["prompt_tokens"].get<double>());
    CHECK(metric_value(c, "moe_time_to_first_token_seconds_count") == 1);
    CHECK(metric_value(c, "moe_time_to_first_token_seconds_bucket{le=\"+Inf\"}") == 1);
    CHECK(metric_value(c, "moe_generations_total{finish_reason=\"length\"}") == 1);
    CHECK(eventually([&] {
        return metric_value(c, "moe_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"}") == 1;
    }));
}

TEST_CASE("chat completion, not streamed", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    json body = merged(user_chat("Tell me about mixtures of experts."), merged(GREEDY, {{"max_tokens", 12}}));
    JsonReply r = post_json(c, "/v1/chat/completions", body);
    INFO(r.raw);
    REQUIRE(r.status == 200);
    CHECK(r.headers.find("Content-Type")->second.rfind("application/json", 0) == 0);
    const json& j = r.body;
    CHECK(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
    CHECK(j["object"] == "chat.completion");
    CHECK(j["created"].is_number_integer());
    CHECK(j["model"] == test_model_dir("tiny").filename().string());
    REQUIRE(j["choices"].size() == 1);
    CHECK(j["choices"][0]["index"] == 0);
    CHECK(j["choices"][0]["message"]["role"] == "assistant");
    CHECK(j["choices"][0]["message"]["content"].is_string());
    CHECK(j["choices"][0]["finish_reason"] == "length");
    CHECK(j["usage"]["completion_tokens"] == 12);
    CHECK(j["usage"]["total_tokens"] == j["usage"]["prompt_tokens"].get<int>() + 12);
    CHECK(j["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
    CHECK(j["timings"]["predicted_n"] == 12);
    CHECK(j["timings"]["prompt_n"] == j["usage"]["prompt_tokens"]);
    CHECK(j["timings"]["predicted_per_second"].is_number());

    // The prompt is the chat template's rendering: /tokenize agrees.
    JsonReply tok = post_json(c, "/tokenize", {{"messages", body["messages"]}});
    REQUIRE(tok.status == 200);
    CHECK(tok.body["tokens"].size() == j["usage"]["prompt_tokens"].get<size_t>());

    // Greedy is deterministic; max_completion_tokens is honoured too.
    JsonReply again = post_json(c, "/v1/chat/completions", body);
    CHECK(again.body["choices"][0]["message"]["content"] == j["choices"][0]["message"]["content"]);
    CHECK(again.body["id"] != j["id"]);
    JsonReply mct =
        post_json(c, "/v1/chat/completions", merged(user_chat("hi"), merged(GREEDY, {{"max_completion_tokens", 3}})));
    CHECK(mct.body["usage"]["completion_tokens"] == 3);

    // A seed makes sampling repeatable; content parts are accepted.
    json seeded = {{"messages",
                    {{{"role", "system"}, {"content", "You are terse."}},
                     {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hello"}}}}}}},
                   {"temperature", 1.0},
                   {"top_p", 0.9},
                   {"top_k", 20},
                   {"min_p", 0.01},
                   {"seed", 1234},
                   {"presence_penalty", 0.5},
                   {"frequency_penalty", 0.5},
                   {"repetition_penalty", 1.1},
                   {"max_tokens", 8},
                   {"ignore_eos", true},
                   {"n", 1}};
    JsonReply s1 = post_json(c, "/v1/chat/completions", seeded);
    JsonReply s2 = post_json(c, "/v1/chat/completions", seeded);
    REQUIRE(s1.status == 200);
    CHECK(s1.body["choices"][0]["message"]["content"] == s2.body["choices"][0]["message"]["content"]);
}

TEST_CASE("chat completion, streamed: SSE framing", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    json base = merged(user_chat("Stream me a story."), merged(GREEDY, {{"max_tokens", 10}}));
    JsonReply plain = post_json(c, "/v1/chat/completions", base);
    REQUIRE(plain.status == 200);

    json body = merged(base, {{"stream", true}, {"stream_options", {{"include_usage", true}}}});
    auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    CHECK(res->get_header_value("Content-Type").rfind("text/event-stream", 0) == 0);
    CHECK(res->get_header_value("Cache-Control") == "no-cache");
    std::vector<std::string> frames = sse_frames(res->body);
    REQUIRE(frames.size() >= 4);
    CHECK(frames.back() == "[DONE]");

    json first = json::parse(frames[0]);
    CHECK(first["object"] == "chat.completion.chunk");
    CHECK(first["choices"][0]["delta"]["role"] == "assistant");
    CHECK(first["usage"].is_null());
    std::string content;
    int finish_chunks = 0;
    size_t finish_at = 0;
    for (size_t i = 0; i + 1 < frames.size(); i++) {
        json chunk = json::parse(frames[i]);
        CHECK(chunk["id"] == first["id"]);
        CHECK(chunk["object"] == "chat.completion.chunk");
        CHECK(chunk["model"] == first["model"]);
        if (chunk["choices"].empty()) continue;  // the usage chunk
        const json& choice = chunk["choices"][0];
        if (choice["delta"].contains("content")) content += choice["delta"]["content"].get<std::string>();
        if (!choice["finish_reason"].is_null()) {
            finish_chunks++;
            finish_at = i;
            CHECK(choice["finish_reason"] == "length");
            CHECK(choice["delta"] == json::object());
            CHECK(chunk["timings"]["predicted_n"] == 10);
        }
    }
    CHECK(finish_chunks == 1);
    CHECK(finish_at == frames.size() - 3);
    json usage = json::parse(frames[frames.size() - 2]);
    CHECK(usage["choices"] == json::array());
    CHECK(usage["usage"]["completion_tokens"] == 10);
    CHECK(usage["usage"]["prompt_tokens"] == plain.body["usage"]["prompt_tokens"]);
    CHECK(content == plain.body["choices"][0]["message"]["content"].get<std::string>());

    // Without include_usage there is no usage chunk and no usage field.
    auto bare = c.Post("/v1/chat/completions", merged(base, {{"stream", true}}).dump(), "application/json");
    REQUIRE(bare);
    std::vector<std::string> bare_frames = sse_frames(bare->body);
    CHECK(bare_frames.back() == "[DONE]");
    for (size_t i = 0; i + 1 < bare_frames.size(); i++) {
        json chunk = json::parse(bare_frames[i]);
        CHECK_FALSE(chunk.contains("usage"));
        CHECK(chunk["choices"].size() == 1);
    }

    // The streaming client helper sees the same events as they arrive.
    std::vector<std::string> seen;
    SseResponse streamed =
        sse_post(c, "/v1/chat/completions", merged(base, {{"stream", true}}).dump(), {}, [&](const std::string& data) {
            seen.push_back(data);
            return true;
        });
    CHECK(streamed.status == 200);
    CHECK(seen.size() == bare_frames.size());
    CHECK(seen.back() == "[DONE]");
}

TEST_CASE("text completions: string and token prompts, streamed and not", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    JsonReply r = post_json(c, "/v1/completions", merged({{"prompt", "Once upon a time"}, {"max_tokens", 6}}, GREEDY));
    INFO(r.raw);
    REQUIRE(r.status == 200);
    CHECK(r.body["object"] == "text_completion");
    CHECK(r.body["id"].get<std::string>().rfind("cmpl-", 0) == 0);
    CHECK(r.body["choices"][0]["text"].is_string());
    CHECK(r.body["choices"][0]["finish_reason"] == "length");
    CHECK(r.body["usage"]["completion_tokens"] == 6);

    // The same prompt as token ids (BOS + the text's tokens) gives the same text.
    JsonReply tok = post_json(c, "/tokenize", {{"content", "Once upon a time"}, {"add_special", true}});
    REQUIRE(tok.status == 200);
    JsonReply ids =
        post_json(c, "/v1/completions", merged({{"prompt", tok.body["tokens"]}, {"max_tokens", 6}}, GREEDY));
    REQUIRE(ids.status == 200);
    CHECK(ids.body["usage"]["prompt_tokens"] == tok.body["tokens"].size());
    CHECK(ids.body["usage"]["prompt_tokens"] == r.body["usage"]["prompt_tokens"]);
    CHECK(ids.body["choices"][0]["text"] == r.body["choices"][0]["text"]);

    json streamed_body = merged({{"prompt", "Once upon a time"},
                                 {"max_tokens", 6},
                                 {"stream", true},
                                 {"stream_options", {{"include_usage", true}}}},
                                GREEDY);
    auto s = c.Post("/v1/completions", streamed_body.dump(), "application/json");
    REQUIRE(s);
    std::vector<std::string> frames = sse_frames(s->body);
    CHECK(frames.back() == "[DONE]");
    std::string text;
    for (size_t i = 0; i + 1 < frames.size(); i++) {
        json chunk = json::parse(frames[i]);
        CHECK(chunk["object"] == "text_completion");
        if (!chunk["choices"].empty()) text += chunk["choices"][0]["text"].get<std::string>();
    }
    CHECK(text == r.body["choices"][0]["text"].get<std::string>());
    CHECK(json::parse(frames[frames.size() - 2])["usage"]["completion_tokens"] == 6);
    CHECK(json::parse(frames[frames.size() - 3])["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("stop strings end the reply before the stop", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    json base = merged(user_chat("Say something long."), merged(GREEDY, {{"max_tokens", 24}}));
    JsonReply full = post_json(c, "/v1/chat/completions", base);
    REQUIRE(full.status == 200);
    std::string text = full.body["choices"][0]["message"]["content"];
    // A stop string from the middle of the greedy reply, at its first occurrence.
    std::string stop;
    size_t at = std::string::npos;
    for (size_t p = text.size() / 3; p + 2 <= text.size() && stop.empty(); p++) {
        std::string candidate = text.substr(p, 2);
        if (utf8_valid(candidate) && text.find(candidate) == p &&
            candidate.find_first_not_of(' ') != std::string::npos) {
            stop = candidate;
            at = p;
        }
    }
    INFO("text: " << text << " stop: " << stop);
    REQUIRE_FALSE(stop.empty());
    JsonReply stopped = post_json(c, "/v1/chat/completions", merged(base, {{"stop", {stop, "\x01never"}}}));
    REQUIRE(stopped.status == 200);
    CHECK(stopped.body["choices"][0]["message"]["content"] == text.substr(0, at));
    CHECK(stopped.body["choices"][0]["finish_reason"] == "stop");

    // Streamed: the deltas add up to the same text, and the finish says stop.
    auto s =
        c.Post("/v1/chat/completions", merged(base, {{"stop", stop}, {"stream", true}}).dump(), "application/json");
    REQUIRE(s);
    std::vector<std::string> frames = sse_frames(s->body);
    std::string streamed;
    std::string reason;
    for (size_t i = 0; i + 1 < frames.size(); i++) {
        json choice = json::parse(frames[i])["choices"][0];
        if (choice["delta"].contains("content")) streamed += choice["delta"]["content"].get<std::string>();
        if (!choice["finish_reason"].is_null()) reason = choice["finish_reason"];
    }
    CHECK(streamed == text.substr(0, at));
    CHECK(reason == "stop");
}

TEST_CASE("logprobs and top_logprobs", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    JsonReply r = post_json(
        c, "/v1/chat/completions",
        merged(user_chat("hi"), merged(GREEDY, {{"max_tokens", 5}, {"logprobs", true}, {"top_logprobs", 3}})));
    INFO(r.raw);
    REQUIRE(r.status == 200);
    const json& content = r.body["choices"][0]["logprobs"]["content"];
    REQUIRE(content.size() == 5);
    for (const json& entry : content) {
        CHECK(entry["token"].is_string());
        CHECK(entry["logprob"].get<double>() <= 0.0);
        CHECK(entry["bytes"].is_array());
        REQUIRE(entry["top_logprobs"].size() == 3);
        // Greedy: the chosen token is the most likely one.
        CHECK(entry["logprob"].get<double>() == Approx(entry["top_logprobs"][0]["logprob"].get<double>()));
        CHECK(entry["top_logprobs"][0]["logprob"].get<double>() >= entry["top_logprobs"][1]["logprob"].get<double>());
    }
    JsonReply none = post_json(c, "/v1/chat/completions", merged(user_chat("hi"), merged(GREEDY, {{"max_tokens", 2}})));
    CHECK(none.body["choices"][0]["logprobs"].is_null());

    JsonReply legacy =
        post_json(c, "/v1/completions", merged({{"prompt", "a b c"}, {"max_tokens", 3}, {"logprobs", 2}}, GREEDY));
    REQUIRE(legacy.status == 200);
    const json& lp = legacy.body["choices"][0]["logprobs"];
    CHECK(lp["tokens"].size() == 3);
    CHECK(lp["token_logprobs"].size() == 3);
    CHECK(lp["top_logprobs"][0].size() <= 2);
    CHECK(lp["text_offset"][0] == 0);
}

TEST_CASE("tokenize and detokenize", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    JsonReply t = post_json(c, "/tokenize", {{"content", "Hello world"}});
    REQUIRE(t.status == 200);
    REQUIRE(t.body["tokens"].size() >= 2);
    JsonReply d = post_json(c, "/detokenize", {{"tokens", t.body["tokens"]}});
    REQUIRE(d.status == 200);
    CHECK(d.body["content"] == "Hello world");

    JsonReply special = post_json(c, "/tokenize", {{"content", "Hello world"}, {"add_special", true}});
    CHECK(special.body["tokens"].size() == t.body["tokens"].size() + 1);
    CHECK(special.body["tokens"][0] == 1);  // BOS

    JsonReply pieces = post_json(c, "/tokenize", {{"content", "Hello"}, {"with_pieces", true}});
    REQUIRE(pieces.body["tokens"].size() >= 1);
    CHECK(pieces.body["tokens"][0]["id"].is_number_integer());
    CHECK(pieces.body["tokens"][0]["piece"].is_string());

    JsonReply chat = post_json(c, "/tokenize", {{"messages", {{{"role", "user"}, {"content", "Hello world"}}}}});
    REQUIRE(chat.status == 200);
    CHECK(chat.body["tokens"][0] == 1);
    CHECK(chat.body["tokens"].size() > t.body["tokens"].size() + 2);  // [INST] ... [/INST] around the text
}

TEST_CASE("experts endpoint reports routing counts in the agreed shape", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    JsonReply e = experts_after_chats(c, {"route me"}, 4);
    INFO(e.raw);
    REQUIRE(e.status == 200);
    const json& j = e.body;
    CHECK(j["object"] == "experts");
    CHECK(j["model"] == test_model_dir("tiny").filename().string());
    int layers = j["layers"], experts = j["experts"], top_k = j["top_k"];
    CHECK(layers == 2);
    CHECK(experts == 4);
    CHECK(top_k == 2);
    CHECK(j["dense_layers"] == json::array());  // every layer of a Mixtral model routes
    CHECK(j["device"] == "none");
    CHECK(j["work_share"]["cpu"] == 1.0);
    CHECK(j["work_share"]["gpu"] == 0.0);
    CHECK(j["hit_rate"].is_null());
    for (const char* key : {"counts_total", "counts_last", "resident"}) {
        REQUIRE(j[key].size() == size_t(layers));
        for (const json& row : j[key]) CHECK(row.size() == size_t(experts));
    }
    for (const json& row : j["resident"])
        for (const json& x : row) CHECK(x == false);
    // Every layer routes each processed token to top_k experts.
    long first_layer = -1;
    for (const json& row : j["counts_last"]) {
        long sum = 0;
        for (const json& x : row) sum += x.get<long>();
        CHECK(sum > 0);
        CHECK(sum % top_k == 0);
        if (first_layer < 0) first_layer = sum;
        CHECK(sum == first_layer);
    }
}

TEST_CASE("experts endpoint and metrics show an emulated device's placement and work", "[server]") {
    ServerProcess server(test_model_dir("tiny"), {"--emulate-gpu", "50%"});
    auto c = server.client();
    JsonReply e = experts_after_chats(c, {"route me"}, 6);
    INFO(e.raw);
    REQUIRE(e.status == 200);
    const json& j = e.body;
    CHECK(j["device"] == "emulated");
    int resident = 0;
    for (const json& row : j["resident"])
        for (const json& x : row) resident += x.get<bool>() ? 1 : 0;
    CHECK(resident == 4);  // half of 2 layers x 4 experts
    CHECK(j["placement"]["capacity"] == 4);
    CHECK(j["placement"]["plan"] == "even");
    REQUIRE(j["hit_rate"].is_number());
    double hit = j["hit_rate"];
    CHECK(hit > 0.0);
    CHECK(hit < 1.0);
    double gpu = j["work_share"]["gpu"], cpu = j["work_share"]["cpu"];
    CHECK(gpu >= hit);
    CHECK(gpu + cpu == Approx(1.0));
    // Tokens by site add up to the routed tokens of the last request.
    long routed = 0;
    for (const json& row : j["counts_last"])
        for (const json& x : row) routed += x.get<long>();
    long by_site = 0;
    for (const char* site : {"cpu", "device", "copy"}) by_site += j["execution_last"]["sites"][site]["tokens"].get<long>();
    CHECK(by_site == routed);
    CHECK(j["execution_total"]["layers"].get<long>() > 0);
    // Per layer, predicted and measured time of each side add up to the sums.
    const json& total = j["execution_total"];
    for (const char* key : {"predicted_cpu_ms", "measured_cpu_ms", "predicted_device_ms", "measured_device_ms"}) {
        INFO(key);
        const json& per_layer = total["per_layer"][key];
        REQUIRE(per_layer.size() == 2);
        double sum = 0;
        for (const json& v : per_layer) sum += v.get<double>();
        CHECK(sum == Approx(total[key].get<double>()).epsilon(1e-9).margin(1e-9));
    }
    for (const json& v : total["per_layer"]["measured_device_ms"]) CHECK(v.get<double>() > 0);  // both layers ran on it
    // The per-layer prefetch counts add up to theirs too.
    for (const char* key : {"prefetch_copies", "prefetch_useful"}) {
        INFO(key);
        REQUIRE(total["per_layer"][key].size() == 2);
        long sum = 0;
        for (const json& v : total["per_layer"][key]) sum += v.get<long>();
        CHECK(sum == total[key].get<long>());
    }
    CHECK(j["placement"]["staging_slots"] == 2);

    CHECK(metric_value(c, "moe_device_info{device=\"emulated\"}") == 1);
    CHECK(metric_value(c, "moe_expert_layer_ms_total{layer=\"1\",side=\"device\",kind=\"measured\"}") > 0);
    CHECK(metric_value(c, "moe_expert_layer_ms_total{layer=\"0\",side=\"cpu\",kind=\"predicted\"}") >= 0);
    CHECK(metric_value(c, "moe_expert_layer_prefetch_total{layer=\"1\",kind=\"copies\"}") >= 0);
    CHECK(metric_value(c, "moe_experts_resident") == 4);
    CHECK(metric_value(c, "moe_expert_runs_total{site=\"device\"}") > 0);
    CHECK(metric_value(c, "moe_moe_layers_total") > 0);
}

TEST_CASE("experts endpoint and metrics show the expert cache and prefetch", "[server][cache]") {
    ServerProcess server(test_model_dir("tiny"), {"--emulate-gpu", "50%", "--cache-policy", "lru", "--prefetch", "on"});
    auto c = server.client();
    JsonReply e = experts_after_chats(c, {"route me", "and route me again, with a longer prompt this time"}, 6);
    INFO(e.raw);
    REQUIRE(e.status == 200);
    const json& j = e.body;
    CHECK(j["device"] == "emulated");
    const json& p = j["placement"];
    CHECK(p["cache_policy"] == "lru");
    CHECK(p["prefetch"] == true);
    const int capacity = p["capacity"], slots = p["cache_slots"];
    CHECK(capacity == 4);  // half of 2 layers x 4 experts: pinned plus cache slots
    CHECK(slots > 0);
    CHECK(slots <= capacity);
    // cached: one bool per layer x expert, a subset of resident; never more
    // resident than the capacity, never more cached than the cache slots.
    REQUIRE(j["cached"].size() == 2);
    int resident = 0, cached = 0;
    for (int l = 0; l < 2; l++) {
        REQUIRE(j["cached"][l].size() == 4);
        for (int x = 0; x < 4; x++) {
            const bool in_cache = j["cached"][l][x].get<bool>(), on_device = j["resident"][l][x].get<bool>();
            if (in_cache) CHECK(on_device);
            cached += in_cache ? 1 : 0;
            resident += on_device ? 1 : 0;
        }
    }
    CHECK(resident <= capacity);
    CHECK(resident - cached == capacity - slots);  // the pinned experts stay
    CHECK(cached <= slots);
    // The cache's counts in both scopes; a prefetch is useful at most once.
    for (const char* scope : {"execution_total", "execution_last"}) {
        INFO(scope);
        for (const char* key : {"cache_hits", "cache_evictions", "cache_fills", "prefetch_copies", "prefetch_useful"})
            REQUIRE(j[scope][key].is_number_unsigned());
        CHECK(j[scope]["prefetch_useful"].get<long>() <= j[scope]["prefetch_copies"].get<long>());
    }
    const json& total = j["execution_total"];
    // With 2 of the 4 experts per layer on the device and one cache slot,
    // the cache did something (whether the planner copies or the CPU runs a
    // miss follows this machine's measured latency).
    CHECK(total["cache_hits"].get<long>() + total["cache_fills"].get<long>() + total["prefetch_copies"].get<long>() >
          0);

    CHECK(metric_value(c, "moe_expert_cache_slots") == slots);
    CHECK(metric_value(c, "moe_experts_resident") == capacity);
    CHECK(metric_value(c, "moe_expert_cache_hits_total") == total["cache_hits"].get<double>());
    CHECK(metric_value(c, "moe_expert_cache_evictions_total") == total["cache_evictions"].get<double>());
    CHECK(metric_value(c, "moe_expert_cache_fills_total") == total["cache_fills"].get<double>());
    CHECK(metric_value(c, "moe_expert_prefetch_copies_total") == total["prefetch_copies"].get<double>());
    CHECK(metric_value(c, "moe_expert_prefetch_useful_total") == total["prefetch_useful"].get<double>());
}

TEST_CASE("a static plan reports no cache slots and nothing cached", "[server][cache]") {
    ServerProcess server(test_model_dir("tiny"), {"--emulate-gpu", "50%", "--cache-policy", "static"});
    auto c = server.client();
    JsonReply e = experts_after_chats(c, {"route me"}, 4);
    INFO(e.raw);
    const json& j = e.body;
    CHECK(j["placement"]["cache_slots"] == 0);
    CHECK(j["placement"]["prefetch"] == false);
    CHECK(j["placement"]["cache_policy"] == "static");
    REQUIRE(j["cached"].size() == 2);
    for (const json& row : j["cached"])
        for (const json& x : row) CHECK(x == false);
    for (const char* key : {"cache_hits", "cache_evictions", "cache_fills", "prefetch_copies", "prefetch_useful"})
        CHECK(j["execution_total"][key] == 0);
    CHECK(metric_value(c, "moe_expert_cache_slots") == 0);
    CHECK(metric_value(c, "moe_expert_cache_hits_total") == 0);
}

TEST_CASE("the web UI is served from the embedded bundle at /", "[server]") {
    ServerProcess server(test_model_dir("tiny"), {"--api-key", "k"});
    auto c = server.client();
    // The bundle is committed (web/README.md), so the binary must serve it,
    // byte for byte, and never the "not built" fallback page.
    fs::path bundle = fs::path(MOE_SOURCE_DIR) / "web" / "dist" / "index.html";
    REQUIRE(fs::is_regular_file(bundle));
    const std::string page = read_file(bundle);
    for (const char* path : {"/", "/index.html"}) {
        auto res = c.Get(path);  // no API key needed for the page
        REQUIRE(res);
        CHECK(res->status == 200);
        CHECK(res->get_header_value("Content-Type").rfind("text/html", 0) == 0);
        CHECK(res->body == page);
        CHECK(res->body.find("not built") == std::string::npos);
    }
    auto missing = c.Get("/no-such-file.js");
    REQUIRE(missing);
    CHECK(missing->status == 404);
}

TEST_CASE("API key: Bearer auth on the API, not on /health and the page", "[server]") {
    ServerProcess server(test_model_dir("tiny"), {"--api-key", "sekrit"});
    auto c = server.client();
    JsonReply none = get_json(c, "/v1/models");
    check_error_shape(none, 401);
    CHECK(none.body["error"]["code"] == "invalid_api_key");
    JsonReply wrong = get_json(c, "/v1/models", {{"Authorization", "Bearer nope"}});
    check_error_shape(wrong, 401);
    CHECK(get_json(c, "/v1/models", {{"Authorization", "Bearer sekrit"}}).status == 200);
    check_error_shape(post_json(c, "/v1/chat/completions", user_chat("hi")), 401);
    check_error_shape(post_json(c, "/tokenize", {{"content", "x"}}), 401);
    check_error_shape(get_json(c, "/metrics"), 401);
    JsonReply ok = post_json(c, "/v1/chat/completions", merged(user_chat("hi"), merged(GREEDY, {{"max_tokens", 2}})),
                             {{"Authorization", "Bearer sekrit"}});
    CHECK(ok.status == 200);
    CHECK(get_json(c, "/health").status == 200);
}

TEST_CASE("CORS headers and preflight when --cors-origin is set", "[server]") {
    SECTION("with an origin") {
        ServerProcess server(test_model_dir("tiny"), {"--cors-origin", "http://localhost:5173", "--api-key", "k"});
        auto c = server.client();
        auto pre = c.Options("/v1/chat/completions",
                             {{"Origin", "http://localhost:5173"}, {"Access-Control-Request-Method", "POST"}});
        REQUIRE(pre);
        CHECK(pre->status == 204);  // preflight needs no API key
        CHECK(pre->get_header_value("Access-Control-Allow-Origin") == "http://localhost:5173");
        CHECK(pre->get_header_value("Access-Control-Allow-Headers").find("Authorization") != std::string::npos);
        CHECK(pre->get_header_value("Access-Control-Allow-Methods").find("POST") != std::string::npos);
        auto get = c.Get("/v1/models", {{"Authorization", "Bearer k"}});
        REQUIRE(get);
        CHECK(get->get_header_value("Access-Control-Allow-Origin") == "http://localhost:5173");
        auto denied = c.Get("/v1/models");  // errors carry the header too, so the page can read them
        REQUIRE(denied);
        CHECK(denied->status == 401);
        CHECK(denied->get_header_value("Access-Control-Allow-Origin") == "http://localhost:5173");
    }
    SECTION("without") {
        ServerProcess server(test_model_dir("tiny"));
        auto c = server.client();
        auto get = c.Get("/v1/models");
        REQUIRE(get);
        CHECK_FALSE(get->has_header("Access-Control-Allow-Origin"));
    }
}
