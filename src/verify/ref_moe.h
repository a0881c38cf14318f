// The independent recomputation of one expert, from the bytes in the model file (read here,
// not through the arena) with the scalar reference formats, accumulated in double.
#pragma once

#include "gguf/gguf_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace epq::ref {

struct ExpertBytes {
    int gate_type = 0, up_type = 0, down_type = 0;
    int64_t n_embd = 0, n_ff = 0;
    std::vector<uint8_t> gate, up, down;  // one expert's matrices, rows contiguous
};

// Reads expert `expert` of `layer` straight from the file (separate gate/up/down tensors).
ExpertBytes read_expert(const GgufFile & file, int layer, int expert);

struct Forward {
    std::vector<double> gate, up, h, down;  // down is before the routing weight
    double h_step = 0.0;                    // largest quantization step of h's activation blocks
    double down_absmax = 0.0;               // largest |weight| of the down projection
    std::vector<double> h_steps;            // quantization step of each h value's block
    std::vector<float> down_w;              // dequantized down projection, [n_embd][n_ff]
    int64_t n_embd = 0, n_ff = 0;
};

Forward forward(const ExpertBytes & e, const std::vector<float> & x);

// The largest change in any output that flipping one quantized code of h by one step can make.
inline double one_flip_bound(const Forward & f, double routing_weight) {
    return std::abs(routing_weight) * f.h_step * f.down_absmax;
}

// Whether `diff` (observed output - reference output, n_embd values) is, within `tol`, exactly
// the effect of one quantized code of h moving by one step in one of the experts: that is
// +-w_k * step_i * column i of expert k's down projection, for some k and i.
bool explained_by_one_flip(const std::vector<const Forward *> & experts, const std::vector<double> & weights,
                           const std::vector<double> & diff, double tol);

}  // namespace epq::ref
