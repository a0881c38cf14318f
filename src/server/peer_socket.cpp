#include "server/peer_socket.h"

#include <arpa/inet.h>
#include <cerrno>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace epq::server {

namespace {

bool same_endpoint(const sockaddr_storage & ss, const std::string & addr, int port) {
    char buf[INET6_ADDRSTRLEN] = {0};
    int p = 0;
    if (ss.ss_family == AF_INET) {
        const auto * in = reinterpret_cast<const sockaddr_in *>(&ss);
        inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
        p = ntohs(in->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const auto * in = reinterpret_cast<const sockaddr_in6 *>(&ss);
        inet_ntop(AF_INET6, &in->sin6_addr, buf, sizeof buf);
        p = ntohs(in->sin6_port);
    } else {
        return false;
    }
    return p == port && addr == buf;
}

}  // namespace

PeerSocket::PeerSocket(const std::string & remote_addr, int remote_port, int local_port) {
    DIR * d = opendir("/proc/self/fd");
    if (!d) {
        return;
    }
    while (dirent * e = readdir(d)) {
        const int fd = std::atoi(e->d_name);
        if (fd <= 2 || fd == dirfd(d)) {
            continue;
        }
        struct stat st {};
        if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
            continue;
        }
        sockaddr_storage peer{}, self{};
        socklen_t lp = sizeof peer, ls = sizeof self;
        if (getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &lp) != 0 ||
            getsockname(fd, reinterpret_cast<sockaddr *>(&self), &ls) != 0) {
            continue;
        }
        const int self_port = self.ss_family == AF_INET
                                  ? ntohs(reinterpret_cast<const sockaddr_in *>(&self)->sin_port)
                                  : ntohs(reinterpret_cast<const sockaddr_in6 *>(&self)->sin6_port);
        if (self_port == local_port && same_endpoint(peer, remote_addr, remote_port)) {
            fd_ = fd;
            break;
        }
    }
    closedir(d);
}

bool PeerSocket::closed() const {
    if (fd_ < 0) {
        return false;
    }
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) {
        return true;  // orderly shutdown by the peer
    }
    if (n < 0) {
        return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    }
    return false;  // data waiting (a pipelined request): still there
}

}  // namespace epq::server
