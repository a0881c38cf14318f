// Guesses which experts a MoE layer will select before it runs, by applying that layer's own
// router to the hidden state entering the previous layer's experts. The residual stream
// changes little from one layer to the next, so the guess is often right; it costs one small
// matrix-vector product, with ggml's CPU dot product for the router's type. The router weights
// are read through a read-only mapping of the model file, which shares the page cache with
// llama.cpp's own mapping (no extra memory).
#pragma once

#include "gguf/expert_index.h"
#include "util/mapping.h"

#include "ggml.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace epq {

class RouterPredictor {
public:
    RouterPredictor(const std::string & path, const ExpertIndex & index);
    ~RouterPredictor();
    RouterPredictor(const RouterPredictor &) = delete;
    RouterPredictor & operator=(const RouterPredictor &) = delete;

    // False when the model's routers cannot be used (then why() says what is missing).
    bool available() const { return available_; }
    const std::string & why() const { return why_; }

    // The top-k experts of model layer `layer` for hidden state `x` (n_embd floats), best first.
    std::vector<uint32_t> predict(int layer, const float * x, int64_t n_embd) const;

private:
    struct Router {
        const uint8_t * weight = nullptr;  // [n_embd, n_expert] in the file's type
        ggml_type type = GGML_TYPE_F32;
        size_t row_bytes = 0;
        int64_t n_embd = 0;
        const float * selection_bias = nullptr;  // exp_probs_b: added to sigmoid scores
    };
    std::vector<Mapping> maps_;  // one per file of the model
    bool available_ = false;
    std::string why_;
    uint32_t n_expert_ = 0, k_ = 0;
    std::unordered_map<int, Router> routers_;
    mutable std::vector<float> scores_;
    mutable std::vector<uint8_t> x_conv_;  // x in the type the router's dot product pairs with
};

}  // namespace epq
