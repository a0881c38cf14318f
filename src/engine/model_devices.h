// The devices llama.cpp puts a model's layers on, and which layers go where, known before the
// model is loaded: the pager pages the experts of the layers on this machine (the CPU and local
// GPUs) and leaves those of layers on a remote machine (llama.cpp's RPC backend, --rpc) where
// llama.cpp puts them.
#pragma once

#include "sched/layer_split.h"

#include "ggml-backend.h"

#include <string>
#include <vector>

namespace epq {

struct ModelDevice {
    ggml_backend_dev_t dev = nullptr;
    bool remote = false;  // an RPC server's device
};

// llama.cpp's device list for a model loaded with its default device selection and the layer
// split: RPC servers' devices first, then GPUs (one per device id), then integrated GPUs where
// there is no discrete one (llama_prepare_model_devices).
std::vector<ModelDevice> model_devices();

// Connects to each server of llama.cpp's --rpc list "HOST:PORT[,HOST:PORT...]" and returns the
// list; throws epq::Error naming one that cannot be reached (before llama.cpp's parser, which
// aborts the process on it).
std::vector<std::string> check_rpc_servers(const std::string & servers);

// llama.cpp's --rpc: registers the devices of each server of "HOST:PORT[,HOST:PORT...]". Each
// server is reached first (ggml's RPC client aborts the process on one it cannot reach). Throws
// epq::Error naming the server and what to do.
void add_rpc_servers(const std::string & servers);

// llama.cpp's --tensor-split "3,1" (or "3/1"): one non-negative weight per device; "" gives none.
// Throws epq::Error.
std::vector<float> parse_tensor_split(const std::string & text);

// Where the layers go under -ngl (and --tensor-split, as llama.cpp reads it: one weight per
// device of model_devices(), empty or all zero for llama.cpp's default, each device's free memory).
struct LayerPlacement {
    std::vector<ModelDevice> devices;
    std::vector<float> weights;        // the split: the user's, or each device's free memory
    std::vector<int> device_of_layer;  // split_layers(): blocks 0..n_layer-1, then the output layer

    bool remote(int il) const;
    bool any_remote() const;
    // On a GPU of this machine: llama.cpp copies the layer's weights into its memory at load.
    bool local_device(int il) const;
    // With more than one device the split depends on free memory, which moves: the load is given
    // these weights as its --tensor-split, so that llama.cpp places layers exactly as predicted.
    bool pin_split() const { return devices.size() > 1; }
    // "layers 3-4 and the output layer on RPC0 (127.0.0.1:50052)" per remote device, joined by "; ".
    std::string remote_line() const;
    // The split as llama.cpp's flag takes it, over the devices: "--tensor-split 3,1 (RPC0, Vulkan0)".
    std::string split_flag() const;
};

LayerPlacement place_layers(int n_layer, int n_gpu_layers, const std::vector<float> & tensor_split);

}  // namespace epq
