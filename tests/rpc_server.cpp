#include "rpc_server.h"

#include "engine/model_devices.h"
#include "util/error.h"

#include <chrono>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace epq::test {

int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        throw Error("no free port on 127.0.0.1");
    }
    close(fd);
    return ntohs(a.sin_port);
}

RpcServer::RpcServer() {
    port_ = free_port();
    // Its CPU only: a GPU build's server would otherwise offer its GPU (the tests split across
    // a server's CPU and, in the GPU build, this process's GPU).
    process_ =
        std::make_unique<BackgroundProcess>(std::vector<std::string>{EPQ_RPC_SERVER_BINARY, "-H", "127.0.0.1", "-p",
                                                                     std::to_string(port_), "-t", "2", "-d", "CPU"},
                                            scratch_dir() + "/rpc-server-" + std::to_string(port_) + ".log");
    for (int i = 0; i < 200; ++i) {
        try {
            check_rpc_servers(endpoint());
            return;
        } catch (const Error &) {
            if (!process_->running()) {
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    throw Error("ggml-rpc-server did not start: " + process_->err());
}

std::string rpc_endpoint() {
    static RpcServer server;
    static const bool registered = (add_rpc_servers(server.endpoint()), true);
    (void)registered;
    return server.endpoint();
}

bool local_gpu_visible() {
    for (const ModelDevice & d : model_devices()) {
        if (!d.remote) {
            return true;
        }
    }
    return false;
}

}  // namespace epq::test
