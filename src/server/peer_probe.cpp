#include "server/peer_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace offgrid::server {

namespace {

// Address and port of a socket address, in the text form httplib uses for remote_addr.
bool endpoint(const sockaddr_storage & a, std::string & addr, int & port) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
        const auto & v4 = reinterpret_cast<const sockaddr_in &>(a);
        if (inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof(buf)) == nullptr) return false;
        port = ntohs(v4.sin_port);
    } else if (a.ss_family == AF_INET6) {
        const auto & v6 = reinterpret_cast<const sockaddr_in6 &>(a);
        if (inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof(buf)) == nullptr) return false;
        port = ntohs(v6.sin6_port);
    } else {
        return false;
    }
    addr = buf;
    return true;
}

bool matches(int fd, const std::string & remote_addr, int remote_port, int local_port) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    std::string addr;
    int port = -1;
    if (getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0 || !endpoint(a, addr, port) || port != local_port) {
        return false;
    }
    len = sizeof(a);
    if (getpeername(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0 || !endpoint(a, addr, port)) return false;
    return port == remote_port && addr == remote_addr;
}

}  // namespace

PeerProbe::PeerProbe(const std::string & remote_addr, int remote_port, int local_port) {
    if (remote_port <= 0 || local_port <= 0) return;
    DIR * dir = opendir("/proc/self/fd");
    if (dir == nullptr) return;
    while (const dirent * e = readdir(dir)) {
        char * end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
        struct stat st {};
        if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        if (matches(static_cast<int>(fd), remote_addr, remote_port, local_port)) {
            fd_ = static_cast<int>(fd);
            break;
        }
    }
    closedir(dir);
}

bool PeerProbe::gone() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return false;  // nothing to read: still there
    if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return true;
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace offgrid::server
