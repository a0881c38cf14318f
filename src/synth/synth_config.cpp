#include "synth/synth_config.h"

#include "util/error.h"

#include <algorithm>
#include <cctype>

namespace epq {

namespace {

SynthShape qwen35moe_shape() {
    SynthShape s;
    s.arch = "qwen35moe";
    s.rope_theta = 1e7f;
    s.rms_eps = 1e-6f;
    return s;
}

SynthShape qwen3moe_shape() {
    SynthShape s;
    s.arch = "qwen3moe";
    s.rope_theta = 1e6f;
    s.rms_eps = 1e-6f;
    return s;
}

SynthShape olmoe_shape() {
    SynthShape s;
    s.arch = "olmoe";
    s.rope_theta = 1e4f;
    s.rms_eps = 1e-5f;
    return s;
}

// gpt-oss as OpenAI ships it: 128-token sliding window on every other layer, YaRN x32 over a
// 4096-token original context.
SynthShape gpt_oss_shape() {
    SynthShape s;
    s.arch = "gpt-oss";
    s.rope_theta = 150000.0f;
    s.rms_eps = 1e-5f;
    s.n_ctx_train = 131072;
    s.rope_yarn_factor = 32.0f;
    s.rope_yarn_orig_ctx = 4096;
    s.n_swa = 128;
    s.head_dim = 64;
    return s;
}

// deepseek2: multi-head latent attention (one latent kv head), a dense first layer, shared
// experts. Routing defaults to DeepSeek-V2's softmax; the tiny preset uses V3's sigmoid + bias.
SynthShape deepseek2_shape() {
    SynthShape s;
    s.arch = "deepseek2";
    s.rope_theta = 1e4f;
    s.rms_eps = 1e-6f;
    s.n_head_kv = 1;
    s.n_dense_lead = 1;
    s.n_expert_shared = 2;
    s.qk_rope_dim = 64;
    s.v_head_dim = 128;
    s.head_dim = 192;
    s.kv_lora_rank = 512;
    return s;
}

struct Preset {
    const char * name;
    const char * description;
    SynthConfig (*make)();
    bool for_planning = false;
};

// The Jinja template each family's real files ship, from the pinned tree's models/templates.
// Qwen3-30B-A3B ships Qwen3's template, Qwen3.5-35B-A3B Qwen3.5's, gpt-oss-20b the same one as
// gpt-oss-120b, and DeepSeek-V3-style routing goes with DeepSeek-V3.1's. The tree has none of
// OLMoE's or DeepSeek-V2-Lite's: those keep what their vocabulary carries (llama.cpp then picks
// its built-in format).
std::string family_template(const SynthShape & s, const std::string & preset) {
    if (s.arch == "qwen3moe") {
        return "Qwen-Qwen3-0.6B.jinja";
    }
    if (s.arch == "qwen35moe") {
        return "Qwen3.5-4B.jinja";
    }
    if (s.arch == "gpt-oss") {
        return "openai-gpt-oss-120b.jinja";
    }
    if (preset == "kimi-k2") {
        return "Kimi-K2-Instruct.jinja";
    }
    if (s.arch == "deepseek2" && (preset == "tiny-deepseek2" || preset == "deepseek-v3")) {
        return "deepseek-ai-DeepSeek-V3.1.jinja";
    }
    return "";
}

// DeepSeek-V3's trunk, which Kimi-K2 shares: 61 layers of n_embd 7168, top-8 routing over
// experts of ff 2048 plus one shared, latent attention, sigmoid gating.
SynthShape terabyte_class_shape(uint32_t n_expert, uint32_t n_dense_lead, uint32_t n_head, float weights_scale) {
    SynthShape s = deepseek2_shape();
    s.n_layer = 61, s.n_embd = 7168, s.n_expert = n_expert, s.n_expert_used = 8, s.n_ff_exp = 2048, s.n_ff = 18432;
    s.n_dense_lead = n_dense_lead, s.n_expert_shared = 1, s.n_head = n_head, s.q_lora_rank = 1536;
    s.kv_lora_rank = 512, s.sigmoid_gating = true, s.expert_weights_norm = true;
    s.expert_weights_scale = weights_scale, s.rope_yarn_orig_ctx = 4096;
    return s;
}

SynthConfig with(SynthShape s, const char * preset, const char * vocab) {
    SynthConfig c;
    c.preset = preset;
    c.shape = s;
    c.vocab = vocab;
    c.chat_template = family_template(s, preset);
    c.quant = make_quant_preset("mixed");
    c.quant_name = "mixed";
    return c;
}

SynthConfig with_mxfp4(SynthShape s, const char * preset) {
    // No o200k tokenizer ships with the pinned tree: Llama 3's is the nearest (a 128k tiktoken BPE).
    SynthConfig c = with(s, preset, "llama-bpe");
    c.quant = make_quant_preset("mxfp4_moe");
    c.quant_name = "mxfp4_moe";
    return c;
}

const std::vector<Preset> & presets() {
    static const std::vector<Preset> all = {
        {"tiny-qwen35moe",
         "test model: 4 layers (3 gated-delta-net + 1 attention), n_embd 256, 32 experts top-4, shared expert",
         [] {
             SynthShape s = qwen35moe_shape();
             s.n_layer = 4, s.n_embd = 256, s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 256, s.n_ff_shexp = 256;
             s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64;
             s.ssm_head_k_dim = 64, s.ssm_n_k_heads = 2, s.ssm_n_v_heads = 4, s.ssm_head_v_dim = 64;
             return with(s, "tiny-qwen35moe", "qwen35");
         }},
        {"tiny-qwen3moe", "test model: 4 layers, n_embd 256, 32 experts top-4",
         [] {
             SynthShape s = qwen3moe_shape();
             s.n_layer = 4, s.n_embd = 256, s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 256;
             s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64;
             return with(s, "tiny-qwen3moe", "qwen2");
         }},
        {"tiny-olmoe", "test model: 4 layers, n_embd 256, 16 experts top-2",
         [] {
             SynthShape s = olmoe_shape();
             s.n_layer = 4, s.n_embd = 256, s.n_expert = 16, s.n_expert_used = 2, s.n_ff_exp = 256;
             s.n_head = 4, s.n_head_kv = 4, s.head_dim = 64;
             return with(s, "tiny-olmoe", "gpt-neox");
         }},
        {"tiny-gpt-oss",
         "test model: gpt-oss, 4 layers (sliding window 128 on even layers), n_embd 256, 32 experts top-4, "
         "MXFP4 experts",
         [] {
             SynthShape s = gpt_oss_shape();
             s.n_layer = 4, s.n_embd = 256, s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 256;
             s.n_head = 4, s.n_head_kv = 2;
             return with_mxfp4(s, "tiny-gpt-oss");
         }},
        {"tiny-deepseek2",
         "test model: deepseek2 (latent attention), 4 layers (the first dense), n_embd 256, 32 experts top-4 + 2 "
         "shared, DeepSeek-V3 routing (sigmoid, selection bias, normalised, scaled)",
         [] {
             SynthShape s = deepseek2_shape();
             s.n_layer = 4, s.n_embd = 256, s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 256, s.n_ff = 512;
             s.n_head = 4, s.head_dim = 96, s.qk_rope_dim = 32, s.v_head_dim = 64;
             s.q_lora_rank = 128, s.kv_lora_rank = 128;
             s.sigmoid_gating = true, s.expert_weights_norm = true, s.expert_weights_scale = 2.5f;
             return with(s, "tiny-deepseek2", "deepseek-llm");
         }},
        {"demo", "demo model (~0.7 GB): qwen3moe, 8 layers, n_embd 1024, 64 experts top-8",
         [] {
             SynthShape s = qwen3moe_shape();
             s.n_layer = 8, s.n_embd = 1024, s.n_expert = 64, s.n_expert_used = 8, s.n_ff_exp = 512;
             s.n_head = 8, s.n_head_kv = 4, s.head_dim = 128;
             return with(s, "demo", "qwen2");
         }},
        {"qwen35moe-35b-a3b",
         "Qwen3.5-35B-A3B shape (~21 GB mixed): 40 layers, n_embd 2048, 256 experts top-8, expert ff 512, shared "
         "expert",
         [] {
             SynthShape s = qwen35moe_shape();
             s.n_layer = 40, s.n_embd = 2048, s.n_expert = 256, s.n_expert_used = 8, s.n_ff_exp = 512,
             s.n_ff_shexp = 512;
             s.n_head = 16, s.n_head_kv = 2, s.head_dim = 256, s.n_ctx_train = 262144;
             s.ssm_head_k_dim = 128, s.ssm_n_k_heads = 16, s.ssm_n_v_heads = 32, s.ssm_head_v_dim = 128;
             SynthConfig c = with(s, "qwen35moe-35b-a3b", "qwen35");
             // Calibrated as the 30B preset is (see there). Without an offset this shape routes flat
             // (next-token reuse 3.5%, chance 3.1%). An offset alone (1.75) gave the per-layer hit
             // rates but a token reused as many of the eighth token's experts as the last one's
             // (26.3% / 25.8%). With recent attention in its full-attention layers (every fourth;
             // the first two write the context) and a smaller offset: per-layer LRU / Belady
             // 68 / 85, 88 / 93, 93 / 94% at 12.5 / 25 / 37.5% of each layer's experts, reuse by
             // the next token 34.4% and by the eighth 23.9%, the next layer's router names 82.3% of
             // the routed slots (real Qwen3.6-35B-A3B: 80.7%).
             c.embd_offset = 1.2f;
             c.recent_attention = {1.3f, 2, 6, 8.0f, 8};
             return c;
         }},
        {"qwen3moe-30b-a3b",
         "Qwen3-30B-A3B shape (~17 GB mixed): 48 layers, n_embd 2048, 128 experts top-8, expert ff 768",
         [] {
             SynthShape s = qwen3moe_shape();
             s.n_layer = 48, s.n_embd = 2048, s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 768;
             s.n_head = 32, s.n_head_kv = 4, s.head_dim = 128, s.n_ctx_train = 40960;
             SynthConfig c = with(s, "qwen3moe-30b-a3b", "qwen2");
             // Calibrated against the real Qwen3-30B-A3B (epq simulate's routing report, 128 decode
             // tokens of data/text after a 256-token prompt: ordinary prose; the chapter's opening
             // sentence repeats itself every 7 tokens, which lifts reuse at lag 8 on any model).
             // Random weights as they come route too predictably from token to token and too
             // unpredictably from layer to layer (per-layer LRU 72 / 90 / 94% at 12.5 / 25 / 37.5%
             // of each layer's experts, real: 65 / 83 / 92; next-layer router 77%, real 88.6%), and
             // their attention weighs the whole context evenly, so a token reuses as many of the
             // eighth token's experts as of the last one's (real: 38% and 27%). Recent attention,
             // with the context written by the first four layers and little by the rest, a
             // shared embedding direction for the skew: LRU / Belady 60 / 78, 81 / 91, 92 / 96%,
             // reuse 43.0% and 31.1%, router 88.7%.
             c.residual_scale = 0.15f;
             c.embd_offset = 0.76f;
             c.recent_attention = {1.3f, 3, 14, 8.0f, 4};
             return c;
         }},
        {"olmoe-1b-7b", "OLMoE-1B-7B shape (~4 GB mixed): 16 layers, n_embd 2048, 64 experts top-8, expert ff 1024",
         [] {
             SynthShape s = olmoe_shape();
             s.n_layer = 16, s.n_embd = 2048, s.n_expert = 64, s.n_expert_used = 8, s.n_ff_exp = 1024;
             s.n_head = 16, s.n_head_kv = 16, s.head_dim = 128;
             return with(s, "olmoe-1b-7b", "gpt-neox");
         }},
        {"gpt-oss-20b",
         "gpt-oss-20b shape (~12 GB, MXFP4 experts): 24 layers, n_embd 2880, 32 experts top-4, expert ff 2880, 64 "
         "heads / 8 kv heads of 64, sliding window 128 on even layers; tokenizer: Llama 3's 128k BPE (the pinned "
         "tree ships no o200k vocabulary)",
         [] {
             SynthShape s = gpt_oss_shape();
             s.n_layer = 24, s.n_embd = 2880, s.n_expert = 32, s.n_expert_used = 4, s.n_ff_exp = 2880;
             s.n_head = 64, s.n_head_kv = 8;
             return with_mxfp4(s, "gpt-oss-20b");
         }},
        {"deepseek-v2-lite",
         "DeepSeek-V2-Lite shape (~11 GB mixed): 27 layers (the first dense, ff 10944), n_embd 2048, 64 experts "
         "top-6 + 2 shared, expert ff 1408 (down projections fall back to Q8_0/Q5_0 as llama-quantize does), "
         "latent attention (kv rank 512), softmax routing",
         [] {
             SynthShape s = deepseek2_shape();
             s.n_layer = 27, s.n_embd = 2048, s.n_expert = 64, s.n_expert_used = 6, s.n_ff_exp = 1408, s.n_ff = 10944;
             s.n_head = 16, s.n_ctx_train = 163840, s.rope_yarn_factor = 40.0f, s.rope_yarn_orig_ctx = 4096;
             return with(s, "deepseek-v2-lite", "deepseek-llm");
         }},
        // The 1 TB class, for planning at scale (write them with --header-only: a sparse file of
        // the full size whose header is real, enough for epq inspect and arena plans).
        {"deepseek-v3",
         "DeepSeek-V3/R1 shape (~400 GB mixed; use --header-only): 61 layers (the first 3 dense, ff 18432), "
         "n_embd 7168, 256 experts top-8 + 1 shared, expert ff 2048, latent attention, sigmoid routing",
         [] {
             SynthShape s = terabyte_class_shape(256, 3, 128, 2.5f);
             s.n_ctx_train = 163840, s.rope_yarn_factor = 40.0f;
             return with(s, "deepseek-v3", "deepseek-llm");
         },
         true},
        {"kimi-k2",
         "Kimi-K2 shape (~600 GB mixed; use --header-only): 61 layers (the first dense, ff 18432), n_embd 7168, "
         "384 experts top-8 + 1 shared, expert ff 2048, latent attention, sigmoid routing; tokenizer: "
         "DeepSeek's (the pinned tree ships no Kimi vocabulary)",
         [] {
             SynthShape s = terabyte_class_shape(384, 1, 64, 2.827f);
             s.n_ctx_train = 131072, s.rope_yarn_factor = 32.0f;
             return with(s, "kimi-k2", "deepseek-llm");
         },
         true},
    };
    return all;
}

std::string lower(std::string s) {
    for (auto & c : s) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return s;
}

}  // namespace

ggml_type QuantPlan::get(const std::string & kind) const {
    auto it = types.find(kind);
    if (it == types.end()) {
        throw Error("internal: no type for tensor kind '" + kind + "'");
    }
    return it->second;
}

namespace {

// llama-quantize's tensor_type_fallback: the type it writes instead when a row is not whole
// blocks of the target type.
ggml_type llama_quantize_fallback(ggml_type t) {
    switch (t) {
        case GGML_TYPE_IQ1_S:
        case GGML_TYPE_IQ1_M:
        case GGML_TYPE_IQ2_XXS:
        case GGML_TYPE_IQ2_XS:
        case GGML_TYPE_IQ2_S:
        case GGML_TYPE_IQ3_XXS:
        case GGML_TYPE_IQ3_S:
        case GGML_TYPE_IQ4_XS: return GGML_TYPE_IQ4_NL;
        case GGML_TYPE_Q2_0:
        case GGML_TYPE_Q2_K:
        case GGML_TYPE_Q3_K:
        case GGML_TYPE_TQ1_0:
        case GGML_TYPE_TQ2_0: return GGML_TYPE_Q4_0;
        case GGML_TYPE_Q4_K: return GGML_TYPE_Q5_0;
        case GGML_TYPE_Q5_K: return GGML_TYPE_Q5_1;
        case GGML_TYPE_Q6_K: return GGML_TYPE_Q8_0;
        // 32-blocks have nothing smaller to go to; llama-quantize stops on Q1_0 and NVFP4 (no
        // fallback defined), where F16 (the check below) is the answer that still writes a model.
        default: return t;
    }
}

}  // namespace

ggml_type QuantPlan::for_row(const std::string & kind, int64_t n_per_row) const {
    const ggml_type t = get(kind);
    if (n_per_row % ggml_blck_size(t) == 0) {
        return t;
    }
    if (chosen.count(kind) != 0) {
        throw Error("cannot store " + kind + " as " + ggml_type_name(t) + ": its rows have " +
                    std::to_string(n_per_row) + " values, not a multiple of the type's block size " +
                    std::to_string(ggml_blck_size(t)) + "; choose another --type " + kind + "=TYPE or shape");
    }
    const ggml_type f = llama_quantize_fallback(t);
    return n_per_row % ggml_blck_size(f) == 0 ? f : GGML_TYPE_F16;
}

void QuantPlan::choose(const std::string & kind, ggml_type type) {
    types[kind] = type;
    chosen.insert(kind);
}

const std::vector<std::string> & quant_kinds() {
    static const std::vector<std::string> kinds = {"token_embd",        "output",      "attn",
                                                   "ffn_gate_exps",     "ffn_up_exps", "ffn_down_exps",
                                                   "ffn_down_exps_alt", "shexp",       "ffn"};
    return kinds;
}

const std::vector<std::string> & expert_kinds() {
    static const std::vector<std::string> kinds = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
                                                   "ffn_down_exps_alt"};
    return kinds;
}

const std::vector<ggml_type> & expert_quant_types() {
    // llama-quantize's presets cover all but NVFP4, which it writes only through --tensor-type
    // (which accepts any ggml type). Q8_1 and Q8_K are activation formats with no dot product
    // against themselves, so they are not weight types.
    static const std::vector<ggml_type> types = {
        GGML_TYPE_F32,     GGML_TYPE_F16,    GGML_TYPE_Q4_0,    GGML_TYPE_Q4_1,  GGML_TYPE_Q5_0,   GGML_TYPE_Q5_1,
        GGML_TYPE_Q8_0,    GGML_TYPE_Q2_K,   GGML_TYPE_Q3_K,    GGML_TYPE_Q4_K,  GGML_TYPE_Q5_K,   GGML_TYPE_Q6_K,
        GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ1_S, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ3_S,
        GGML_TYPE_IQ2_S,   GGML_TYPE_IQ4_XS, GGML_TYPE_IQ1_M,   GGML_TYPE_BF16,  GGML_TYPE_TQ1_0,  GGML_TYPE_TQ2_0,
        GGML_TYPE_MXFP4,   GGML_TYPE_NVFP4,  GGML_TYPE_Q1_0,    GGML_TYPE_Q2_0};
    return types;
}

std::vector<PresetInfo> list_presets() {
    std::vector<PresetInfo> out;
    for (const auto & p : presets()) {
        out.push_back({p.name, p.description, p.for_planning});
    }
    return out;
}

std::vector<std::string> list_quant_presets() {
    return {"mixed (experts Q4_K, down Q6_K in the first half of the layers and Q4_K in the rest: two expert sizes)",
            "mxfp4_moe (experts MXFP4, the other matrices Q8_0, like the gpt-oss releases)",
            "any ggml type name, e.g. q4_k, q5_k, q6_k, q8_0, q4_0, iq2_xxs, mxfp4, f16, f32 (all experts that type)"};
}

SynthConfig make_preset(const std::string & name) {
    for (const auto & p : presets()) {
        if (name == p.name) {
            return p.make();
        }
    }
    std::string names;
    for (const auto & p : presets()) {
        names += (names.empty() ? "" : ", ") + std::string(p.name);
    }
    throw Error("unknown preset '" + name + "'; choose one of: " + names);
}

ggml_type parse_ggml_type(const std::string & name) {
    const std::string want = lower(name);
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const auto type = static_cast<ggml_type>(t);
        if (ggml_type_size(type) == 0 || ggml_blck_size(type) == 0) {
            continue;  // removed types keep a slot but cannot be used
        }
        if (lower(ggml_type_name(type)) == want) {
            return type;
        }
    }
    throw Error("unknown tensor type '" + name +
                "' (examples: q4_k, q5_k, q6_k, q8_0, q4_0, iq4_xs, mxfp4, f16, bf16, f32)");
}

QuantPlan make_quant_preset(const std::string & name) {
    QuantPlan q;
    // Dense weights like a Q4_K_M file: embeddings Q4_K, head Q6_K, the rest Q8_0.
    q.types = {{"token_embd", GGML_TYPE_Q4_K},
               {"output", GGML_TYPE_Q6_K},
               {"attn", GGML_TYPE_Q8_0},
               {"shexp", GGML_TYPE_Q8_0},
               {"ffn", GGML_TYPE_Q8_0}};
    if (lower(name) == "mxfp4_moe") {
        q.types["token_embd"] = GGML_TYPE_Q8_0;
        q.types["output"] = GGML_TYPE_Q8_0;
        for (const auto & k : expert_kinds()) {
            q.types[k] = GGML_TYPE_MXFP4;
        }
        return q;
    }
    if (lower(name) == "mixed") {
        q.types["ffn_gate_exps"] = GGML_TYPE_Q4_K;
        q.types["ffn_up_exps"] = GGML_TYPE_Q4_K;
        q.types["ffn_down_exps"] = GGML_TYPE_Q6_K;
        q.types["ffn_down_exps_alt"] = GGML_TYPE_Q4_K;
        return q;
    }
    ggml_type t;
    try {
        t = parse_ggml_type(name);
    } catch (const Error &) {
        throw Error("unknown quant preset '" + name +
                    "'; use 'mixed', 'mxfp4_moe' or a ggml type name such as q4_k, q6_k, q8_0, f16");
    }
    // The user named this type for the experts: a shape it does not fit is an error, not a fallback.
    for (const auto & k : expert_kinds()) {
        q.choose(k, t);
    }
    return q;
}

namespace {

void need(bool ok, const std::string & msg) {
    if (!ok) {
        throw Error("invalid model shape: " + msg);
    }
}

void validate_gpt_oss(const SynthShape & s) {
    need(s.n_swa >= 1, "gpt-oss needs a sliding window (--sliding-window)");
    need(!s.tie_embeddings, "gpt-oss always has a separate output.weight: --tie-embeddings is not supported");
}

void validate_deepseek2(const SynthShape & s) {
    need(s.n_dense_lead < s.n_layer, "--dense-layers must leave at least one MoE layer");
    need(s.n_dense_lead == 0 || s.n_ff >= 1, "--dense-ff must be positive when there are dense layers");
    need(s.n_expert_shared >= 1, "deepseek2 always has shared experts: --shared-experts must be positive");
    need(s.n_head_kv == 1, "deepseek2's latent attention caches one kv head: --heads-kv must be 1");
    need(s.kv_lora_rank >= 1 && s.v_head_dim >= 1, "deepseek2 needs a kv rank and a value head size");
    need(s.qk_rope_dim >= 2 && s.qk_rope_dim % 2 == 0 && s.qk_rope_dim < s.head_dim,
         "deepseek2's rotary part of the head must be even and smaller than --head-dim");
}

}  // namespace

// Row lengths against block sizes are checked where each tensor gets its type
// (QuantPlan::for_row, from build_layout), which knows every tensor's shape.
void validate(const SynthConfig & cfg) {
    const auto & s = cfg.shape;
    need(s.n_layer >= 1 && s.n_layer <= 512, "--layers must be 1..512");
    need(s.n_embd >= 32, "--embd must be at least 32");
    need(s.n_expert >= 2 && s.n_expert <= 1024, "--experts must be 2..1024");
    need(s.n_expert_used >= 1 && s.n_expert_used <= s.n_expert, "--experts-used must be 1..--experts");
    need(s.n_ff_exp >= 1, "--expert-ff must be positive");
    need(s.n_head >= 1 && s.n_head_kv >= 1 && s.n_head % s.n_head_kv == 0, "--heads must be a multiple of --heads-kv");
    need(s.head_dim >= 2 && s.head_dim % 2 == 0, "--head-dim must be even");
    if (s.arch == "olmoe") {
        need(s.n_head_kv == s.n_head, "olmoe normalises q and k over the full width: --heads-kv must equal --heads");
        need(s.n_head * s.head_dim == s.n_embd, "olmoe needs --heads x --head-dim == --embd");
        need(!s.tie_embeddings, "olmoe always has a separate output.weight: --tie-embeddings is not supported");
    }
    if (s.arch == "qwen35moe") {
        need(s.n_ff_shexp >= 1, "qwen35moe always has a shared expert: --shared-ff must be positive");
        need(s.full_attn_interval >= 1, "--full-attn-interval must be at least 1");
        need(s.head_dim % 8 == 0, "qwen35moe's partial M-RoPE needs --head-dim divisible by 8");
        need(s.ssm_n_v_heads % s.ssm_n_k_heads == 0, "--ssm-v-heads must be a multiple of --ssm-k-heads");
        need(s.ssm_head_k_dim == s.ssm_head_v_dim, "the gated delta net needs key and value head sizes equal");
    }
    if (s.arch == "gpt-oss") {
        validate_gpt_oss(s);
    }
    if (s.arch == "deepseek2") {
        validate_deepseek2(s);
    }
}

RoutingProfile parse_routing_profile(const std::string & name) {
    if (name == "realistic") {
        return RoutingProfile::realistic;
    }
    if (name == "flat") {
        return RoutingProfile::flat;
    }
    throw Error("unknown routing profile '" + name + "'; use realistic or flat");
}

}  // namespace epq
