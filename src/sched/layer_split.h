// Which device each layer of a model goes to under -ngl, as llama.cpp's layer split decides it:
// the last n_gpu_layers layers (the output layer counts as one, after the last block) go to the
// devices, in llama.cpp's device order, in contiguous runs sized by each device's weight (its
// share of --tensor-split, or of free memory). The pager needs this before llama.cpp loads the
// model: the experts of a layer on a remote machine (an RPC server) stay there, and only the
// other layers' experts are paged. Pure: no llama.cpp here.
#pragma once

#include <string>
#include <vector>

namespace epq {

constexpr int kCpuLayer = -1;

// Device index for layers 0..n_layer-1 and, last, the output layer (n_layer + 1 entries);
// kCpuLayer for a layer on the CPU. `n_gpu_layers` < 0 means every layer. `weights` holds one
// non-negative weight per device (empty: no device, every layer on the CPU); all zero splits
// evenly.
std::vector<int> split_layers(int n_layer, int n_gpu_layers, const std::vector<float> & weights);

// "0-2, 5 and the output layer": the layers on `device`, for messages ("none" when there are none).
std::string layer_ranges(const std::vector<int> & device_of_layer, int device);

}  // namespace epq
