// llama.cpp's ggml-rpc-server (built from the pinned tree) on 127.0.0.1 for the --rpc tests.
#pragma once

#include "util/child_process.h"

#include <memory>
#include <string>

namespace epq::test {

// A port no one listens on now (the kernel picks it).
int free_port();

// A ggml-rpc-server offering its CPU only, running until the object goes.
class RpcServer {
public:
    RpcServer();
    std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

private:
    int port_ = 0;
    std::unique_ptr<BackgroundProcess> process_;
};

// One server, started and registered as a device (add_rpc_servers) once per test process.
std::string rpc_endpoint();

// Whether a GPU of this machine is among the model's devices (an RPC server's is not one).
bool local_gpu_visible();

}  // namespace epq::test
