// Tiny models of any architecture the pinned llama.cpp implements, whose tensor list and shapes
// are decided by llama.cpp's own loader: we write generic hyperparameters, llama.cpp creates
// the model from them (llama_model_init_from_user), we fill its weights with random values and
// llama.cpp saves it. This is how epq reaches every MoE architecture, not just the ones the
// synth presets lay out by hand. Weights are F32, the tokenizer is llama.cpp's "test" one
// (token ids from fixed-size byte chunks), so the files are for exactness checks, not text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epq {

struct ArchFixtureOptions {
    uint32_t n_expert = 8;       // routed experts per MoE layer
    uint32_t n_expert_used = 2;  // top-k
    uint64_t seed = 42;
    float stdev = 0.1f;  // of the normal distribution every weight is drawn from
    // Next-token-prediction (MTP) layers after the trunk, as GLM-4.5, DeepSeek-V3 and Qwen3.5
    // files carry them (<arch>.nextn_predict_layers): llama.cpp creates them only when asked to
    // load MTP, and skips them otherwise.
    uint32_t n_nextn = 0;
};

// The architectures of the pinned llama.cpp that have routed experts (always or optionally),
// by their GGUF name.
const std::vector<std::string> & moe_architectures();

// Writes a tiny MoE model of `arch` to `path`. Throws epq::Error when llama.cpp cannot create
// or save one with these hyperparameters (the message says which).
void write_arch_fixture(const std::string & arch, const std::string & path, const ArchFixtureOptions & opts);

}  // namespace epq
