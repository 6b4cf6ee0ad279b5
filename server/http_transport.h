// HTTP transport: the cpp-httplib server and everything about the wire. Its
// worker threads and body limit; CORS headers and preflights, and the API
// key, checked before routing; an OpenAI error body for every failure (a
// handler's exception, 404, 413); the request log line and the per-route
// request counts; and writing a queued task's answer (SSE frames in a
// chunked body, or one JSON object with the status that fits) while
// watching for the client to hang up. Control characters in the log line
// are escaped.
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
// The status and the headers that go with it (as send_error).
void set_error_status(httplib::Response& res, int status);

// Answers with a queued task's events, turned into text by the responder.
// A stream goes out as SSE frames in a chunked body (its status, 200, goes
// first: a later error is an error event, counted in metrics as a stream
// error). One JSON object is built on this thread while its socket is
// polled for a hang-up, and sent with the status that fits the answer
// (e.g. 503 when the shutdown dropped the task, 500 when the engine
// failed). A client that hangs up cancels the task (status 499, not sent).
void send_task_events(const httplib::Request& req, httplib::Response& res, std::shared_ptr<Task> task,
                      OpenAiResponder responder, Metrics& metrics);

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
