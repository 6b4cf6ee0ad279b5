// HttpServer: the OpenAI-compatible HTTP/SSE front of one Session, and the
// server's public entry point. It owns the routes and their three rooms: the
// transport (http_transport.h: cpp-httplib, auth, CORS, SSE), request -> task
// mapping (generation_task.h) and the engine thread with its bounded queue
// (engine_worker.h), plus the metrics and the embedded web UI. Requests are
// validated into native types on the HTTP worker threads; the engine thread
// never sees JSON. Must not do model math or read files other than the model
// folder.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/session.h"

struct ServerOptions {
    std::filesystem::path model_dir;
    std::string host = "127.0.0.1";
    int port = 8080;                          // 0 = any free port (see port())
    std::string api_key;                      // empty = no auth
    int ctx = 4096;                           // KV-cache positions
    int threads = 0;                          // engine threads; 0 = physical cores
    int max_queue = 8;                        // requests that may wait while one runs
    std::string cors_origin;                  // empty = no CORS headers; also an Origin accepted
    std::vector<std::string> allow_hosts;     // Host names accepted besides localhost and the bound address
    size_t max_body_bytes = size_t(8) << 20;  // larger bodies get 413
    int request_timeout_s = 30;               // headers and body of one request, total; then 408
    int max_connections = 256;                // open connections; more get 503
    int max_client_connections = 32;          // open connections from one address; more get 503
    bool log_requests = true;                 // one stderr line per request
    DeviceOptions device;                     // --emulate-gpu, --profile
};

// The URL of host:port's root, "http://127.0.0.1:8080/", an IPv6 address
// in brackets ("http://[::1]:8080/"): every URL the CLI prints or a client
// of the server builds comes from here.
std::string http_url(const std::string& host, int port);

class HttpServer {
public:
    // Ignores SIGPIPE process-wide: cpp-httplib writes to sockets without
    // MSG_NOSIGNAL, and a client that hangs up must not kill the server.
    // Fixes glibc's mmap threshold (256 KiB), so that the memory of a large
    // request goes back to the system when it is answered.
    explicit HttpServer(ServerOptions options);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds the listening socket; returns the port. Throws MoeError naming
    // the address when it cannot.
    int bind();
    int port() const;
    // Loads the model on the engine thread while already answering (/health
    // says 503 until ready), then serves until stop(). Throws MoeError when
    // the model failed to load.
    void run();
    // From any thread (a signal watcher, the engine thread): cancels the
    // running and waiting requests and makes run() return.
    void stop();
    bool ready() const;
    // The model id the API reports: the model folder's name.
    const std::string& model_id() const;

    // Runs fn on the engine thread between two requests and waits for it
    // (benchmarks compare the engine's own speed with the HTTP path this
    // way). Waits for the model to load first. Throws MoeError when the
    // server stops first, or what fn threw.
    void with_engine(const std::function<void(Session&)>& fn);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};
