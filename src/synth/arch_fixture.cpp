#include "synth/arch_fixture.h"

#include "util/error.h"

#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <regex>
#include <set>

namespace epq {

namespace {

// Hyperparameters every architecture reads, sized so that each one's shape constraints hold
// (head sizes, MLA ranks, per-layer patterns). Keys an architecture does not read are ignored.
struct Dims {
    uint32_t n_vocab = 128, n_ctx = 256, n_embd = 256, n_head = 2, n_head_kv = 2, n_ff = 384, n_layer = 2;
};

bool among(const std::string & arch, std::initializer_list<const char *> names) {
    for (const char * n : names) {
        if (arch == n) {
            return true;
        }
    }
    return false;
}

// Multi-head latent attention (DeepSeek-V2 style): fixed MLA head sizes need a narrow model.
bool uses_mla(const std::string & arch) {
    return among(arch, {"deepseek2", "deepseek32", "glm-dsa", "dots3note", "kimi-linear", "bailingmoe3", "kimi-k3",
                        "mistral4", "hy_v4"});
}

// Hybrid models whose second layer is recurrent (no attention heads there).
bool per_layer_heads(const std::string & arch) {
    return among(arch, {"lfm2moe", "kimi-linear", "bailingmoe3", "kimi-k3", "nemotron_h_moe"});
}

Dims dims_for(const std::string & arch) {
    Dims d;
    if (arch == "llama4") {
        d.n_layer = 4;  // its no-rope layer step is fixed at 4
    } else if (arch == "deepseek4") {
        d.n_embd = 512, d.n_head = 8, d.n_ff = 1024, d.n_layer = 4;
    } else if (uses_mla(arch)) {
        d.n_embd = 128, d.n_head = 1, d.n_ff = 192;
    } else if (arch == "laguna") {
        d.n_embd = 160;  // head size 80
    } else if (arch == "afmoe" || arch == "muse-glimmer") {
        d.n_head = 4;
    } else if (arch == "nemotron_h_moe") {
        d.n_layer = 3;
    }
    d.n_head_kv = (arch == "afmoe" || arch == "muse-glimmer") ? 2 : arch == "deepseek4" ? 1 : d.n_head;
    return d;
}

class Kv {
public:
    Kv(gguf_context * g, std::string arch) : g_(g), arch_(std::move(arch)) {}
    std::string key(const char * k) const { return arch_ + "." + k; }
    void u32(const char * k, uint32_t v) { gguf_set_val_u32(g_, key(k).c_str(), v); }
    void f32(const char * k, float v) { gguf_set_val_f32(g_, key(k).c_str(), v); }
    void flag(const char * k, bool v) { gguf_set_val_bool(g_, key(k).c_str(), v); }
    void u32s(const char * k, const std::vector<uint32_t> & v) {
        gguf_set_arr_data(g_, key(k).c_str(), GGUF_TYPE_UINT32, v.data(), v.size());
    }
    void u64s(const char * k, const std::vector<uint64_t> & v) {
        gguf_set_arr_data(g_, key(k).c_str(), GGUF_TYPE_UINT64, v.data(), v.size());
    }
    void f32s(const char * k, const std::vector<float> & v) {
        gguf_set_arr_data(g_, key(k).c_str(), GGUF_TYPE_FLOAT32, v.data(), v.size());
    }

private:
    gguf_context * g_;
    std::string arch_;
};

void write_attention(Kv & kv, const std::string & arch, const Dims & d) {
    const uint32_t head = d.n_embd / d.n_head;
    if (per_layer_heads(arch)) {
        std::vector<uint32_t> heads(d.n_layer, d.n_head);
        heads[1] = 0;
        kv.u32s("attention.head_count", heads);
        kv.u32s("attention.head_count_kv", heads);
    } else {
        kv.u32("attention.head_count", d.n_head);
        kv.u32("attention.head_count_kv", d.n_head_kv);
    }
    kv.f32("attention.max_alibi_bias", 8.0f);
    kv.f32("attention.clamp_kqv", 1.0f);
    kv.f32("attention.layer_norm_epsilon", 1e-5f);
    kv.f32("attention.layer_norm_rms_epsilon", 1e-5f);
    kv.f32("attention.group_norm_epsilon", 1e-5f);
    kv.u32("attention.group_norm_groups", 8);
    kv.u32("attention.q_lora_rank", arch == "deepseek4" ? 64 : 512);
    kv.u32("attention.kv_lora_rank", 512);
    kv.u32("attention.relative_buckets_count", 8);
    kv.u32("attention.sliding_window", d.n_ctx / 8);
    if (arch == "deepseek4") {
        kv.u32("attention.key_length", head);
        kv.u32("attention.value_length", head);
        kv.u32("rope.dimension_count", head / 2);
    } else if (uses_mla(arch)) {
        kv.u32("attention.key_length", 576);
        kv.u32("attention.value_length", 512);
        kv.u32("rope.dimension_count", 64);
        kv.u32("attention.key_length_mla", 192);
        kv.u32("attention.value_length_mla", 128);
    } else if (arch == "minimax-m3") {
        kv.u32("rope.dimension_count", 64);  // partial rotary within the indexer key length
    }
    if (arch == "dots3note") {
        kv.u32("attention.kv_lora_rank_swa", 512);
        kv.u32("attention.key_length_swa", 576);
        kv.u32("attention.value_length_swa", 512);
        kv.u32("attention.key_length_mla_swa", 192);
        kv.u32("attention.value_length_mla_swa", 128);
        kv.f32("rope.freq_base_swa", 10000.0f);
    }
    // Sliding-window layout: alternate layers where the architecture takes a per-layer pattern.
    if (among(arch, {"cohere2moe", "mimo2", "step35", "muse-glimmer", "dots3note", "maple"})) {
        std::vector<uint32_t> pattern(d.n_layer);
        for (uint32_t il = 0; il < d.n_layer; ++il) {
            pattern[il] = il % 2;
        }
        kv.u32s("attention.sliding_window_pattern", pattern);
    } else {
        kv.u32("attention.sliding_window_pattern", 2);
    }
    // Sparse-attention indexers (DSA/MSA): select everything, so results do not hinge on ties.
    kv.u32("attention.indexer.head_count", arch == "minimax-m3" ? d.n_head : 64);
    kv.u32("attention.indexer.key_length", arch == "qwen4exp" ? head : 128);
    kv.u32("attention.indexer.top_k", 131072);
    kv.u32("attention.indexer.block_size", 4);
    kv.u32("attention.indexer.local_blocks", 1);
    if (among(arch, {"dots3note", "hy_v4"})) {
        std::vector<uint32_t> types(d.n_layer);
        for (uint32_t il = 0; il < d.n_layer; ++il) {
            types[il] = il % 2 ? 0 : 1;  // even layers own an indexer, odd ones share it
        }
        kv.u32s("attention.indexer.types", types);
    }
    kv.u32s("rope.dimension_sections", {head / 4, head / 4, head / 4, head / 4});
}

void write_experts(Kv & kv, const std::string & arch, const Dims & d, const ArchFixtureOptions & o) {
    kv.u32("expert_feed_forward_length", d.n_ff);
    kv.u32("expert_shared_feed_forward_length", d.n_ff / 2);
    kv.u32("expert_latent_length", d.n_ff);
    kv.u32("interleave_moe_layer_step", 2);
    kv.u32("expert_count", o.n_expert);
    kv.u32("expert_used_count", o.n_expert_used);
    kv.u32("expert_shared_count", 1);
    kv.u32("expert_gating_func", arch == "deepseek4" ? 4 : 2);  // sqrt-softplus : sigmoid
    kv.f32("expert_group_scale", 1.0f);
    kv.u32("experts_per_group", 1);
    if (among(arch, {"deepseek4", "hy_v4"})) {
        kv.f32("expert_weights_scale", 1.0f);
        kv.flag("expert_weights_norm", true);
        kv.f32("swiglu_clamp_exp", 10.0f);
    }
    if (arch == "maple") {
        kv.f32("swiglu_clamp_exp", 7.0f);
    }
    if (arch == "bailingmoe3") {
        kv.f32s("swiglu_clamp_exp", {0.0f, 4.0f});
        kv.f32s("swiglu_clamp_shexp", {0.0f, 5.0f});
    }
}

// Hyper-connections, compressed attention and per-layer embeddings of the newest families.
void write_family_extras(Kv & kv, const std::string & arch, const Dims & d) {
    if (arch == "deepseek4") {
        kv.u32("attention.output_group_count", 8);
        kv.u32("attention.output_lora_rank", 32);
        kv.u32s("attention.compress_ratios", {0, 0, 4, 128});
        kv.f32("attention.compress_rope_freq_base", 160000.0f);
        kv.u32("hyper_connection.count", 4);
        kv.u32("hyper_connection.sinkhorn_iterations", 2);
        kv.f32("hyper_connection.epsilon", 1e-6f);
        kv.u32("hash_layer_count", 0);
    } else if (arch == "hy_v4") {
        kv.u32("hyper_connection.count", 4);
        kv.f32("hyper_connection.epsilon", 1e-6f);
        kv.f32("hyper_connection.magnitude", 2.0f);
    } else if (arch == "qwen4exp") {
        kv.u32("hyper_connection.count", 4);
        kv.u32("hyper_connection.low_rank", 8);
        kv.u32s("attention.compress_ratios", std::vector<uint32_t>(d.n_layer, 4));
        // Per-layer n-gram embeddings: 2 heads for each of the 2 n-gram orders past unigrams.
        const uint32_t ple_heads = 4;
        std::vector<uint64_t> offsets(ple_heads), sizes(ple_heads, d.n_vocab);
        for (uint32_t h = 0; h < ple_heads; ++h) {
            offsets[h] = uint64_t(h) * d.n_vocab;
        }
        kv.u32s("ple.layers", {0});
        kv.u32("ple.ngram_size", 3);
        kv.u32("ple.heads_per_ngram", 2);
        kv.u32("ple.conv_kernel", 4);
        kv.u32("ple.eos_token_id", 0);
        kv.u32("embedding_length_per_layer_input", d.n_embd / ple_heads);
        kv.u64s("ple.layer_multipliers", {1, 3, 5});
        kv.u64s("ple.head_offsets", offsets);
        kv.u64s("ple.head_vocab_sizes", sizes);
    }
}

void write_metadata(gguf_context * g, const std::string & arch, const Dims & d, const ArchFixtureOptions & o) {
    gguf_set_val_str(g, "general.architecture", arch.c_str());
    gguf_set_val_str(g, "general.name", ("epq arch fixture " + arch).c_str());
    Kv kv(g, arch);
    kv.u32("vocab_size", d.n_vocab);
    kv.u32("context_length", d.n_ctx);
    kv.u32("embedding_length", d.n_embd);
    kv.u32("features_length", d.n_embd);
    kv.u32("block_count", d.n_layer);
    kv.u32("leading_dense_block_count", 1);
    if (arch == "nemotron_h_moe") {
        std::vector<uint32_t> ff(d.n_layer, d.n_ff);
        ff[0] = ff[1] = 0;  // two mixer-only layers before the MoE one
        kv.u32s("feed_forward_length", ff);
    } else {
        kv.u32("feed_forward_length", d.n_ff);
    }
    kv.flag("use_parallel_residual", false);
    kv.f32("logit_scale", 1.0f);
    kv.u32("full_attention_interval", 2);
    kv.f32("residual_scale", 3.5565588f);
    kv.u32("attn_res.block_size", 12);
    kv.f32("activation.situ_beta", 4.0f);
    kv.f32("activation.situ_linear_beta", 25.0f);
    write_attention(kv, arch, d);
    write_experts(kv, arch, d, o);
    write_family_extras(kv, arch, d);
    const bool qwen_ssm = among(arch, {"qwen3next", "qwen35moe", "qwen4exp"});
    kv.u32("ssm.inner_size", qwen_ssm ? 256 : 2 * d.n_embd);
    kv.u32("ssm.conv_kernel", 4);
    kv.u32("ssm.state_size", 128);
    kv.u32("ssm.time_step_rank", d.n_head);
    kv.u32("ssm.group_count", 2);
    kv.u32("kda.head_dim", 128);
    kv.flag("kda.safe_gate", true);
    kv.f32("kda.gate_lower_bound", -5.0f);
    kv.u32("wkv.head_size", d.n_embd / d.n_head);
    kv.u32("shortconv.l_cache", 3);

    gguf_set_val_str(g, "tokenizer.ggml.model", "test");
    std::vector<std::string> tokens(d.n_vocab);
    std::vector<const char *> ptrs(d.n_vocab);
    for (uint32_t i = 0; i < d.n_vocab; ++i) {
        tokens[i] = "tok_" + std::to_string(i);
        ptrs[i] = tokens[i].c_str();
    }
    gguf_set_arr_str(g, "tokenizer.ggml.tokens", ptrs.data(), ptrs.size());
    std::vector<float> scores(d.n_vocab, 0.0f);
    gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores.data(), scores.size());
}

struct FillState {
    uint64_t seed;
    float stdev;
};

// Normal values per tensor, seeded by its name so the file does not depend on load order.
// Recurrent decay parameters (ssm_a) must be negative or the state grows without bound.
void fill_tensor(ggml_tensor * t, void * user) {
    const auto * st = static_cast<const FillState *>(user);
    std::mt19937_64 rng(st->seed ^ std::hash<std::string>{}(t->name));
    std::normal_distribution<float> normal(0.0f, st->stdev);
    const bool negative = std::strstr(t->name, "ssm_a") != nullptr;
    const int64_t n = ggml_nelements(t);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto & x : v) {
        x = normal(rng);
        x = negative ? -std::abs(x) : x;
    }
    if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    } else if (t->type == GGML_TYPE_F16) {
        std::vector<ggml_fp16_t> h(v.size());
        ggml_fp32_to_fp16_row(v.data(), h.data(), n);
        ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
    } else {
        throw Error(std::string("arch fixture: tensor ") + t->name + " has type " + ggml_type_name(t->type) +
                    ", expected F32 or F16");
    }
}

// The saver writes the optional per-tensor scales (<name>.scale, <name>.input_scale) that
// llama.cpp creates for every block when it builds a model to fill, the MTP blocks included;
// but when it loads a file without MTP it creates no scales for those blocks, and counts them
// as tensors too many. Real files carry none: rewrite the fixture without them.
void drop_mtp_scales(const std::string & path, uint32_t first_mtp) {
    ggml_context * data = nullptr;
    gguf_init_params params{/*no_alloc =*/false, &data};
    gguf_context * in = gguf_init_from_file(path.c_str(), params);
    if (!in) {
        throw Error("arch fixture: cannot read back " + path);
    }
    gguf_context * out = gguf_init_empty();
    gguf_set_kv(out, in);
    const std::regex mtp_scale(R"(^blk\.(\d+)\..*\.(input_)?scale$)");
    std::smatch m;
    for (int64_t i = 0; i < gguf_get_n_tensors(in); ++i) {
        const std::string name = gguf_get_tensor_name(in, i);
        if (std::regex_match(name, m, mtp_scale) && std::stoul(m[1].str()) >= first_mtp) {
            continue;
        }
        gguf_add_tensor(out, ggml_get_tensor(data, name.c_str()));
    }
    const bool ok = gguf_write_to_file(out, path.c_str(), false);
    gguf_free(out);
    gguf_free(in);
    ggml_free(data);
    if (!ok) {
        throw Error("arch fixture: cannot write " + path);
    }
}

}  // namespace

const std::vector<std::string> & moe_architectures() {
    // Every architecture llama.cpp builds a routed-expert FFN for (llama-model.cpp and
    // llama-graph.cpp's build_moe_ffn callers in the pinned tree).
    static const std::vector<std::string> all = {
        "llama",      "llama4",      "grok",        "qwen2moe",  "qwen3moe",     "qwen3next",      "qwen3vlmoe",
        "qwen35moe",  "qwen4exp",    "phimoe",      "dbrx",      "olmoe",        "arctic",         "deepseek",
        "deepseek2",  "deepseek32",  "dots3note",   "deepseek4", "glm4moe",      "glm-dsa",        "exaone-moe",
        "bailingmoe", "bailingmoe2", "bailingmoe3", "dots1",     "afmoe",        "ernie4_5-moe",   "hunyuan-moe",
        "hy_v3",      "hy_v4",       "gpt-oss",     "lfm2moe",   "smallthinker", "llada-moe",      "grovemoe",
        "minimax-01", "minimax-m2",  "minimax-m3",  "rnd1",      "paddleocr",    "mimo2",          "kimi-linear",
        "kimi-k3",    "step35",      "mistral4",    "mellum",    "laguna",       "maple",          "cohere2moe",
        "granitemoe", "minicpm",     "granite",     "refact",    "mistral3",     "nemotron_h_moe", "ernie4_5",
    };
    return all;
}

void write_arch_fixture(const std::string & arch, const std::string & path, const ArchFixtureOptions & opts) {
    if (arch == "step35") {
        // llama.cpp's model saver refuses this architecture (an assertion, not an error).
        throw Error("llama.cpp cannot save step35 models, so no fixture can be written for it");
    }
    Dims d = dims_for(arch);
    d.n_layer += opts.n_nextn;  // the MTP layers are the last blocks
    gguf_context * meta = gguf_init_empty();
    write_metadata(meta, arch, d, opts);
    if (opts.n_nextn > 0) {
        gguf_set_val_u32(meta, (arch + ".nextn_predict_layers").c_str(), opts.n_nextn);
    }
    llama_model_params mp = llama_model_default_params();
    mp.load_mtp = opts.n_nextn > 0;  // so that llama.cpp creates (and saves) their tensors
    FillState fill{opts.seed, opts.stdev};
    llama_model * model = nullptr;
    try {
        model = llama_model_init_from_user(meta, fill_tensor, &fill, mp);
    } catch (...) {
        gguf_free(meta);
        throw;
    }
    gguf_free(meta);
    if (!model) {
        throw Error("llama.cpp could not create a " + arch + " model from the fixture's hyperparameters");
    }
    llama_model_save_to_file(model, path.c_str());
    llama_model_free(model);
    if (opts.n_nextn > 0) {
        drop_mtp_scales(path, d.n_layer - opts.n_nextn);
    }
}

}  // namespace epq
