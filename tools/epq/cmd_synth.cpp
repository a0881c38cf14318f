#include "commands.h"

#include "engine/llama_log.h"
#include "synth/arch_fixture.h"
#include "synth/synthesizer.h"
#include "util/byte_size.h"
#include "util/error.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace epq::cli {

namespace {

std::string preset_help() {
    std::string s = "shape preset:";
    for (const auto & p : list_presets()) {
        s += "\n  " + p.name + ": " + p.description;
    }
    return s;
}

// --type KIND=TYPE: the user chose these types, so a shape they do not fit is an error.
void apply_type(QuantPlan & plan, const std::string & kv) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) {
        throw Error("--type expects KIND=TYPE, got '" + kv + "'");
    }
    const std::string kind = kv.substr(0, eq);
    const ggml_type t = parse_ggml_type(kv.substr(eq + 1));
    const auto & kinds = quant_kinds();
    if (kind == "experts") {
        for (const auto & k : expert_kinds()) {
            plan.choose(k, t);
        }
    } else if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) {
        plan.choose(kind, t);
    } else {
        std::string names = "experts";
        for (const auto & k : kinds) {
            names += ", " + k;
        }
        throw Error("unknown tensor kind '" + kind + "' in --type; kinds: " + names);
    }
}

}  // namespace

Handler add_synth(CLI::App & app) {
    auto * sub =
        app.add_subcommand("synth", "write a synthetic MoE GGUF (random weights, real shapes, real tokenizer)");
    struct Opts {
        std::string preset, arch, out, quant, routing = "realistic";
        std::vector<std::string> types;
        uint64_t seed = 42;
        uint32_t layers = 0, embd = 0, experts = 0, experts_used = 0, expert_ff = 0, shared_ff = 0;
        uint32_t heads = 0, heads_kv = 0, head_dim = 0, ctx_train = 0, full_attn_interval = 0;
        uint32_t ssm_state = 0, ssm_k_heads = 0, ssm_v_heads = 0, ssm_conv = 0;
        uint32_t shared_experts = 0, dense_ff = 0, sliding_window = 0;
        int64_t dense_layers = -1;  // 0 is a valid choice (every layer MoE), so unset is -1
        bool tie = false, untie = false, quiet = false, header_only = false;
        std::string vocab, split_max_size;
        uint32_t alignment = 0, mtp_layers = 0;
    };
    auto o = std::make_shared<Opts>();
    auto * preset = sub->add_option("--preset", o->preset, preset_help());
    std::string archs;
    for (const auto & a : moe_architectures()) {
        archs += (archs.empty() ? "" : ", ") + a;
    }
    auto * arch = sub->add_option("--arch", o->arch,
                                  "instead of a preset: a tiny F32 model of this architecture, its tensors shaped by "
                                  "llama.cpp's own loader, with llama.cpp's test tokenizer (for exactness checks; "
                                  "honours --experts, --experts-used, --seed): " +
                                      archs);
    preset->excludes(arch);
    sub->add_option("-o,--output", o->out, "output .gguf path")->required();
    sub->add_option("--seed", o->seed, "random seed: the same arguments always give a byte-identical file")
        ->capture_default_str();
    sub->add_option("--quant", o->quant,
                    "expert quantization: 'mixed' (the default of most presets: Q4_K gate/up, down Q6_K in the first "
                    "half of the layers and Q4_K in the rest), 'mxfp4_moe' (gpt-oss's default: MXFP4 experts, Q8_0 "
                    "dense) or one ggml type for every expert (q4_k, q6_k, q8_0, iq2_xxs, tq1_0, mxfp4, f16, ...)");
    sub->add_option("--type", o->types,
                    "KIND=TYPE, repeatable; kinds: token_embd, output, attn, ffn_gate_exps, ffn_up_exps, "
                    "ffn_down_exps, ffn_down_exps_alt (down in the second half of the layers), shexp, ffn (dense "
                    "FFN layers), experts (all four expert kinds)");
    sub->add_option("--routing", o->routing,
                    "routing profile over a text: 'realistic' (skew and token-to-token reuse near published decode "
                    "figures of real MoE models) or 'flat' (near-uniform picks, little reuse: a cache's worst case)")
        ->capture_default_str();
    sub->add_option("--layers", o->layers, "number of layers");
    sub->add_option("--embd", o->embd, "hidden size (n_embd)");
    sub->add_option("--experts", o->experts, "routed experts per layer");
    sub->add_option("--experts-used", o->experts_used, "experts selected per token (top-k)");
    sub->add_option("--expert-ff", o->expert_ff, "routed expert hidden size");
    sub->add_option("--shared-ff", o->shared_ff, "shared expert hidden size (qwen35moe)");
    sub->add_option("--shared-experts", o->shared_experts, "deepseek2: shared experts, each --expert-ff wide");
    sub->add_option("--dense-layers", o->dense_layers, "deepseek2: leading layers with a dense FFN instead of experts")
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--dense-ff", o->dense_ff, "deepseek2: hidden size of those dense FFNs");
    sub->add_option("--sliding-window", o->sliding_window, "gpt-oss: attention window of the even layers");
    sub->add_option("--heads", o->heads, "attention heads");
    sub->add_option("--heads-kv", o->heads_kv, "key/value heads");
    sub->add_option("--head-dim", o->head_dim, "attention head size");
    sub->add_option("--ctx-train", o->ctx_train, "trained context length written to the metadata");
    sub->add_option("--full-attn-interval", o->full_attn_interval, "qwen35moe: every Nth layer is full attention");
    sub->add_option("--ssm-state", o->ssm_state, "qwen35moe: gated delta net head size (ssm.state_size)");
    sub->add_option("--ssm-k-heads", o->ssm_k_heads, "qwen35moe: linear attention key heads (ssm.group_count)");
    sub->add_option("--ssm-v-heads", o->ssm_v_heads, "qwen35moe: linear attention value heads (ssm.time_step_rank)");
    sub->add_option("--ssm-conv", o->ssm_conv, "qwen35moe: convolution kernel (ssm.conv_kernel)");
    sub->add_flag("--tie-embeddings", o->tie, "no output.weight: the head reuses token_embd");
    sub->add_flag("--untie-embeddings", o->untie, "write a separate output.weight");
    sub->add_option("--vocab", o->vocab,
                    "tokenizer: ggml-vocab-NAME.gguf of the pinned llama.cpp (default: the family's)");
    sub->add_option("--split-max-size", o->split_max_size,
                    "write the model split into files of at most this size (30M, 2G), named and tagged as "
                    "llama-gguf-split writes them: OUT-00001-of-0000N.gguf, ...");
    sub->add_option("--alignment", o->alignment,
                    "general.alignment: tensor data aligned to this many bytes (a power of 2; GGUF's default is 32)");
    sub->add_option("--mtp-layers", o->mtp_layers,
                    "--arch: next-token-prediction layers after the trunk (nextn_predict_layers), with their own "
                    "experts, as GLM-4.5 / DeepSeek-V3 / Qwen3.5 files carry them");
    sub->add_flag("--header-only", o->header_only,
                  "write the real header and leave the tensor data a hole of its size (a sparse file): for "
                  "inspecting and planning models of any size (1 TB class: --preset kimi-k2), not for running");
    sub->add_flag("-q,--quiet", o->quiet, "no progress bar");

    return [o]() {
        if (!o->arch.empty()) {
            if (o->routing != "realistic" || !o->split_max_size.empty() || o->alignment != 0) {
                throw Error(
                    "--routing, --split-max-size and --alignment apply to --preset models; split an --arch "
                    "fixture with llama-gguf-split");
            }
            ArchFixtureOptions fo;
            fo.n_expert = o->experts ? o->experts : fo.n_expert;
            fo.n_expert_used = o->experts_used ? o->experts_used : fo.n_expert_used;
            fo.seed = o->seed;
            fo.n_nextn = o->mtp_layers;
            set_llama_verbosity(false);
            write_arch_fixture(o->arch, o->out, fo);
            std::fprintf(stderr, "epq: wrote %s: a tiny %s model shaped by llama.cpp's loader\n", o->out.c_str(),
                         o->arch.c_str());
            return 0;
        }
        if (o->mtp_layers != 0) {
            throw Error("--mtp-layers applies to --arch fixtures (their layers are shaped by llama.cpp's loader)");
        }
        if (o->preset.empty()) {
            throw Error("give --preset NAME (or --arch NAME for an architecture fixture)");
        }
        SynthConfig cfg = make_preset(o->preset);
        cfg.routing = parse_routing_profile(o->routing);
        if (!o->quant.empty()) {
            cfg.quant = make_quant_preset(o->quant);
            cfg.quant_name = o->quant;
        }
        for (const auto & kv : o->types) {
            apply_type(cfg.quant, kv);
            cfg.quant_name += (cfg.quant_name.empty() ? "" : ",") + kv;
        }
        auto & s = cfg.shape;
        auto set = [](uint32_t v, uint32_t & field) {
            if (v) {
                field = v;
            }
        };
        set(o->layers, s.n_layer);
        set(o->embd, s.n_embd);
        set(o->experts, s.n_expert);
        set(o->experts_used, s.n_expert_used);
        set(o->expert_ff, s.n_ff_exp);
        set(o->shared_ff, s.n_ff_shexp);
        set(o->heads, s.n_head);
        set(o->heads_kv, s.n_head_kv);
        set(o->head_dim, s.head_dim);
        set(o->ctx_train, s.n_ctx_train);
        set(o->full_attn_interval, s.full_attn_interval);
        set(o->ssm_state, s.ssm_head_k_dim);
        set(o->ssm_state, s.ssm_head_v_dim);
        set(o->ssm_k_heads, s.ssm_n_k_heads);
        set(o->ssm_v_heads, s.ssm_n_v_heads);
        set(o->ssm_conv, s.ssm_d_conv);
        set(o->shared_experts, s.n_expert_shared);
        set(o->dense_ff, s.n_ff);
        set(o->sliding_window, s.n_swa);
        if (o->dense_layers >= 0) {
            s.n_dense_lead = static_cast<uint32_t>(std::min<int64_t>(o->dense_layers, UINT32_MAX));
        }
        if (o->tie && o->untie) {
            throw Error("--tie-embeddings and --untie-embeddings contradict each other");
        }
        if (o->tie || o->untie) {
            s.tie_embeddings = o->tie;
        }
        if (!o->vocab.empty()) {
            cfg.vocab = o->vocab;
        }
        cfg.seed = o->seed;
        if (!o->split_max_size.empty()) {
            const auto bytes = parse_byte_size(o->split_max_size);
            if (!bytes || *bytes == 0) {
                throw Error("--split-max-size expects a size such as 30M or 2G; got '" + o->split_max_size + "'");
            }
            cfg.split_max_bytes = *bytes;
        }
        if (o->alignment != 0 && ((o->alignment & (o->alignment - 1)) != 0 || o->alignment > (1u << 20))) {
            throw Error("--alignment must be a power of 2 up to 1048576; got " + std::to_string(o->alignment));
        }
        cfg.alignment = o->alignment;

        SynthOptions opts;
        opts.progress = !o->quiet && !o->header_only;
        opts.header_only = o->header_only;
        const SynthResult r = synthesize(cfg, o->out, opts);
        std::string wrote = r.path;
        if (r.files.size() > 1) {
            wrote += " and " + std::to_string(r.files.size() - 1) + " more file" + (r.files.size() > 2 ? "s" : "") +
                     " (" + std::to_string(r.files.size()) + " shards, load the first)";
        }
        if (o->header_only) {
            std::fprintf(stderr,
                         "epq: wrote %s: %s, %llu tensors, %s (header only: the tensor data is a hole, for inspect "
                         "and arena plans, not for running)\n",
                         wrote.c_str(), cfg.shape.arch.c_str(), static_cast<unsigned long long>(r.n_tensors),
                         format_bytes(r.bytes).c_str());
            return 0;
        }
        std::fprintf(
            stderr, "epq: wrote %s: %s, %llu tensors, %s in %.1f s (%s/s)\n", wrote.c_str(), cfg.shape.arch.c_str(),
            static_cast<unsigned long long>(r.n_tensors), format_bytes(r.bytes).c_str(), r.seconds,
            format_bytes(static_cast<uint64_t>(static_cast<double>(r.bytes) / std::max(r.seconds, 1e-9))).c_str());
        return 0;
    };
}

}  // namespace epq::cli
