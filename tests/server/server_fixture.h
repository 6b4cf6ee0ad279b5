// Test fixture for the HTTP tests: runs the real moe-server binary as a
// child process on a free loopback port, waits for /health, and stops it
// with SIGTERM. Also small helpers to talk to it (JSON requests, metrics,
// and a raw TCP connection for what an HTTP client will not send).
#pragma once
#include <httplib.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/openai.h"

class ServerProcess {
public:
    // model empty: no --model (the demo model). env: extra environment.
    ServerProcess(const std::filesystem::path& model, std::vector<std::string> extra_args = {},
                  std::map<std::string, std::string> env = {});
    ~ServerProcess();
    ServerProcess(const ServerProcess&) = delete;
    ServerProcess& operator=(const ServerProcess&) = delete;

    int port() const { return port_; }
    pid_t pid() const { return pid_; }
    // A client with generous timeouts (tests never assert on speed).
    httplib::Client client() const;
    // Sends `sig` and waits for the exit; returns the exit status (-1 when
    // it died of a signal).
    int stop(int sig = 15);
    // What the server printed on stdout and stderr so far.
    std::string log() const;

private:
    bool start_once(const std::filesystem::path& model, const std::vector<std::string>& extra,
                    const std::map<std::string, std::string>& env);
    pid_t pid_ = -1;
    int port_ = 0;
    std::filesystem::path log_path_;
    int exit_status_ = 0;
};

// POST a JSON body; parses the reply when it is JSON.
struct JsonReply {
    int status = 0;
    nlohmann::json body;
    std::string raw;
    httplib::Headers headers;
};
JsonReply post_json(httplib::Client& client, const std::string& path, const nlohmann::json& body,
                    const httplib::Headers& headers = {});
JsonReply post_raw(httplib::Client& client, const std::string& path, const std::string& body,
                   const std::string& content_type = "application/json", const httplib::Headers& headers = {});
JsonReply get_json(httplib::Client& client, const std::string& path, const httplib::Headers& headers = {});

// The value of one sample line of /metrics ("name{labels}" exactly as
// printed, or a bare name); -1 when absent.
double metric_value(httplib::Client& client, const std::string& sample);

// A raw TCP connection to 127.0.0.1:port, for malformed, slow, pipelined or
// half-closed requests.
class RawConnection {
public:
    explicit RawConnection(int port);
    ~RawConnection();
    RawConnection(const RawConnection&) = delete;
    RawConnection& operator=(const RawConnection&) = delete;

    // Sends all of bytes; false once the server has closed or reset.
    bool send(const std::string& bytes);
    void shutdown_write();
    // Whether the server sent something or closed within timeout.
    bool readable(std::chrono::milliseconds timeout);
    // Everything the server sends until it closes the connection, or until
    // timeout passes (generous: it catches a hang).
    std::string read_until_close(std::chrono::milliseconds timeout = std::chrono::seconds(60));
    // True when the last read_until_close() ended with the server's close.
    bool closed() const { return closed_; }

private:
    int fd_ = -1;
    bool closed_ = false;
};

// How many times needle occurs in text.
size_t count_of(const std::string& text, const std::string& needle);

// The ApiError f() throws (a request parse), or status 0 when it did not throw.
template <class F>
ApiError error_of(F&& f) {
    try {
        f();
    } catch (const ApiError& e) {
        return e;
    }
    return ApiError(0, "no error");
}

// A free TCP port on 127.0.0.1 right now (it may be taken again later).
int free_port();

// Resident set of a process in KiB, from /proc/PID/status; -1 when unreadable.
long process_rss_kib(pid_t pid);

// Polls until pred() holds; false after a generous deadline (it catches a
// hang, it does not measure speed).
template <class Pred>
bool eventually(Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}
