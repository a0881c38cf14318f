#include "engine/model_devices.h"

#include "engine/llama_session.h"
#include "util/error.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace epq {

namespace {

bool is_rpc(ggml_backend_dev_t dev) {
    return std::strcmp(ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev)), "RPC") == 0;
}

// Connects to HOST:PORT within a few seconds; "" when it can, else why not.
std::string reach(const std::string & endpoint) {
    const size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
        return "expected HOST:PORT";
    }
    const std::string host = endpoint.substr(0, colon), port = endpoint.substr(colon + 1);
    if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoi(port) > 65535) {
        return "the port '" + port + "' is not a port number";
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo * res = nullptr;
    if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
        return std::string("cannot resolve the host: ") + gai_strerror(rc);
    }
    std::string why = "no address";
    for (addrinfo * a = res; a; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            why = std::strerror(errno);
            continue;
        }
        int err = 0;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            err = errno;
            if (err == EINPROGRESS) {
                pollfd p{fd, POLLOUT, 0};
                const int n = poll(&p, 1, 5000);
                socklen_t len = sizeof(err);
                err = n == 0 ? ETIMEDOUT : getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ? errno : err;
            }
        }
        close(fd);
        if (err == 0) {
            freeaddrinfo(res);
            return "";
        }
        why = std::strerror(err);
    }
    freeaddrinfo(res);
    return why;
}

}  // namespace

std::vector<ModelDevice> model_devices() {
    std::vector<ModelDevice> rpc, gpus, igpus;
    for (ggml_backend_dev_t dev : gpu_devices()) {
        if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_IGPU) {
            if (igpus.empty() || ggml_backend_dev_backend_reg(dev) == ggml_backend_dev_backend_reg(igpus.back().dev)) {
                igpus.push_back({dev, false});
            }
        } else if (is_rpc(dev)) {
            rpc.push_back({dev, true});
        } else {
            ggml_backend_dev_props props;
            ggml_backend_dev_get_props(dev, &props);
            const bool seen = std::any_of(gpus.begin(), gpus.end(), [&](const ModelDevice & d) {
                ggml_backend_dev_props dp;
                ggml_backend_dev_get_props(d.dev, &dp);
                return props.device_id && dp.device_id && std::strcmp(props.device_id, dp.device_id) == 0;
            });
            if (!seen) {
                gpus.push_back({dev, false});
            }
        }
    }
    std::vector<ModelDevice> out = rpc;
    out.insert(out.end(), gpus.begin(), gpus.end());
    if (gpus.empty()) {
        out.insert(out.end(), igpus.begin(), igpus.end());
    }
    return out;
}

std::vector<std::string> check_rpc_servers(const std::string & servers) {
    std::vector<std::string> list;
    for (size_t at = 0; at <= servers.size();) {
        const size_t comma = std::min(servers.find(',', at), servers.size());
        if (comma > at) {
            list.push_back(servers.substr(at, comma - at));
        }
        at = comma + 1;
    }
    if (list.empty()) {
        throw Error("--rpc expects HOST:PORT of a ggml-rpc-server (several separated by commas)");
    }
    for (const auto & s : list) {
        if (const std::string why = reach(s); !why.empty()) {
            throw Error("--rpc " + s + ": " +
                        (why.rfind("expected", 0) == 0 || why.rfind("the port", 0) == 0
                             ? why
                             : "cannot reach an RPC server there (" + why +
                                   "); start llama.cpp's ggml-rpc-server on that machine (-H ADDRESS -p PORT) and "
                                   "check the address"));
        }
    }
    return list;
}

void add_rpc_servers(const std::string & servers) {
    const std::vector<std::string> list = check_rpc_servers(servers);
    gpu_devices();  // initializes ggml's backends
    ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
    auto * add = rpc ? reinterpret_cast<ggml_backend_reg_t (*)(const char *)>(
                           ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server"))
                     : nullptr;
    if (!add) {
        throw Error("--rpc: this build has no RPC backend (llama.cpp's GGML_RPC)");
    }
    for (const auto & s : list) {
        ggml_backend_reg_t reg = add(s.c_str());
        if (!reg) {
            throw Error("--rpc " + s + ": the server offers no device");
        }
        ggml_backend_register(reg);
    }
}

std::vector<float> parse_tensor_split(const std::string & text) {
    std::vector<float> out;
    if (text.empty()) {
        return out;
    }
    size_t at = 0;
    while (at <= text.size()) {
        const size_t end = std::min(text.find_first_of(",/", at), text.size());
        const std::string part = text.substr(at, end - at);
        char * stop = nullptr;
        errno = 0;
        const float w = part.empty() ? -1.0f : std::strtof(part.c_str(), &stop);
        if (part.empty() || *stop != '\0' || errno != 0 || !(w >= 0.0f) || w > 1e30f) {
            throw Error(
                "--tensor-split expects non-negative numbers separated by commas, one per device (e.g. 3,1); "
                "got '" +
                text + "'");
        }
        out.push_back(w);
        at = end + 1;
    }
    return out;
}

bool LayerPlacement::remote(int il) const {
    if (il < 0 || static_cast<size_t>(il) >= device_of_layer.size()) {
        return false;
    }
    const int d = device_of_layer[static_cast<size_t>(il)];
    return d != kCpuLayer && devices[static_cast<size_t>(d)].remote;
}

bool LayerPlacement::local_device(int il) const {
    if (il < 0 || static_cast<size_t>(il) >= device_of_layer.size()) {
        return false;
    }
    const int d = device_of_layer[static_cast<size_t>(il)];
    return d != kCpuLayer && !devices[static_cast<size_t>(d)].remote;
}

bool LayerPlacement::any_remote() const {
    for (size_t il = 0; il < device_of_layer.size(); ++il) {
        if (remote(static_cast<int>(il))) {
            return true;
        }
    }
    return false;
}

std::string LayerPlacement::remote_line() const {
    std::string s;
    for (size_t d = 0; d < devices.size(); ++d) {
        const std::string layers = layer_ranges(device_of_layer, static_cast<int>(d));
        if (!devices[d].remote || layers == "none") {
            continue;
        }
        const auto n_blocks = std::count(device_of_layer.begin(), device_of_layer.end() - 1, static_cast<int>(d));
        const bool several = n_blocks > 1;
        s += (s.empty() ? "" : "; ") +
             std::string(n_blocks == 0 ? ""
                         : several     ? "layers "
                                       : "layer ") +
             layers + " on " + ggml_backend_dev_name(devices[d].dev) + " (" +
             ggml_backend_dev_description(devices[d].dev) + ")";
    }
    return s;
}

std::string LayerPlacement::split_flag() const {
    std::string values, names;
    for (size_t i = 0; i < devices.size(); ++i) {
        char w[64];
        std::snprintf(w, sizeof(w), "%.0f",
                      static_cast<double>(weights[i]));  // exact: llama.cpp reads it back as float
        values += (i ? "," : "") + std::string(w);
        names += (i ? ", " : "") + std::string(ggml_backend_dev_name(devices[i].dev));
    }
    return "--tensor-split " + values + " (" + names + ")";
}

LayerPlacement place_layers(int n_layer, int n_gpu_layers, const std::vector<float> & tensor_split) {
    LayerPlacement p;
    p.devices = model_devices();
    const bool given = std::any_of(tensor_split.begin(), tensor_split.end(), [](float w) { return w != 0.0f; });
    for (size_t i = 0; i < p.devices.size(); ++i) {
        if (given) {
            p.weights.push_back(i < tensor_split.size() ? tensor_split[i] : 0.0f);
            continue;
        }
        // As llama.cpp: free memory, or the host's where a device reports none.
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(p.devices[i].dev, &free, &total);
        if (free == 0 && total == 0) {
            if (ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)) {
                ggml_backend_dev_memory(cpu, &free, &total);
            }
        }
        p.weights.push_back(static_cast<float>(free));
    }
    p.device_of_layer = split_layers(n_layer, n_gpu_layers, p.weights);
    return p;
}

}  // namespace epq
