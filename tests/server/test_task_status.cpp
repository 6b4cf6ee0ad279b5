// Errors a task raises after it was queued, through the real transport in
// this process (no engine: the task's events are pushed by hand): a
// non-streamed answer carries the error's own HTTP status, a stream ends in
// an error event and [DONE], and /metrics counts both.
#include <catch2/catch.hpp>
#include <thread>

#include "server/http_transport.h"
#include "support/test_support.h"

using json = nlohmann::json;

TEST_CASE("a task's error after queueing sets the status of a non-streamed answer and is counted", "[server]") {
    static const Tokenizer tokenizer = Tokenizer::load(shared_data_dir() / "tokenizers/mistral-v1.model");
    ServerOptions options;
    options.port = 0;
    options.log_requests = false;
    Metrics metrics;
    HttpTransport http(options, metrics);
    http.post("/fail/([0-9]+)", [&](const httplib::Request& req, httplib::Response& res) {
        GenerationOptions o;
        o.stream = req.has_param("stream");
        auto task = std::make_shared<Task>([](Session&, Task&) {});
        task->push(TokenEvent{});
        task->push(TaskError{std::stoi(req.matches[1]), "token 40000 is outside the vocabulary\r\nforged"});
        send_task_events(req, res, task, OpenAiResponder(Endpoint::CHAT, o, "m", tokenizer), metrics);
    });
    const int port = http.bind();
    std::thread server([&] { http.listen(); });
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);

    for (int status : {400, 500, 503}) {
        INFO("status " << status);
        auto res = c.Post(("/fail/" + std::to_string(status)).c_str(), "{}", "application/json");
        REQUIRE(res);
        CHECK(res->status == status);
        CHECK_FALSE(res->has_header("Transfer-Encoding"));
        CHECK(res->has_header("Retry-After") == (status == 503));
        json body = json::parse(res->body);
        CHECK(body["error"]["type"] == (status >= 500 ? "server_error" : "invalid_request_error"));
        CHECK(body["error"]["message"] == "token 40000 is outside the vocabulary\\x0d\\x0aforged");
    }
    auto stream = c.Post("/fail/500?stream=1", "{}", "application/json");
    REQUIRE(stream);
    CHECK(stream->status == 200);
    const std::string tail = "\"code\":null}}\n\ndata: [DONE]\n\n";
    CHECK(stream->body.find("data: {\"error\":") != std::string::npos);
    CHECK(stream->body.substr(stream->body.size() - tail.size()) == tail);

    std::string text = metrics.render(0, false);
    INFO(text);
    for (int status : {400, 500, 503})
        CHECK(text.find("moe_http_requests_total{route=\"other\",status=\"" + std::to_string(status) + "\"} 1\n") !=
              std::string::npos);
    CHECK(text.find("moe_stream_errors_total{status=\"500\"} 1\n") != std::string::npos);
    http.stop();
    server.join();
}
