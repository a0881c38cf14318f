// Captures, through llama.cpp's eval callback, what each MoE layer saw and produced in one
// decode: its input, the experts the router selected, their routing weights and the layer's
// output. Observed nodes are sync points; the math is unchanged.
#pragma once

#include "ggml-backend.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace epq {

struct MoeLayerCapture {
    int64_t n_embd = 0;
    int64_t n_used = 0;
    int64_t n_tokens = 0;
    std::vector<float> input;    // [n_tokens][n_embd], the router's input
    std::vector<int32_t> ids;    // [n_tokens][n_used]
    std::vector<float> weights;  // [n_tokens][n_used], as they multiply the expert outputs
    std::vector<float> output;   // [n_tokens][n_embd], ffn_moe_out
};

class MoeCapture {
public:
    static bool callback(ggml_tensor * t, bool ask, void * user);
    void clear() { layers.clear(); }

    std::map<int, MoeLayerCapture> layers;
};

}  // namespace epq
