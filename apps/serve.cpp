// `moe-server serve`: parses the flags, falls back to the demo model, runs
// the HTTP server and turns SIGINT / SIGTERM into a clean stop (exit 0).
// Signals are blocked in every thread and taken by one watcher thread with
// sigtimedwait, so no handler runs in signal context.
#include "apps/serve.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <optional>
#include <thread>

#include "apps/args.h"
#include "apps/cli.h"
#include "apps/demo_model.h"
#include "base/errors.h"
#include "engine/model/model_source.h"
#include "server/http_server.h"

namespace {

ServerOptions parse_serve_args(const std::vector<std::string>& words) {
    Args args(words);
    ServerOptions o;
    if (std::optional<ModelSource> source = parse_optional_model_flag(args)) o.model_dir = source->text;
    o.host = args.get("--host", o.host);
    if (o.host.empty()) throw MoeError("--host: empty (give an address: 127.0.0.1, ::1, 0.0.0.0 or ::)");
    o.port = int(args.get_int("--port", o.port, 0, 65535));
    if (std::optional<std::string> key = args.get("--api-key")) {
        if (key->empty())
            throw MoeError("--api-key: empty (an empty key would turn authentication off; leave the flag out to "
                           "serve without one)");
        o.api_key = *key;
    }
    o.ctx = int(args.get_int("--ctx", o.ctx, 16, 1 << 20));
    o.threads = int(args.get_int("--threads", o.threads, 0, 1024));
    o.max_queue = int(args.get_int("--max-queue", o.max_queue, 0, 1024));
    o.cors_origin = args.get("--cors-origin", "");
    o.allow_hosts = args.get_all("--allow-host");
    o.request_timeout_s = int(args.get_int("--request-timeout", o.request_timeout_s, 1, 3600));
    o.max_connections = int(args.get_int("--max-connections", o.max_connections, 1, 65536));
    o.max_client_connections = int(args.get_int("--max-client-connections", o.max_client_connections, 1, 65536));
    o.device = parse_device_flags(args);
    args.finish();
    return o;
}

}  // namespace

int serve_main(const std::vector<std::string>& words) {
    ServerOptions options = parse_serve_args(words);
    if (options.model_dir.empty()) {
        options.model_dir = demo_model_ensure();
        std::fputs(demo_model_banner(options.model_dir).c_str(), stderr);
    }

    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // inherited by every thread started below

    HttpServer server(options);
    int port = server.bind();
    std::fprintf(stderr, "moe-server: listening on %s (loading model '%s' from %s)\n",
                 http_url(options.host, port).c_str(), server.model_id().c_str(),
                 model_source_where(model_source_parse(options.model_dir.string())).c_str());

    std::atomic<bool> finished{false};
    std::thread watcher([&] {
        const timespec tick{0, 100 * 1000 * 1000};
        while (!finished.load()) {
            int sig = sigtimedwait(&signals, nullptr, &tick);
            if (sig == SIGINT || sig == SIGTERM) {
                std::fprintf(stderr, "moe-server: %s received, shutting down\n",
                             sig == SIGINT ? "SIGINT" : "SIGTERM");
                server.stop();
                return;
            }
        }
    });
    try {
        server.run();
    } catch (...) {
        finished.store(true);
        watcher.join();
        throw;
    }
    finished.store(true);
    watcher.join();
    std::fprintf(stderr, "moe-server: stopped\n");
    return 0;
}
