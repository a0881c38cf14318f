// The independent recomputation of one expert, from the bytes in the model file (read here,
// not through the arena) with the scalar reference formats, accumulated in double.
#pragma once

#include "gguf/gguf_file.h"
#include "verify/ref_quant.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace epq::ref {

// What llama.cpp's build_moe_ffn (llama-graph.cpp) puts between an expert's up/gate and down
// matmuls. The gated ones combine gate and up; the others act on up alone (no gate tensor).
enum class FfnOp {
    SwiGLU,     // silu(gate) * up
    SwiGLUOai,  // gpt-oss: clamped, silu(alpha x) with (up + 1)
    GeGLU,      // gelu(gate) * up, gelu through ggml's fp16 table
    ReGLU,      // relu(gate) * up
    SiLU,
    GELU,
    ReLU,
    ReLUSqr,
};

bool is_gated(FfnOp op);
std::string op_name(FfnOp op);

// How a layer's experts compute, beyond the weights: the activation and where the routing
// weight applies. Biases and a fused gate_up tensor are read with the expert's bytes.
struct ExpertRecipe {
    FfnOp op = FfnOp::SwiGLU;
    float alpha = 0.0f, limit = 0.0f;  // SwiGLUOai's parameters
    bool weight_before_ffn = false;    // llama4: the input is scaled by the routing weight
    std::string unsupported;           // non-empty: what the reference does not model, and so cannot judge

    std::string describe() const;
};

// The recipe llama.cpp builds for `layer` of this file, from the architecture (the pinned
// llama.cpp's build_moe_ffn calls) and the layer's tensors.
ExpertRecipe recipe_from_file(const GgufFile & file, int layer);

struct ExpertBytes {
    int gate_type = 0, up_type = 0, down_type = 0;
    int64_t n_embd = 0, n_ff = 0;
    bool has_gate = true;
    bool fused_gate_up = false;               // one ffn_gate_up_exps tensor: gate rows, then up rows
    std::vector<uint8_t> gate, up, down;      // one expert's matrices, rows contiguous
    std::vector<float> gate_b, up_b, down_b;  // its biases (ADD_ID), empty when the model has none
    std::string unsupported;                  // non-empty: why the reference cannot compute this expert

    bool has_bias() const { return !gate_b.empty() || !up_b.empty() || !down_b.empty(); }
    std::string types() const;
};

// Reads expert `expert` of `layer` straight from the file: separate or fused gate/up, down,
// and their biases.
ExpertBytes read_expert(const GgufFile & file, int layer, int expert);

struct Forward {
    std::vector<double> gate, up, h, down;  // gate and up after their biases; down before the routing weight
    double h_step = 0.0;                    // largest quantization step of h's activation blocks
    double down_absmax = 0.0;               // largest |weight| of the down projection
    std::vector<double> h_steps;            // quantization step of each h value's block
    std::vector<float> down_w;              // dequantized down projection, [n_embd][n_ff]
    int64_t n_embd = 0, n_ff = 0;
};

// One expert on input x (already scaled by the routing weight when the recipe says so).
// Requires e.unsupported and r.unsupported to be empty.
Forward forward(const ExpertBytes & e, const ExpertRecipe & r, const std::vector<float> & x, const Q8Rounding & q8);

// The activation between the matmuls, in double, from ggml-cpu's op definitions (vec.h, ops.cpp).
// `gate` is ignored by the ungated ops.
double activation(const ExpertRecipe & r, double gate, double up);

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
