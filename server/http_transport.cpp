// cpp-httplib set-up, checks before routing, error bodies and the streaming
// pump (see http_transport.h). A client that hangs up makes the pump's
// write fail (a stream), or its connection report a reset (one JSON
// object), which cancels the task, and the engine stops before its next
// forward pass. A client that only shut down its sending side cannot be told
// from one that is gone until something is written to it, so the answer
// then goes out as a body written as it comes, after one harmless byte
// (JSON whitespace, an SSE comment): a client that is gone answers it with
// a reset.
//
// The accept loop, the connection threads and ConnectionStream, the Stream
// that enforces the request deadline and the header and body limits.
#include "server/http_transport.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "base/errors.h"
#include "engine/text/work_budget.h"

using json = nlohmann::ordered_json;

namespace {

// How often a waiting response checks that its client is still there.
constexpr auto CLIENT_POLL = std::chrono::milliseconds(50);

// Routes as metrics labels: fixed strings only, so an unknown path cannot
// grow the label set.
std::string route_label(const httplib::Request& req) {
    static const char* const KNOWN[] = {"/v1/chat/completions",
                                        "/v1/completions",
                                        "/v1/models",
                                        "/v1/experts",
                                        "/health",
                                        "/metrics",
                                        "/tokenize",
                                        "/detokenize",
                                        "/apply-template",
                                        "/",
                                        "/index.html"};
    for (const char* r : KNOWN)
        if (req.path == r) return r;
    if (req.path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
    return "other";
}

bool needs_auth(const std::string& path) {
    return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize" || path == "/apply-template" ||
           path == "/metrics";
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return s;
}

// The host of a Host header, lower case, without the port ("[::1]" keeps
// its brackets).
std::string host_name(const std::string& host_header) {
    std::string h = lower(host_header);
    if (!h.empty() && h[0] == '[') return h.substr(0, h.find(']') + 1);
    return h.substr(0, h.find(':'));
}

// An address as a Host header names it: IPv6 in brackets, an IPv4-mapped
// one as plain IPv4.
std::string address_as_host(std::string addr) {
    if (addr.rfind("::ffff:", 0) == 0 && addr.find('.') != std::string::npos) addr = addr.substr(7);
    if (addr.find(':') == std::string::npos) return addr;
    std::string bracketed = lower(addr);
    bracketed.insert(bracketed.begin(), '[');
    return bracketed + ']';
}

bool has_body(const httplib::Request& req) {
    return req.has_header("Transfer-Encoding") ||
           (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}

// The methods whose body the library reads (for DELETE only with a
// Content-Length, so it is not one of them here). A body on any other
// method would be read as the next request.
bool takes_body(const std::string& method) {
    return method == "POST" || method == "PUT" || method == "PATCH";
}

// The connection closes after this response.
void close_after(httplib::Response& res) {
    if (HttpConnection* connection = http_connection()) connection->close_after_response();
    if (!res.has_header("Connection")) res.set_header("Connection", "close");
}

// A request answered before routing (a 401, a preflight), its body unread:
// the connection closes after the answer, so the body is not taken for the
// next request.
void close_if_unread(const httplib::Request& req, httplib::Response& res) {
    if (has_body(req)) close_after(res);
}

// The error a failed read of the request comes from, when a limit made it fail.
std::optional<ApiError> fault_error(const ServerOptions& o) {
    HttpConnection* connection = http_connection();
    switch (connection ? connection->fault() : ConnectionFault::NONE) {
    case ConnectionFault::TIMEOUT:
        return ApiError(
            408,
            "The request's headers and body did not arrive within " + std::to_string(o.request_timeout_s) + " seconds.",
            "", "request_timeout");
    case ConnectionFault::REQUEST_LINE_TOO_LONG:
        return ApiError(
            414, "The request line is longer than " + std::to_string(ConnectionLimits{}.max_line_bytes) + " bytes.", "",
            "uri_too_long");
    case ConnectionFault::HEADER_LINE_TOO_LONG:
        return ApiError(431,
                        "A header line is longer than " + std::to_string(ConnectionLimits{}.max_line_bytes) + " bytes.",
                        "", "headers_too_large");
    case ConnectionFault::TOO_MANY_HEADERS:
        return ApiError(431,
                        "The request has more than " + std::to_string(ConnectionLimits{}.max_headers) + " headers.", "",
                        "headers_too_large");
    case ConnectionFault::HEADERS_TOO_LARGE:
        return ApiError(
            431,
            "The request's headers are larger than " + std::to_string(ConnectionLimits{}.max_header_bytes) + " bytes.",
            "", "headers_too_large");
    case ConnectionFault::BODY_TOO_LARGE:
        return ApiError(413,
                        "The request body is larger than the limit of " + std::to_string(o.max_body_bytes) + " bytes.",
                        "", "request_too_large");
    case ConnectionFault::NONE:
        break;
    }
    return std::nullopt;
}

// The error handler: an OpenAI error body for the library's own errors
// (a handler's error already has its body).
httplib::Server::HandlerResponse library_error(const ServerOptions& o, const httplib::Request& req,
                                               httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    // Only an unknown route (404) comes after the request was read to its
    // end; after any other error of the library the connection closes, so
    // what follows is never taken for a request.
    if (res.status != 404) close_after(res);
    if (std::optional<ApiError> error = fault_error(o)) {
        send_error(res, *error);
        return httplib::Server::HandlerResponse::Handled;
    }
    std::string message;
    std::string code;
    switch (res.status) {
    case 400:
        // The request line did not parse (not METHOD TARGET HTTP/1.x,
        // or a method the library does not know), the library routes
        // no such method (CONNECT, TRACE), or it could not read the
        // headers or the chunks of the body.
        if (req.path.empty()) {
            message = "The request line is malformed (expected METHOD TARGET HTTP/1.1, a method the server knows).";
        } else if (req.method == "CONNECT" || req.method == "TRACE" || req.method == "PRI") {
            send_error(res, ApiError(501, "The method " + req.method + " is not supported.", "", "unsupported_method"));
            return httplib::Server::HandlerResponse::Handled;
        } else {
            message = "The request's headers or body are malformed.";
        }
        code = "invalid_request";
        break;
    case 404:
        message = "Invalid URL (" + req.method + " " + req.path + ")";
        code = "unknown_url";
        break;
    case 413:
        message = "The request body is larger than the limit of " + std::to_string(o.max_body_bytes) + " bytes.";
        code = "request_too_large";
        break;
    case 414:
        message = "The request line is longer than " + std::to_string(ConnectionLimits{}.max_line_bytes) + " bytes.";
        code = "uri_too_long";
        break;
    default:
        message = "The request could not be handled (HTTP " + std::to_string(res.status) + ").";
    }
    send_error(res, ApiError(res.status, message, "", code));
    return httplib::Server::HandlerResponse::Handled;
}

ConnectionLimits connection_limits(const ServerOptions& o) {
    ConnectionLimits limits;
    limits.request_timeout = std::chrono::seconds(o.request_timeout_s);
    limits.max_body_bytes = o.max_body_bytes;
    limits.max_connections = size_t(std::max(1, o.max_connections));
    limits.max_client_connections = size_t(std::max(1, o.max_client_connections));
    return limits;
}

}  // namespace

void send_json(httplib::Response& res, const json& j) {
    res.set_content(json_dump(j), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
    set_error_status(res, e.status);
    res.set_content(json_dump(api_error_json(e)), "application/json");
}

void set_error_status(httplib::Response& res, int status) {
    res.status = status;
    if (status == 503) res.set_header("Retry-After", "1");
    if (status == 401) res.set_header("WWW-Authenticate", "Bearer");
}

void send_task_events(const httplib::Request& req, httplib::Response& res, std::shared_ptr<Task> task,
                      OpenAiResponder responder, Metrics& metrics) {
    const bool stream = responder.streaming();
    HttpConnection* connection = http_connection();
    std::string prefix;  // a JSON answer's text so far
    if (!stream) {
        // Built here and sent with the status that fits, unless the client
        // finishes sending first: then only a write tells whether it is
        // still there, and the answer goes out as below.
        std::vector<TaskEvent> events;
        while (!responder.finished()) {
            if (connection && connection->gone()) {
                task->cancel();
                res.status = 499;  // nginx's "client closed request": nothing goes out
                return;
            }
            if (connection && connection->peer_finished_sending()) break;
            task->wait_events(events, CLIENT_POLL);
            for (const TaskEvent& ev : events) prefix += responder.on_event(ev);
        }
        if (responder.finished()) {
            set_error_status(res, responder.status());
            res.set_content(prefix, "application/json");
            return;
        }
    }
    struct Pump {
        std::shared_ptr<Task> task;
        OpenAiResponder responder;
        Metrics& metrics;
        std::string out;
        bool started = false;
        bool probed = false;
    };
    auto pump = std::make_shared<Pump>(Pump{task, std::move(responder), metrics, std::move(prefix), !stream});
    if (stream) {
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
    }
    const char* type = stream ? "text/event-stream" : "application/json";
    auto provider = [pump, stream](size_t, httplib::DataSink& sink) {
        std::string out = std::move(pump->out);
        pump->out.clear();
        if (!pump->started) {
            pump->started = true;
            out = pump->responder.start();
        }
        std::vector<TaskEvent> events;
        for (;;) {
            // is_writable() notices a reset or an error; a client that
            // finished sending gets the probe (see the file's comment).
            if (!sink.is_writable() || (!out.empty() && !sink.write(out.data(), out.size()))) {
                pump->task->cancel();
                return false;
            }
            out.clear();
            if (pump->responder.finished()) {
                if (pump->responder.status() != 200) pump->metrics.count_stream_error(pump->responder.status());
                sink.done();
                return true;
            }
            HttpConnection* connection = http_connection();
            if (!pump->probed && connection && connection->peer_finished_sending()) {
                pump->probed = true;
                out = stream ? ":\n\n" : " ";
                continue;
            }
            pump->task->wait_events(events, CLIENT_POLL);
            for (const TaskEvent& ev : events) out += pump->responder.on_event(ev);
        }
    };
    auto release = [task](bool success) {
        if (!success) task->cancel();
    };
    // HTTP/1.0 knows no chunked bodies: the body ends with the connection.
    if (req.version == "HTTP/1.0")
        res.set_content_provider(type, std::move(provider), std::move(release));
    else
        res.set_chunked_content_provider(type, std::move(provider), std::move(release));
}

HttpTransport::HttpTransport(const ServerOptions& options, Metrics& metrics)
    : options_(options), metrics_(metrics), server_(connection_limits(options)) {
    server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        httplib::Server::HandlerResponse handled = pre_route(req, res);
        if (handled == httplib::Server::HandlerResponse::Handled) close_if_unread(req, res);
        return handled;
    });
    // The library adds Keep-Alive unless the request asked to close; a
    // response that closes the connection says only that.
    server_.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
        if (res.get_header_value("Connection") == "close") res.headers.erase("Keep-Alive");
    });

    server_.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) { return library_error(options_, req, res); }));

    server_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, "Internal server error: " + what));
    });

    server_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        metrics_.count_request(route_label(req), res.status);
        if (options_.log_requests)
            std::fprintf(stderr, "moe-server: %s %s %s -> %d\n", escape_control(req.remote_addr).c_str(),
                         escape_control(req.method).c_str(), escape_control(req.path).c_str(), res.status);
    });
}

httplib::Server::HandlerResponse HttpTransport::pre_route(const httplib::Request& req, httplib::Response& res) const {
    if (std::optional<ApiError> error = refusal(req)) {
        send_error(res, *error);
        close_after(res);
        return httplib::Server::HandlerResponse::Handled;
    }
    if (!options_.cors_origin.empty()) {
        res.set_header("Access-Control-Allow-Origin", options_.cors_origin);
        res.set_header("Vary", "Origin");
    }
    if (req.method == "OPTIONS") {
        if (!options_.cors_origin.empty()) {
            res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
            res.set_header("Access-Control-Max-Age", "600");
        }
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
    }
    if (needs_auth(req.path) && !authorized(req)) {
        bool given = req.has_header("Authorization");
        send_error(res, ApiError(401,
                                 given ? "Incorrect API key provided."
                                       : "You didn't provide an API key. Send it as 'Authorization: Bearer "
                                         "KEY' (the server was started with --api-key).",
                                 "", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
}

HttpTransport::Handler HttpTransport::guarded(Handler handler) {
    return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
        try {
            handler(req, res);
        } catch (const ApiError& e) {
            send_error(res, e);
        } catch (const WorkBudgetError& e) {
            // A render or tokenization the server's stop ended: 503, as a queued request gets.
            send_error(res, e.end == WorkEnd::STOPPED ? ApiError(503, SHUTTING_DOWN) : ApiError(400, e.what()));
        } catch (const MoeError& e) {
            send_error(res, ApiError(400, e.what()));
        } catch (const std::exception& e) {
            send_error(res, ApiError(500, std::string("Internal server error: ") + e.what()));
        }
    };
}

void HttpTransport::get(const std::string& pattern, Handler handler) {
    server_.Get(pattern, guarded(std::move(handler)));
}

void HttpTransport::post(const std::string& pattern, Handler handler) {
    server_.Post(pattern, guarded(std::move(handler)));
}

bool HttpTransport::authorized(const httplib::Request& req) const {
    if (options_.api_key.empty()) return true;
    return req.get_header_value("Authorization") == "Bearer " + options_.api_key;
}

// Host names localhost in any form, the address the connection came in on
// (the bound address, or with 0.0.0.0 whichever of the machine's addresses
// the client used), or an --allow-host name. A request without Host (HTTP/1.0)
// passes: DNS rebinding needs a browser, and browsers always send it.
bool HttpTransport::host_allowed(const httplib::Request& req) const {
    if (!req.has_header("Host")) return true;
    std::string host = host_name(req.get_header_value("Host"));
    if (host == "localhost" || host == "127.0.0.1" || host == "[::1]") return true;
    bool wildcard = options_.host == "0.0.0.0" || options_.host == "::";
    if (host == address_as_host(req.local_addr) || (!wildcard && host == address_as_host(options_.host))) return true;
    return std::any_of(options_.allow_hosts.begin(), options_.allow_hosts.end(),
                       [&](const std::string& name) { return host_name(name) == host; });
}

std::optional<ApiError> HttpTransport::refusal(const httplib::Request& req) const {
    HttpConnection* connection = http_connection();
    if (connection && connection->over_cap())
        return ApiError(503,
                        "Too many connections: at most " + std::to_string(options_.max_client_connections) +
                            " from one address and " + std::to_string(options_.max_connections) +
                            " in all. Close idle connections and retry.",
                        "", "too_many_connections");
    if (req.get_header_value_count("Host") > 1 || !host_allowed(req))
        return ApiError(403,
                        "The Host header '" + req.get_header_value("Host") +
                            "' is not this server's (start it with --allow-host NAME to accept that name).",
                        "", "forbidden_host");
    // A browser names the page's origin; the server's own page, or the
    // --cors-origin one, may call it. curl and the SDKs send no Origin.
    if (req.has_header("Origin")) {
        std::string origin = lower(req.get_header_value("Origin"));
        bool own = origin == "http://" + lower(req.get_header_value("Host"));
        bool cors = options_.cors_origin == "*" || origin == lower(options_.cors_origin);
        if (req.get_header_value_count("Origin") > 1 || !(own || cors))
            return ApiError(403,
                            "Requests from the web page at '" + req.get_header_value("Origin") +
                                "' are not allowed (start the server with --cors-origin ORIGIN to allow one).",
                            "", "forbidden_origin");
    }
    size_t lengths = req.get_header_value_count("Content-Length");
    size_t codings = req.get_header_value_count("Transfer-Encoding");
    if (lengths > 1 || (lengths == 1 && codings > 0))
        return ApiError(
            400, "The request has more than one body length (Content-Length repeated or with Transfer-Encoding).", "",
            "invalid_request");
    // RFC 9112 6.1: a transfer coding the server does not understand is 501.
    // Only chunked alone is read (the library would read any other to EOF).
    if (codings > 1 || (codings == 1 && lower(req.get_header_value("Transfer-Encoding")) != "chunked"))
        return ApiError(501,
                        "Transfer-Encoding '" + req.get_header_value("Transfer-Encoding") +
                            (codings > 1 ? ", ..." : "") + "' is not supported: only 'chunked' is.",
                        "", "unsupported_transfer_encoding");
    if (has_body(req) && !takes_body(req.method))
        return ApiError(400, "A " + req.method + " request must not have a body.", "", "invalid_request");
    // RFC 9112 6.3: without either, a request has no body; the library would
    // read one to EOF.
    if (takes_body(req.method) && lengths == 0 && codings == 0)
        return ApiError(411, "A " + req.method + " request needs a Content-Length (or Transfer-Encoding: chunked).", "",
                        "length_required");
    if (lengths == 1) {
        const std::string length = req.get_header_value("Content-Length");
        bool digits = !length.empty() && length.size() <= 19 &&
                      std::all_of(length.begin(), length.end(), [](unsigned char c) { return std::isdigit(c); });
        if (!digits) return ApiError(400, "Invalid Content-Length '" + length + "'.", "", "invalid_request");
        if (std::stoull(length) > options_.max_body_bytes)
            return ApiError(
                413,
                "The request body is larger than the limit of " + std::to_string(options_.max_body_bytes) + " bytes.",
                "", "request_too_large");
    }
    return std::nullopt;
}

int HttpTransport::bind() {
    if (port_ > 0) return port_;
    port_ = server_.bind_port(options_.host, options_.port);
    if (port_ <= 0)
        throw MoeError("serve: cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                       " (address in use or not available)");
    return port_;
}

void HttpTransport::listen() {
    server_.serve();
}

void HttpTransport::stop() {
    server_.stop();
}

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Requests one connection may carry before it is closed.
constexpr int KEEP_ALIVE_MAX = 100;
// How often the accept loop looks at the stop flag and reaps threads.
constexpr milliseconds ACCEPT_TICK{200};
// After stop(): how long answers in progress may still be written.
constexpr milliseconds STOP_GRACE{1000};
// After our last response: how long we still drain what the client sends.
constexpr milliseconds LINGER{2000};
// A connection over a cap has this long to send the request we refuse.
constexpr milliseconds OVER_CAP_TIMEOUT{2000};
// Connections being refused at once; more are closed without an answer.
constexpr size_t MAX_REFUSING = 16;

// poll() one descriptor for `events`, retrying on EINTR; the revents, 0 on
// timeout, -1 on error.
int poll_one(int fd, short events, milliseconds timeout) {
    pollfd p{fd, events, 0};
    auto end = Clock::now() + timeout;
    for (;;) {
        auto left = std::chrono::duration_cast<milliseconds>(end - Clock::now()).count();
        int r = ::poll(&p, 1, int(std::max<long long>(0, left)));
        if (r > 0) return p.revents;
        if (r == 0) return 0;
        if (errno != EINTR) return -1;
    }
}

std::string numeric_address(const sockaddr_storage& a, int* port) {
    char text[INET6_ADDRSTRLEN] = "";
    if (a.ss_family == AF_INET) {
        const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
        ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
        if (port) *port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
        const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
        ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
        if (port) *port = ntohs(v6->sin6_port);
    }
    return text;
}

class ConnectionStream final : public httplib::Stream, public HttpConnection {
public:
    ConnectionStream(int fd, const ConnectionLimits& limits, bool over_cap, const std::atomic<bool>& stopping)
        : fd_(fd), limits_(limits), over_cap_(over_cap), stopping_(stopping) {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) remote_ = numeric_address(a, &remote_port_);
        len = sizeof a;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) local_ = numeric_address(a, &local_port_);
    }

    // Keep-alive: true once the next request's first bytes are here (a
    // pipelined one may already be buffered); false on timeout or EOF.
    bool wait_request(milliseconds timeout) {
        if (pos_ < len_) return true;
        int ev = poll_one(fd_, POLLIN, timeout);
        return ev > 0 && fill() > 0;
    }

    // Starts the clock and the counts of one request.
    void begin_request(milliseconds timeout) {
        deadline_ = Clock::now() + timeout;
        in_headers_ = true;
        line_cut_ = false;
        header_bytes_ = header_lines_ = line_length_ = line_bytes_ = body_bytes_ = 0;
    }

    bool closing() const { return fault_ != ConnectionFault::NONE || close_after_; }

    // HttpConnection
    ConnectionFault fault() const override { return fault_; }
    bool over_cap() const override { return over_cap_; }
    bool peer_finished_sending() const override { return peer_eof_ && !stopping_.load(); }
    bool gone() const override {
        int ev = poll_one(fd_, POLLRDHUP, milliseconds(0));
        if (ev > 0 && (ev & POLLRDHUP)) peer_eof_ = true;
        return ev > 0 && (ev & (POLLERR | POLLHUP | POLLNVAL));
    }
    void close_after_response() override { close_after_ = true; }

    // httplib::Stream
    bool is_readable() const override { return pos_ < len_ || poll_one(fd_, POLLIN, time_left()) > 0; }

    // Writable unless the client is gone: a reset or an error, or nothing
    // read for the write timeout. A client that only finished sending still
    // gets its answer.
    bool is_writable() const override {
        int ev = poll_one(fd_, POLLOUT | POLLRDHUP, limits_.write_timeout);
        if (ev <= 0 || (ev & (POLLERR | POLLHUP | POLLNVAL))) return false;
        if (ev & POLLRDHUP) peer_eof_ = true;
        return (ev & POLLOUT) != 0;
    }

    ssize_t read(char* ptr, size_t size) override {
        if (fault_ != ConnectionFault::NONE) return fault_read();
        if (pos_ == len_) {
            ssize_t got = fill();
            if (fault_ != ConnectionFault::NONE) return fault_read();
            if (got <= 0) return got;
        }
        size_t n = std::min(size, len_ - pos_);
        if (in_headers_) {
            n = count_header_bytes(n);
        } else if (body_bytes_ + n > limits_.max_body_bytes) {
            fault_ = ConnectionFault::BODY_TOO_LARGE;
            return -1;
        } else {
            body_bytes_ += n;
        }
        std::memcpy(ptr, buffer_ + pos_, n);
        pos_ += n;
        return ssize_t(n);
    }

    ssize_t write(const char* ptr, size_t size) override {
        size_t done = 0;
        while (done < size) {
            ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                done += size_t(n);
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                int ev = poll_one(fd_, POLLOUT, limits_.write_timeout);
                if (ev <= 0 || (ev & (POLLERR | POLLHUP | POLLNVAL))) return -1;
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else {
                return -1;
            }
        }
        return ssize_t(done);
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        ip = remote_;
        port = remote_port_;
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        ip = local_;
        port = local_port_;
    }
    socket_t socket() const override { return fd_; }

private:
    milliseconds time_left() const {
        return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline_ - Clock::now()));
    }

    // Refills the empty buffer within the request's deadline: bytes read, 0
    // at EOF, -1 on error or timeout.
    ssize_t fill() {
        pos_ = len_ = 0;
        int ev = poll_one(fd_, POLLIN, time_left());
        if (ev == 0) {
            fault_ = ConnectionFault::TIMEOUT;
            return -1;
        }
        if (ev < 0) return -1;
        ssize_t n;
        do {
            n = ::recv(fd_, buffer_, sizeof buffer_, 0);
        } while (n < 0 && errno == EINTR);
        if (n == 0) peer_eof_ = true;
        if (n > 0) len_ = size_t(n);
        return n;
    }

    // The read after a limit was hit. While the request line is read, the
    // first such read ends the line (0, as at EOF): the library then answers
    // the request (its 414 for a line over its limit, else 400), and the
    // error handler names the fault. Every other one fails.
    ssize_t fault_read() {
        if (in_headers_ && header_lines_ == 0 && !line_cut_) {
            line_cut_ = true;
            return 0;
        }
        return -1;
    }

    // Counts up to n buffered header bytes; stops after the empty line that
    // ends the headers, so the body's count starts there, or after the byte
    // that hits a limit. Returns how many bytes may be handed out.
    size_t count_header_bytes(size_t n) {
        for (size_t i = 0; i < n; i++) {
            char c = buffer_[pos_ + i];
            if (++header_bytes_ > limits_.max_header_bytes)
                fault_ = ConnectionFault::HEADERS_TOO_LARGE;
            else if (++line_bytes_ > limits_.max_line_bytes)
                fault_ =
                    header_lines_ == 0 ? ConnectionFault::REQUEST_LINE_TOO_LONG : ConnectionFault::HEADER_LINE_TOO_LONG;
            if (fault_ != ConnectionFault::NONE) return i + 1;
            if (c == '\n') {
                if (line_length_ == 0) {
                    in_headers_ = false;
                    return i + 1;
                }
                line_length_ = line_bytes_ = 0;
                if (++header_lines_ > limits_.max_headers + 1) {
                    fault_ = ConnectionFault::TOO_MANY_HEADERS;  // + request line
                    return i + 1;
                }
            } else if (c != '\r') {
                line_length_++;
            }
        }
        return n;
    }

    int fd_;
    const ConnectionLimits& limits_;
    bool over_cap_;
    const std::atomic<bool>& stopping_;
    std::string remote_, local_;
    int remote_port_ = -1, local_port_ = -1;
    char buffer_[16384];
    size_t pos_ = 0, len_ = 0;
    Clock::time_point deadline_ = Clock::now();
    bool in_headers_ = true;
    bool line_cut_ = false;  // fault_read() ended the request line
    // line_length_ without CR and LF (0 at the empty line), line_bytes_ with them.
    size_t header_bytes_ = 0, header_lines_ = 0, line_length_ = 0, line_bytes_ = 0, body_bytes_ = 0;
    ConnectionFault fault_ = ConnectionFault::NONE;
    mutable bool peer_eof_ = false;
    bool close_after_ = false;
};

thread_local HttpConnection* t_connection = nullptr;

// Ends a connection so the client reads our last response rather than a
// reset: stop sending, drain what still arrives for a moment (stop() cuts
// it short by shutting the reading side). The caller closes.
void drain_before_close(int fd) {
    ::shutdown(fd, SHUT_WR);
    char sink[16384];
    auto end = Clock::now() + LINGER;
    while (Clock::now() < end) {
        int ev = poll_one(fd, POLLIN, std::chrono::duration_cast<milliseconds>(end - Clock::now()));
        if (ev <= 0 || ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0) break;
    }
}

}  // namespace

HttpConnection* http_connection() {
    return t_connection;
}

HttpListener::HttpListener(ConnectionLimits limits) : limits_(limits) {
    set_payload_max_length(limits_.max_body_bytes);
    set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(limits_.keep_alive_timeout).count());
    set_keep_alive_max_count(KEEP_ALIVE_MAX);
}

HttpListener::~HttpListener() {
    stop();
    reap(true);
    int fd = svr_sock_.exchange(INVALID_SOCKET);
    if (fd != INVALID_SOCKET) ::close(fd);
}

int HttpListener::bind_port(const std::string& host, int port) {
    int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
    // The library listens with a backlog of 5; listen() again raises it.
    if (bound > 0 && ::listen(svr_sock_, SOMAXCONN) != 0) return -1;
    return bound;
}

void HttpListener::serve() {
    int listen_fd = svr_sock_;
    while (!stopping_.load() && listen_fd != INVALID_SOCKET) {
        int ev = poll_one(listen_fd, POLLIN, ACCEPT_TICK);
        reap(false);
        if (ev > 0 && !stopping_.load()) accept_one(listen_fd);
    }
    // Readers have been shut down by stop(); answers in progress get a grace.
    auto end = Clock::now() + STOP_GRACE;
    for (;;) {
        {
            std::lock_guard lock(mutex_);
            bool all_done =
                std::all_of(connections_.begin(), connections_.end(), [](const auto& c) { return c->done.load(); });
            if (all_done) break;
        }
        if (Clock::now() >= end) {
            shutdown_connections(SHUT_RDWR);
            break;
        }
        std::this_thread::sleep_for(milliseconds(10));
    }
    reap(true);
}

void HttpListener::accept_one(int listen_fd) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
        // Out of descriptors: give the running connections a moment.
        if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(milliseconds(10));
        return;
    }
    std::string client = numeric_address(addr, nullptr);
    std::lock_guard lock(mutex_);
    size_t open = 0, from_client = 0, refusing = 0;
    for (const auto& c : connections_) {
        if (c->done.load()) continue;
        if (c->over_cap) {
            refusing++;
            continue;
        }
        open++;
        if (c->client == client) from_client++;
    }
    bool over_cap = open >= limits_.max_connections || from_client >= limits_.max_client_connections;
    if (stopping_.load() || (over_cap && refusing >= MAX_REFUSING)) {
        ::close(fd);
        return;
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->client = client;
    c->over_cap = over_cap;
    Connection& ref = *c;
    connections_.push_back(std::move(c));
    ref.thread = std::thread([this, &ref] { run_connection(ref); });
}

void HttpListener::run_connection(Connection& c) {
    int fd = c.fd;
    {
        ConnectionStream stream(fd, limits_, c.over_cap, stopping_);
        t_connection = &stream;
        int left = c.over_cap ? 1 : KEEP_ALIVE_MAX;
        while (left-- > 0 && !stopping_.load()) {
            if (!stream.wait_request(c.over_cap ? OVER_CAP_TIMEOUT : limits_.keep_alive_timeout)) break;
            stream.begin_request(c.over_cap ? OVER_CAP_TIMEOUT : limits_.request_timeout);
            bool http10 = false;
            bool closed = false;
            bool ok = process_request(stream, left == 0, closed, [&](httplib::Request& req) {
                http10 = req.version == "HTTP/1.0";
                // Bodies are bytes to the handlers: no form or multipart parsing.
                req.headers.erase("Content-Type");
            });
            // HTTP/1.0: one request per connection, its body ends with the close.
            if (!ok || closed || http10 || stream.closing()) break;
        }
        t_connection = nullptr;
    }
    drain_before_close(fd);
    {
        std::lock_guard lock(mutex_);
        c.fd = -1;  // stop() no longer touches it
    }
    ::close(fd);
    c.done.store(true);
}

void HttpListener::reap(bool all) {
    std::list<std::unique_ptr<Connection>> ended;
    {
        std::lock_guard lock(mutex_);
        for (auto it = connections_.begin(); it != connections_.end();) {
            if (all || (*it)->done.load()) {
                ended.push_back(std::move(*it));
                it = connections_.erase(it);
            } else {
                ++it;
            }
        }
    }
    for (auto& c : ended)
        if (c->thread.joinable()) c->thread.join();
}

void HttpListener::shutdown_connections(int how) {
    std::lock_guard lock(mutex_);
    for (const auto& c : connections_)
        if (c->fd >= 0) ::shutdown(c->fd, how);
}

void HttpListener::stop() {
    {
        std::lock_guard lock(mutex_);
        stopping_.store(true);
        int fd = svr_sock_;
        if (fd != INVALID_SOCKET) ::shutdown(fd, SHUT_RDWR);
    }
    // Idle and slow readers see the end of their input at once; answers
    // being written go on until serve()'s grace ends.
    shutdown_connections(SHUT_RD);
}
