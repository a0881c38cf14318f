// The complete content plan of a synthetic model: its metadata and, in file order, every
// tensor with its shape, type and value distribution. Built per architecture from a
// SynthConfig; the synthesizer only streams what the layout says.
#pragma once

#include "synth/synth_config.h"
#include "synth/tensor_filler.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

struct gguf_context;

namespace epq {

struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;  // ggml order: ne[0] is the row length (the input dimension)
    ggml_type type = GGML_TYPE_F32;
    ValueDist dist;
    std::string kind;  // the --type kind that chose `type`
    // When set, rewrites the drawn values (ne[0] per row) before they are quantized; the tensor is
    // then drawn value by value, not from the shared pool.
    ValueShaper shape_values;
};

struct ModelLayout {
    std::vector<TensorSpec> tensors;
    // Writes the architecture's metadata (not the tokenizer) into a gguf context.
    std::function<void(gguf_context *)> write_metadata;
};

// n_vocab comes from the tokenizer that will be embedded.
ModelLayout build_layout(const SynthConfig & cfg, int64_t n_vocab);

}  // namespace epq
