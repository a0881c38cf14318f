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

struct Preset {
    const char * name;
    const char * description;
    SynthConfig (*make)();
};

SynthConfig with(SynthShape s, const char * preset, const char * vocab) {
    SynthConfig c;
    c.preset = preset;
    c.shape = s;
    c.vocab = vocab;
    c.quant = make_quant_preset("mixed");
    c.quant_name = "mixed";
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
             return with(s, "qwen35moe-35b-a3b", "qwen35");
         }},
        {"qwen3moe-30b-a3b",
         "Qwen3-30B-A3B shape (~17 GB mixed): 48 layers, n_embd 2048, 128 experts top-8, expert ff 768",
         [] {
             SynthShape s = qwen3moe_shape();
             s.n_layer = 48, s.n_embd = 2048, s.n_expert = 128, s.n_expert_used = 8, s.n_ff_exp = 768;
             s.n_head = 32, s.n_head_kv = 4, s.head_dim = 128, s.n_ctx_train = 40960;
             return with(s, "qwen3moe-30b-a3b", "qwen2");
         }},
        {"olmoe-1b-7b", "OLMoE-1B-7B shape (~4 GB mixed): 16 layers, n_embd 2048, 64 experts top-8, expert ff 1024",
         [] {
             SynthShape s = olmoe_shape();
             s.n_layer = 16, s.n_embd = 2048, s.n_expert = 64, s.n_expert_used = 8, s.n_ff_exp = 1024;
             s.n_head = 16, s.n_head_kv = 16, s.head_dim = 128;
             return with(s, "olmoe-1b-7b", "gpt-neox");
         }},
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

const std::vector<std::string> & quant_kinds() {
    static const std::vector<std::string> kinds = {
        "token_embd", "output", "attn", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_down_exps_alt", "shexp"};
    return kinds;
}

std::vector<PresetInfo> list_presets() {
    std::vector<PresetInfo> out;
    for (const auto & p : presets()) {
        out.push_back({p.name, p.description});
    }
    return out;
}

std::vector<std::string> list_quant_presets() {
    return {"mixed (experts Q4_K, down Q6_K in the first half of the layers and Q4_K in the rest: two expert sizes)",
            "any ggml type name, e.g. q4_k, q5_k, q6_k, q8_0, q4_0, f16, f32 (all experts that type)"};
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
               {"shexp", GGML_TYPE_Q8_0}};
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
                    "'; use 'mixed' or a ggml type name such as q4_k, q6_k, q8_0, f16");
    }
    for (const char * k : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_down_exps_alt"}) {
        q.types[k] = t;
    }
    return q;
}

void validate(const SynthConfig & cfg) {
    const auto & s = cfg.shape;
    auto need = [](bool ok, const std::string & msg) {
        if (!ok) {
            throw Error("invalid model shape: " + msg);
        }
    };
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
    // Every tensor's row must be whole blocks of its type.
    auto row_ok = [&](const std::string & kind, int64_t n_in) {
        const ggml_type t = cfg.quant.get(kind);
        if (n_in % ggml_blck_size(t) != 0) {
            throw Error("cannot store " + kind + " as " + ggml_type_name(t) + ": its rows have " +
                        std::to_string(n_in) + " values, not a multiple of the type's block size " +
                        std::to_string(ggml_blck_size(t)) + "; choose another --type " + kind + "=TYPE or shape");
        }
    };
    row_ok("token_embd", s.n_embd);
    row_ok("output", s.n_embd);
    row_ok("attn", s.n_embd);
    row_ok("attn", int64_t(s.head_dim) * s.n_head);
    row_ok("ffn_gate_exps", s.n_embd);
    row_ok("ffn_up_exps", s.n_embd);
    row_ok("ffn_down_exps", s.n_ff_exp);
    row_ok("ffn_down_exps_alt", s.n_ff_exp);
    if (s.arch == "qwen35moe") {
        row_ok("attn", int64_t(s.ssm_head_v_dim) * s.ssm_n_v_heads);
        row_ok("shexp", s.n_embd);
        row_ok("shexp", s.n_ff_shexp);
    }
}

}  // namespace epq
