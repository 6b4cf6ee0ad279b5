// cpp-httplib set-up, checks before routing, error bodies and the streaming
// pump (see http_transport.h). A client that hangs up makes the pump's
// write fail (a stream) or its socket poll say so (one JSON object), which
// cancels the task, and the engine stops before its next forward pass.
#include "server/http_transport.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "profiles/errors.h"
#include "server/client_socket.h"

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
                                        "/",
                                        "/index.html"};
    for (const char* r : KNOWN)
        if (req.path == r) return r;
    if (req.path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
    return "other";
}

bool needs_auth(const std::string& path) {
    return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize" || path == "/metrics";
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
    if (!responder.streaming()) {
        ClientSocket client(req);
        std::string body;
        std::vector<TaskEvent> events;
        while (!responder.finished()) {
            if (!client.connected()) {
                task->cancel();
                res.status = 499;  // nginx's "client closed request": nothing goes out
                return;
            }
            task->wait_events(events, CLIENT_POLL);
            for (const TaskEvent& ev : events) body += responder.on_event(ev);
        }
        set_error_status(res, responder.status());
        res.set_content(body, "application/json");
        return;
    }
    struct Pump {
        std::shared_ptr<Task> task;
        OpenAiResponder responder;
        Metrics& metrics;
        bool started = false;
    };
    auto pump = std::make_shared<Pump>(Pump{task, std::move(responder), metrics});
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [pump](size_t, httplib::DataSink& sink) {
            std::string out;
            if (!pump->started) {
                pump->started = true;
                out = pump->responder.start();
            }
            std::vector<TaskEvent> events;
            for (;;) {
                // is_writable() also notices a peer that closed its end.
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
                pump->task->wait_events(events, CLIENT_POLL);
                for (const TaskEvent& ev : events) out += pump->responder.on_event(ev);
            }
        },
        [task](bool success) {
            if (!success) task->cancel();
        });
}

HttpTransport::HttpTransport(const ServerOptions& options, Metrics& metrics) : options_(options), metrics_(metrics) {
    size_t workers = std::max<size_t>(8, size_t(std::max(0, options_.max_queue)) + 8);
    server_.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
    server_.set_payload_max_length(options_.max_body_bytes);

    server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
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
    });

    server_.set_error_handler(
        httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty() || res.is_chunked_content_provider_)
                return httplib::Server::HandlerResponse::Unhandled;
            std::string message;
            std::string code;
            switch (res.status) {
            case 404:
                message = "Invalid URL (" + req.method + " " + req.path + ")";
                code = "unknown_url";
                break;
            case 413:
                message = "The request body is larger than the limit of " + std::to_string(options_.max_body_bytes) +
                          " bytes.";
                code = "request_too_large";
                break;
            case 414:
                message = "The request URI is too long.";
                break;
            default:
                message = "The request could not be handled (HTTP " + std::to_string(res.status) + ").";
            }
            send_error(res, ApiError(res.status, message, "", code));
            return httplib::Server::HandlerResponse::Handled;
        }));

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

HttpTransport::Handler HttpTransport::guarded(Handler handler) {
    return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
        try {
            handler(req, res);
        } catch (const ApiError& e) {
            send_error(res, e);
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

int HttpTransport::bind() {
    if (port_ > 0) return port_;
    if (options_.port == 0) {
        port_ = server_.bind_to_any_port(options_.host);
        if (port_ < 0) port_ = -1;
    } else if (server_.bind_to_port(options_.host, options_.port)) {
        port_ = options_.port;
    }
    if (port_ <= 0)
        throw MoeError("serve: cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                       " (address in use or not available)");
    return port_;
}

void HttpTransport::listen() {
    listening_.store(true);
    if (!stop_requested_.load()) server_.listen_after_bind();
    listening_.store(false);
}

void HttpTransport::stop() {
    stop_requested_.store(true);
    // A stop() just before listening would be lost: wait until it runs.
    while (listening_.load() && !server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    server_.stop();
}
