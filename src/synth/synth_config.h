// Everything that determines a synthetic MoE model: architecture and shape, the ggml type of
// each kind of tensor, and the seed. Presets fill it; every field can be overridden.
#pragma once

#include "ggml.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace epq {

struct SynthShape {
    std::string arch;  // qwen35moe, qwen3moe, olmoe
    uint32_t n_layer = 0;
    uint32_t n_embd = 0;
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 0;
    uint32_t n_ff_exp = 0;    // routed expert hidden size
    uint32_t n_ff_shexp = 0;  // shared expert hidden size (0: none)
    uint32_t n_head = 0;
    uint32_t n_head_kv = 0;
    uint32_t head_dim = 0;
    uint32_t n_ctx_train = 4096;
    float rope_theta = 1e6f;
    float rms_eps = 1e-6f;
    bool tie_embeddings = false;  // no output.weight: the head reuses token_embd

    // qwen35moe's gated-delta-net (linear attention) layers
    uint32_t full_attn_interval = 4;  // every Nth layer is full attention, the rest recurrent
    uint32_t ssm_d_conv = 4;
    uint32_t ssm_head_k_dim = 128;  // ssm.state_size
    uint32_t ssm_n_k_heads = 16;    // ssm.group_count
    uint32_t ssm_n_v_heads = 32;    // ssm.time_step_rank
    uint32_t ssm_head_v_dim = 128;  // ssm.inner_size = n_v_heads * head_v_dim
};

// Tensor kinds a user can give a type to with --type KIND=TYPE.
//   token_embd, output, attn (every dense projection: attention and linear attention),
//   ffn_gate_exps, ffn_up_exps, ffn_down_exps, ffn_down_exps_alt (down in the second half of
//   the layers: differing from ffn_down_exps gives two expert sizes), shexp, router, norm
struct QuantPlan {
    std::map<std::string, ggml_type> types;
    ggml_type get(const std::string & kind) const;
};

struct SynthConfig {
    std::string preset;
    SynthShape shape;
    QuantPlan quant;
    std::string quant_name;
    std::string vocab;  // ggml-vocab-<vocab>.gguf from the pinned llama.cpp tree
    uint64_t seed = 42;
};

struct PresetInfo {
    std::string name;
    std::string description;
};

// All shape presets, for --help and errors.
std::vector<PresetInfo> list_presets();
std::vector<std::string> list_quant_presets();

// Throws epq::Error naming the valid choices.
SynthConfig make_preset(const std::string & name);
QuantPlan make_quant_preset(const std::string & name);

// Kinds accepted by --type, and parsing a type name ("q4_k", "Q6_K", "f16", ...).
const std::vector<std::string> & quant_kinds();
ggml_type parse_ggml_type(const std::string & name);  // throws epq::Error

// Checks the shape for what llama.cpp and the chosen types require; throws epq::Error.
void validate(const SynthConfig & cfg);

}  // namespace epq
