// HTTP transport: the cpp-httplib server and everything about the wire. The
// connections, their limits and the request deadline (http_connections.h);
// before routing, the Host and Origin checks against DNS rebinding and
// cross-site pages, the header sanity checks (one body length, no transfer
// coding but chunked, a body only on POST, PUT and PATCH, the body limit),
// CORS headers and preflights, and the API key; an OpenAI error body for
// every failure (a handler's exception, 400, 403, 404, 408, 411, 413, 414,
// 431, 501, 503), after which the connection closes unless the request was
// read to its end; the request log line (control characters escaped) and the
// per-route request counts; and writing a queued task's answer (SSE frames,
// or one JSON object with the status that fits) while watching for the
// client to hang up. Knows nothing of the engine or of what a route means.
#pragma once
#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/http_connections.h"
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

// Answers req with a queued task's events, turned into text by the
// responder. A stream goes out as SSE frames in a chunked body (HTTP/1.0: a
// body that ends with the connection); its status, 200, goes first, so a
// later error is an error event, counted in metrics as a stream error. One
// JSON object is built on this thread while the connection is watched, and
// sent with the status that fits the answer (e.g. 503 when the shutdown
// dropped the task, 500 when the engine failed); a client that resets the
// connection cancels the task (status 499, not sent). A client that
// finished sending before the answer is ready gets it written as it comes,
// status 200, so a write can tell whether it is still there.
void send_task_events(const httplib::Request& req, httplib::Response& res, std::shared_ptr<Task> task,
                      OpenAiResponder responder, Metrics& metrics);

class HttpTransport {
public:
    using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

    // options: listen address, allowed Host names, API key, CORS origin,
    // the connection limits and request log. Requests are counted into
    // metrics by route and status.
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
    // Serves until stop(); returns at once when stop() came first, and
    // within about a second after it otherwise (answers in progress get that
    // long to finish).
    void listen();
    // Any thread, also before listen().
    void stop();

private:
    Handler guarded(Handler handler);
    // Before routing, before the body is read: refusals, CORS, preflights
    // and the API key.
    httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res) const;
    bool authorized(const httplib::Request& req) const;
    // The refusals before routing (connection cap, Host, Origin, malformed
    // or oversized body headers); nullopt when the request may go on.
    std::optional<ApiError> refusal(const httplib::Request& req) const;
    bool host_allowed(const httplib::Request& req) const;

    const ServerOptions& options_;
    Metrics& metrics_;
    HttpListener server_;
    int port_ = -1;
};
