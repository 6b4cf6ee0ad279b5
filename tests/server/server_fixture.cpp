// The moe-server child process and HTTP helpers for the server and client
// tests (see server_fixture.h).
#include "server_fixture.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "support/test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        ::close(fd);
        throw std::runtime_error("cannot bind a loopback port");
    }
    int port = ntohs(addr.sin_port);
    ::close(fd);
    return port;
}

ServerProcess::ServerProcess(const fs::path& model, std::vector<std::string> extra,
                             std::map<std::string, std::string> env) {
    std::signal(SIGPIPE, SIG_IGN);
    log_path_ = test_temp_dir("server") / "server.log";
    for (int attempt = 0; attempt < 5; attempt++)
        if (start_once(model, extra, env)) return;
    throw std::runtime_error("moe-server did not become healthy; log:\n" + log());
}

bool ServerProcess::start_once(const fs::path& model, const std::vector<std::string>& extra,
                               const std::map<std::string, std::string>& env) {
    port_ = free_port();
    std::vector<std::string> args = {moe_server_binary().string(), "serve", "--port", std::to_string(port_)};
    if (!model.empty()) {
        args.push_back("--model");
        args.push_back(model.string());
    }
    args.insert(args.end(), extra.begin(), extra.end());
    // Everything the child needs is built before fork(): only
    // async-signal-safe calls happen between fork() and exec().
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; e++) {
        std::string entry = *e;
        if (!env.count(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string log_file = log_path_.string();

    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            ::dup2(fd, 1);
            ::dup2(fd, 2);
        }
        ::execve(argv[0], argv.data(), envp.data());
        ::_exit(127);
    }
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(1, 0);
    c.set_read_timeout(5, 0);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            if (log().find("cannot listen") != std::string::npos) return false;  // port taken meanwhile: retry
            throw std::runtime_error("moe-server exited during start-up; log:\n" + log());
        }
        auto res = c.Get("/health");
        if (res && res->status == 200) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stop(SIGKILL);
    throw std::runtime_error("moe-server did not become healthy in 5 minutes; log:\n" + log());
}

ServerProcess::~ServerProcess() {
    if (pid_ > 0) stop(SIGTERM);
}

httplib::Client ServerProcess::client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(10, 0);
    c.set_read_timeout(300, 0);
    c.set_write_timeout(60, 0);
    return c;
}

int ServerProcess::stop(int sig) {
    if (pid_ <= 0) return exit_status_;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return exit_status_;
}

std::string ServerProcess::log() const {
    try {
        return read_file(log_path_);
    } catch (const std::exception&) {
        return "";
    }
}

namespace {
JsonReply to_reply(const httplib::Result& res) {
    JsonReply r;
    if (!res) return r;
    r.status = res->status;
    r.raw = res->body;
    r.headers = res->headers;
    r.body = json::parse(res->body, nullptr, false);
    return r;
}
}  // namespace

JsonReply post_raw(httplib::Client& client, const std::string& path, const std::string& body,
                   const std::string& content_type, const httplib::Headers& headers) {
    return to_reply(client.Post(path.c_str(), headers, body, content_type.c_str()));
}

JsonReply post_json(httplib::Client& client, const std::string& path, const json& body,
                    const httplib::Headers& headers) {
    return post_raw(client, path, body.dump(), "application/json", headers);
}

JsonReply get_json(httplib::Client& client, const std::string& path, const httplib::Headers& headers) {
    return to_reply(client.Get(path.c_str(), headers));
}

double metric_value(httplib::Client& client, const std::string& sample) {
    auto res = client.Get("/metrics");
    if (!res || res->status != 200) return -1;
    std::string prefix = sample + " ";
    size_t pos = 0;
    const std::string& text = res->body;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        if (text.compare(pos, prefix.size(), prefix) == 0)
            return std::stod(text.substr(pos + prefix.size(), end - pos - prefix.size()));
        pos = end + 1;
    }
    return -1;
}

RawConnection::RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(uint16_t(port));
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        throw std::runtime_error("cannot connect to port " + std::to_string(port));
}

RawConnection::~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
}

bool RawConnection::send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
        if (n <= 0) return false;
        done += size_t(n);
    }
    return true;
}

void RawConnection::shutdown_write() {
    ::shutdown(fd_, SHUT_WR);
}

bool RawConnection::readable(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, int(timeout.count())) > 0;
}

std::string RawConnection::read_until_close(std::chrono::milliseconds timeout) {
    std::string out;
    closed_ = false;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    while (std::chrono::steady_clock::now() < deadline) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (!readable(std::max(left, std::chrono::milliseconds(1)))) continue;
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) {
            closed_ = true;
            break;
        }
        out.append(buf, size_t(n));
    }
    return out;
}

size_t count_of(const std::string& text, const std::string& needle) {
    size_t count = 0;
    for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size()))
        count++;
    return count;
}

long process_rss_kib(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}
