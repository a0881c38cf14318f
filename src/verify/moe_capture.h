// Captures, through llama.cpp's eval callback, what each MoE layer saw and produced in one
// decode: its input, the experts the router selected, their routing weights and the layer's
// output. Observed nodes are sync points; the math is unchanged.
#pragma once

#include "ggml-backend.h"
#include "verify/ref_moe.h"

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

    // Every named ffn_moe_* node of the layer's graph (seen when the scheduler asks whether to
    // observe it; not observed, so the computation is not split there): what the experts did.
    struct Node {
        int op = 0;
        int32_t params[4] = {0, 0, 0, 0};
        int src0_op = 0;
    };
    std::map<std::string, Node> nodes;

    // The expert recipe this layer's graph shows (the activation and its parameters, where the
    // routing weight applies); recipe.unsupported says what the reference cannot recompute.
    ref::ExpertRecipe recipe() const;
};

class MoeCapture {
public:
    static bool callback(ggml_tensor * t, bool ask, void * user);
    void clear() { layers.clear(); }

    std::map<int, MoeLayerCapture> layers;
};

// How this build's CPU backend rounds Q8_0/Q8_1 activations (see ref::Q8Rounding): decided by
// the SIMD code ggml-cpu was compiled with.
ref::Q8Rounding cpu_q8_rounding();

}  // namespace epq
