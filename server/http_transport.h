// HTTP transport: the cpp-httplib server and everything about the wire. The
// connections, their limits and the request deadline (HttpListener, below);
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
//
// The accept side of the HTTP server: the listening socket, one thread per
// connection, and the wire limits cpp-httplib 0.11 cannot enforce itself.
//
// One design: cpp-httplib (Debian's 0.11.4, a shared library) parses the
// requests, routes them and writes the responses (Server::process_request);
// everything around it is ours. Our accept loop polls the listening socket,
// counts the open connections in a table (all, and per client address) and
// starts a thread for each; a connection over a cap gets one request read
// and answered 503, then is closed. The thread runs the keep-alive loop over
// ConnectionStream, a Stream that keeps its read buffer for the life of the
// connection (so pipelined requests are all answered), gives each request a
// total deadline for its headers and body (not per read), counts header
// lines and bytes and the body's bytes as they cross the wire (chunk framing
// included, so chunked bodies obey the same limit), and treats a client that
// half-closes as one that still listens (but not while stop() is closing
// the connections: their reading side is shut by us then, not by the
// client). A limit hit fails the library's read (one hit while the request
// line is read ends that line instead, so the library still answers it);
// the request's handlers learn why from http_connection() (this thread's
// connection) and answer 408, 413, 414 or 431, and the connection is closed
// after the response. Bodies reach the handlers as bytes: the request's
// Content-Type is dropped before routing, so the library never applies its
// form (8 KiB) or multipart parsing to them. Closing lingers: our side shuts
// down writing and drains what the client still sends for a moment, so the
// client reads the error instead of a reset. stop() shuts the reading side
// of every connection (idle and slow clients end at once, answers in
// progress still go out), gives them a short grace, then shuts them down
// entirely.
// Knows nothing of routes, JSON or the engine.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <httplib.h>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/engine_worker.h"

// One limit for a line of the request head: the library's limits on the
// request line (then 414) and on a header line.
static_assert(CPPHTTPLIB_REQUEST_URI_MAX_LENGTH == CPPHTTPLIB_HEADER_MAX_LENGTH);

struct ConnectionLimits {
    std::chrono::milliseconds request_timeout{30000};      // headers and body of one request, total
    std::chrono::milliseconds keep_alive_timeout{5000};    // idle time between requests
    std::chrono::milliseconds write_timeout{10000};        // a client that reads nothing this long is dropped
    size_t max_header_bytes = size_t(64) << 10;            // request line and headers
    size_t max_line_bytes = CPPHTTPLIB_HEADER_MAX_LENGTH;  // one line of them, CRLF included (the library's own)
    size_t max_headers = 100;                              // header lines
    size_t max_body_bytes = size_t(8) << 20;               // as sent, chunk framing included
    size_t max_connections = 256;                          // open connections, all clients
    size_t max_client_connections = 32;                    // open connections from one address
};

// Why the library's read of a request failed, when a limit made it fail.
enum class ConnectionFault {
    NONE,
    TIMEOUT,
    REQUEST_LINE_TOO_LONG,
    HEADER_LINE_TOO_LONG,
    TOO_MANY_HEADERS,
    HEADERS_TOO_LARGE,
    BODY_TOO_LARGE
};

// What a handler may learn of, and ask of, the connection its thread serves.
class HttpConnection {
public:
    virtual ConnectionFault fault() const = 0;
    // The connection was over a cap: its one request must be refused.
    virtual bool over_cap() const = 0;
    // The client shut down its sending side (or is gone; only a write tells).
    // False while the server stops (it shuts the reading side itself then).
    virtual bool peer_finished_sending() const = 0;
    // Looks at the socket now: true when the client reset the connection or
    // it failed. A client that only finished sending is not gone (it marks
    // peer_finished_sending()).
    virtual bool gone() const = 0;
    // Close the connection after this response (the body was not read).
    virtual void close_after_response() = 0;

protected:
    ~HttpConnection() = default;
};

// The connection the calling thread serves; nullptr outside one.
HttpConnection* http_connection();

class HttpListener : public httplib::Server {
public:
    explicit HttpListener(ConnectionLimits limits);
    ~HttpListener() override;

    // Binds host:port (0 = any free port) with a listen backlog of
    // SOMAXCONN; returns the port, or -1.
    int bind_port(const std::string& host, int port);
    // Accepts and serves until stop(); returns once every connection thread
    // has ended. Returns at once when stop() came first.
    void serve();
    // Any thread, also before serve().
    void stop();

private:
    struct Connection {
        int fd;
        std::string client;  // numeric address
        bool over_cap;
        std::atomic<bool> done{false};
        std::thread thread;
    };
    void accept_one(int listen_fd);
    void run_connection(Connection& c);
    void reap(bool all);
    void shutdown_connections(int how);

    const ConnectionLimits limits_;
    std::mutex mutex_;  // guards connections_, stopping_ changes
    std::list<std::unique_ptr<Connection>> connections_;
    std::atomic<bool> stopping_{false};
};

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
