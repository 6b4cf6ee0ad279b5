// Finding a request's socket and polling it (see client_socket.h).
#include "server/client_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <string>

namespace {

// Port and numeric address of a socket address; port -1 for other families.
std::pair<int, std::string> port_and_address(const sockaddr_storage& a) {
    char text[INET6_ADDRSTRLEN] = "";
    if (a.ss_family == AF_INET) {
        const auto& in = reinterpret_cast<const sockaddr_in&>(a);
        ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
        return {ntohs(in.sin_port), text};
    }
    if (a.ss_family == AF_INET6) {
        const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
        ::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
        return {ntohs(in6.sin6_port), text};
    }
    return {-1, ""};
}

bool is_request_socket(int fd, const httplib::Request& req) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
        return false;
    auto [local_port, local_address] = port_and_address(local);
    auto [peer_port, peer_address] = port_and_address(peer);
    // cpp-httplib prints the address with getnameinfo, which may add "%scope".
    std::string remote = req.remote_addr.substr(0, req.remote_addr.find('%'));
    return local_port == req.local_port && peer_port == req.remote_port && peer_address == remote;
}

}  // namespace

ClientSocket::ClientSocket(const httplib::Request& req) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        std::string name = entry.path().filename().string();
        int fd = -1;
        if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
        if (is_request_socket(fd, req)) {
            fd_ = fd;
            return;
        }
    }
}

bool ClientSocket::connected() const {
    if (fd_ < 0) return true;
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return false;
    char c;
    ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);  // readable: a pipelined request, or the end
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}
