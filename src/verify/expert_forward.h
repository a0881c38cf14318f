// One expert's forward through its arena slot, with ggml's CPU kernels, for `epq verify kernel`:
// the nodes llama.cpp's build_moe_ffn builds for one token and one expert - gate and up
// MUL_MAT_ID (or one fused gate_up and its halves), their biases, the activation, down
// MUL_MAT_ID and its bias, and the routing weight (before the FFN, or on its output) - over the
// slot the pager holds the expert in, so what it computes is what the paged graph computes. The
// verify check compares it with a scalar reference read from the file.
#pragma once

#include "backend/expert_store.h"

#include <vector>

namespace epq {

enum class ExpertActivation { swiglu, swiglu_oai, geglu, reglu, silu, gelu, relu, relu_sqr };

struct ExpertForwardSpec {
    ExpertActivation act = ExpertActivation::swiglu;
    float alpha = 0.0f, limit = 0.0f;  // swiglu_oai
    bool weight_before_ffn = false;
    // This expert's biases (a fused gate_up's split into its halves); empty when there are none.
    std::vector<float> gate_b, up_b, down_b;
};

struct ExpertForward {
    std::vector<float> gate, up, h, down, out;  // gate and up after their biases
};

// The forward of the expert `slot` holds, on `x` with routing weight `weight`, computed with
// `n_threads` CPU threads. Throws epq::Error (matrices missing for the activation, ggml failing).
ExpertForward expert_forward(const ExpertSlotView & slot, const std::vector<float> & x, float weight,
                             const ExpertForwardSpec & spec, int n_threads);

}  // namespace epq
