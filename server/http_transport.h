// HTTP transport: the cpp-httplib server and everything about the wire. Its
// worker threads and body limit; CORS headers and preflights, and the API
// key, checked before routing; an OpenAI error body for every failure (a
// handler's exception, 404, 413); the request log line and the per-route
// request counts; and writing a queued task's answer as a chunked body (SSE
// frames or one JSON object) while watching for the client to hang up.
// Knows nothing of the engine or of what a route means.
#pragma once
#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_queue.h"

void send_json(httplib::Response& res, const nlohmann::ordered_json& j);
// The error's status and OpenAI body; 503 adds Retry-After, 401 WWW-Authenticate.
void send_error(httplib::Response& res, const ApiError& error);

// Answers with a queued task's events, turned into text by the responder:
// an SSE stream (stream) or one JSON object, both as a chunked body, since
// only a content provider sees the client hang up while the engine works;
// then the task is cancelled. The status line goes out first, so every
// error the request can cause must be found before.
void send_task_events(httplib::Response& res, std::shared_ptr<Task> task, OpenAiResponder responder, bool stream);

class HttpTransport {
public:
    using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

    // options: listen address, API key, CORS origin, body limit, request
    // log, and max_queue (the worker threads are sized for it). Requests
    // are counted into metrics by route and status.
    HttpTransport(const ServerOptions& options, Metrics& metrics);

    // Routes (regular expressions, as cpp-httplib takes them). A handler's
    // ApiError is answered as it is, a MoeError as 400 and any other
    // exception as 500.
    void get(const std::string& pattern, Handler handler);
    void post(const std::string& pattern, Handler handler);

    // Binds the listening socket; returns the port. Throws MoeError naming
    // the address when it cannot.
    int bind();
    int port() const { return port_; }
    // Serves until stop(); returns at once when stop() came first.
    void listen();
    // Any thread, also before listen().
    void stop();

private:
    Handler guarded(Handler handler);
    bool authorized(const httplib::Request& req) const;

    const ServerOptions& options_;
    Metrics& metrics_;
    httplib::Server server_;
    int port_ = -1;
    std::atomic<bool> stop_requested_{false};
    std::atomic<bool> listening_{false};
};
