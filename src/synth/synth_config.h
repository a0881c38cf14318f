// Everything that determines a synthetic MoE model: architecture and shape, the ggml type of
// each kind of tensor, and the seed. Presets fill it; every field can be overridden.
#pragma once

#include "ggml.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace epq {

struct SynthShape {
    std::string arch;  // qwen35moe, qwen3moe, olmoe, gpt-oss, deepseek2
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
    bool tie_embeddings = false;    // no output.weight: the head reuses token_embd
    float rope_yarn_factor = 0.0f;  // > 0: YaRN context extension, as the real models ship it
    uint32_t rope_yarn_orig_ctx = 0;

    // DeepSeek-style layers: dense FFN in the first layers, shared experts beside the routed ones
    uint32_t n_dense_lead = 0;     // leading_dense_block_count
    uint32_t n_ff = 0;             // hidden size of those dense FFNs
    uint32_t n_expert_shared = 0;  // shared experts, each n_ff_exp wide
    // Routing: softmax over all experts, or (DeepSeek-V3 style) sigmoid scores plus a per-expert
    // selection bias (exp_probs_b), the selected weights renormalised and scaled.
    bool sigmoid_gating = false;
    bool expert_weights_norm = false;
    float expert_weights_scale = 1.0f;

    // deepseek2's multi-head latent attention; head_dim is the query/key head (nope + rope)
    uint32_t q_lora_rank = 0;  // 0: queries projected directly (the Lite models)
    uint32_t kv_lora_rank = 0;
    uint32_t qk_rope_dim = 0;
    uint32_t v_head_dim = 0;

    // gpt-oss: alternating sliding-window (even layers) and full attention
    uint32_t n_swa = 0;

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
//   the layers: differing from ffn_down_exps gives two expert sizes), shexp, ffn (dense FFN
//   layers)
struct QuantPlan {
    std::map<std::string, ggml_type> types;
    // Kinds whose type the user chose. The others are defaults: where a row does not fit their
    // block, they fall back as llama-quantize does (Q4_K -> Q5_0, Q6_K -> Q8_0, ...) so a preset
    // works for any shape; a chosen type that does not fit is an error.
    std::set<std::string> chosen;

    ggml_type get(const std::string & kind) const;
    // The type a tensor of `kind` with rows of `n_per_row` values is stored as; throws
    // epq::Error naming the kind when a chosen type does not fit.
    ggml_type for_row(const std::string & kind, int64_t n_per_row) const;
    void choose(const std::string & kind, ggml_type type);
};

// How the synthetic routers pick experts over a text.
enum class RoutingProfile {
    // Skewed routing, reused from token to token most by the next token, near published decode
    // figures of real MoE models (`epq simulate` prints the comparison): random weights, plus
    // whatever calibration the preset sets (embd_offset, residual_scale, recent_attention).
    realistic,
    // The worst case for a cache: every layer writes only faintly into the residual stream, so
    // each layer's router sees mostly the current token's embedding and picks near-uniformly,
    // with little reuse from one token to the next (like the flat routing of 256-expert models).
    flat,
};
RoutingProfile parse_routing_profile(const std::string & name);  // throws epq::Error

struct SynthConfig {
    std::string preset;
    RoutingProfile routing = RoutingProfile::realistic;
    // Added to every token embedding value: a direction all tokens share, which each router sees
    // as a fixed preference among its experts, so routing is skewed and reused (and which recent
    // attention reads to tell positions apart). The flat profile ignores it.
    float embd_offset = 0.0f;
    // Scales the matrices that write a layer's output into the residual stream (realistic
    // profile; flat writes 1/20 whatever this says). Below 1 the stream keeps more of the token's
    // own embedding: the next layer's router sees nearly what this layer's saw (the router
    // predictor names more of its picks) and a token carries less of the context before it (less
    // reuse by the next token).
    float residual_scale = 1.0f;
    // Attention that favours the last few tokens (realistic profile; rotary attention with per-head
    // query and key norms). Random attention weighs the whole context about evenly, so a token's
    // routing is as like the eighth token before it as the last one, where real models reuse 38%
    // of the last token's experts and 27% of the eighth's. With this, every head's queries and
    // keys read only the embedding direction all tokens share (embd_offset), on the rotary pairs
    // first_pair..last_pair alone (the norms zero the other dims): a score then falls with the
    // distance between two tokens as those pairs' rotations drift apart, `sharpness` (the norms'
    // weight on the band) setting how fast. The attention of the layers below `gain_layers`
    // writes `output_gain` times as much into the residual stream (on top of residual_scale):
    // there the context enters, while the later layers change the stream little, as the router
    // predictor finds in real models. sharpness 0: off.
    struct RecentAttention {
        float sharpness = 0.0f;
        uint32_t first_pair = 0, last_pair = 0;
        float output_gain = 1.0f;
        uint32_t gain_layers = 0;
    } recent_attention;
    SynthShape shape;
    QuantPlan quant;
    std::string quant_name;
    std::string vocab;  // ggml-vocab-<vocab>.gguf from the pinned llama.cpp tree
    // The family's real chat template (a file of the pinned tree's models/templates), written as
    // tokenizer.chat_template; empty: whatever the vocabulary file carries.
    std::string chat_template;
    uint64_t seed = 42;

    // How the model is laid out in files, as real downloads are: general.alignment (0: GGUF's
    // default of 32, not written), and split into shards of at most this many bytes as
    // llama.cpp's gguf-split writes them (0: one file).
    uint32_t alignment = 0;
    uint64_t split_max_bytes = 0;
};

struct PresetInfo {
    std::string name;
    std::string description;
    // A shape for planning at scale (hundreds of GiB): meant for --header-only, never run.
    bool for_planning = false;
};

// All shape presets, for --help and errors.
std::vector<PresetInfo> list_presets();
std::vector<std::string> list_quant_presets();

// Throws epq::Error naming the valid choices.
SynthConfig make_preset(const std::string & name);
QuantPlan make_quant_preset(const std::string & name);

// Kinds accepted by --type, and parsing a type name ("q4_k", "Q6_K", "f16", ...).
const std::vector<std::string> & quant_kinds();
// The four kinds that make up a routed expert (what --quant TYPE and --type experts=TYPE set).
const std::vector<std::string> & expert_kinds();
// Every type llama-quantize of the pinned tree can write for expert tensors (its --type presets
// and --tensor-type names), in ggml's order: what "every expert type" means to tests and tools.
const std::vector<ggml_type> & expert_quant_types();
ggml_type parse_ggml_type(const std::string & name);  // throws epq::Error

// Checks the shape for what llama.cpp and the chosen types require; throws epq::Error.
void validate(const SynthConfig & cfg);

}  // namespace epq
