// Whether the client of the request a handler thread is serving has gone away. cpp-httplib
// does not hand handlers their socket, so it is found once per request by its peer address
// among the process's sockets, then watched with a non-blocking peek.
#pragma once

#include <string>

namespace epq::server {

class PeerSocket {
public:
    PeerSocket(const std::string & remote_addr, int remote_port, int local_port);
    // True once the peer closed the connection (or it failed). Cheap: one recv(MSG_PEEK).
    bool closed() const;

private:
    int fd_ = -1;
};

}  // namespace epq::server
