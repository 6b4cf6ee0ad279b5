// ClientSocket: the socket of the connection a request came on, to notice a
// client that hung up while its handler waits for the engine. cpp-httplib
// 0.11 does not hand the socket to handlers, so it is found among the
// process's open sockets by the connection's addresses (remote address and
// port, local port), which no other open connection shares. Only reads the
// socket's state; never reads, writes or closes it.
#pragma once
#include <httplib.h>

class ClientSocket {
public:
    // Call on the thread that handles req, while the connection is open.
    explicit ClientSocket(const httplib::Request& req);

    // False once the client closed or reset its end (a half-close counts as
    // hanging up, as for cpp-httplib's own is_writable). True while it is
    // there, or when its socket was not found.
    bool connected() const;

private:
    int fd_ = -1;
};
