// cpp-httplib set-up, checks before routing, error bodies and the streaming
// pump (see http_transport.h). A client that hangs up makes the pump's
// write fail (a stream), or its connection report a reset (one JSON
// object), which cancels the task, and the engine stops before its next
// forward pass. A client that only shut down its sending side cannot be told
// from one that is gone until something is written to it, so the answer
// then goes out as a body written as it comes, after one harmless byte
// (JSON whitespace, an SSE comment): a client that is gone answers it with
// a reset.
#include "server/http_transport.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
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
