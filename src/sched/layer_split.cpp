#include "sched/layer_split.h"

#include <algorithm>

namespace epq {

std::vector<int> split_layers(int n_layer, int n_gpu_layers, const std::vector<float> & weights) {
    std::vector<int> out(static_cast<size_t>(n_layer) + 1, kCpuLayer);
    const int n_dev = static_cast<int>(weights.size());
    if (n_dev == 0 || n_layer < 0) {
        return out;
    }
    const int ngl = n_gpu_layers < 0 ? n_layer + 1 : n_gpu_layers;
    const int first = std::max(n_layer + 1 - ngl, 0);
    const int n_on_devices = std::min(ngl, n_layer + 1);
    // Split points: the running sum of the weights, normalized (llama.cpp computes them in float;
    // the same float arithmetic gives the same boundaries).
    std::vector<float> points(weights.size());
    float sum = 0.0f;
    bool all_zero = true;
    for (size_t i = 0; i < weights.size(); ++i) {
        all_zero = all_zero && weights[i] == 0.0f;
    }
    for (size_t i = 0; i < weights.size(); ++i) {
        sum += all_zero ? 1.0f : weights[i];
        points[i] = sum;
    }
    for (float & p : points) {
        p /= sum;
    }
    for (int il = first; il <= n_layer && il - first < n_on_devices; ++il) {
        const float at = static_cast<float>(il - first) / static_cast<float>(n_on_devices);
        const int dev = static_cast<int>(std::upper_bound(points.begin(), points.end(), at) - points.begin());
        out[static_cast<size_t>(il)] = std::min(dev, n_dev - 1);
    }
    return out;
}

std::string layer_ranges(const std::vector<int> & device_of_layer, int device) {
    const int n_layer = static_cast<int>(device_of_layer.size()) - 1;
    std::vector<std::string> parts;
    for (int il = 0; il < n_layer;) {
        if (device_of_layer[static_cast<size_t>(il)] != device) {
            ++il;
            continue;
        }
        int end = il;
        while (end + 1 < n_layer && device_of_layer[static_cast<size_t>(end) + 1] == device) {
            ++end;
        }
        parts.push_back(end == il ? std::to_string(il) : std::to_string(il) + "-" + std::to_string(end));
        il = end + 1;
    }
    if (n_layer >= 0 && device_of_layer[static_cast<size_t>(n_layer)] == device) {
        parts.push_back("the output layer");
    }
    std::string s;
    for (size_t i = 0; i < parts.size(); ++i) {
        s += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
    }
    return s.empty() ? "none" : s;
}

}  // namespace epq
