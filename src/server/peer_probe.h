// Whether the client of an HTTP request is still connected, for handlers that do not write until they are done
// (non-streamed completions). cpp-httplib 0.11 (Debian 12) gives a handler neither its socket nor a closed flag,
// so the probe finds the connection's socket once, by its two endpoints, among the process's open sockets
// (Linux: /proc/self/fd), and later peeks at it without consuming anything.
#pragma once

#include <string>

namespace offgrid::server {

class PeerProbe {
public:
    // The socket whose local port is local_port and whose peer is remote_addr:remote_port (as httplib reports
    // them). When none matches (another platform, or the connection is already gone), gone() is always false.
    PeerProbe(const std::string & remote_addr, int remote_port, int local_port);

    bool found() const { return fd_ >= 0; }
    // True once the peer has closed its end: the socket reads end-of-file (unread request bytes of a
    // pipelined next request are left in place) or reports an error.
    bool gone() const;

private:
    int fd_ = -1;
};

}  // namespace offgrid::server
