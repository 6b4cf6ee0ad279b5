// The accept loop, the connection threads and ConnectionStream, the Stream
// that enforces the request deadline and the header and body limits (see
// http_connections.h).
#include "server/http_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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
