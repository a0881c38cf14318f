#include "synth/model_layout.h"

#include "util/error.h"

#include "gguf.h"

#include <cmath>

namespace epq {

namespace {

// Magnitudes that keep activations of order one through every layer: a projection with n
// inputs draws N(0, 1/n) so its output has the variance of its input; norms are near 1.
ValueDist projection(int64_t n_in) {
    return ValueDist{0.0f, 1.0f / std::sqrt(static_cast<float>(n_in))};
}
ValueDist near_one() {
    return ValueDist{1.0f, 0.0f, 0.9f, 1.1f};
}

class LayoutBuilder {
public:
    LayoutBuilder(const SynthConfig & cfg, ModelLayout & out) : cfg_(cfg), out_(out) {}

    // A tensor whose type is chosen by --type `kind`.
    void add(const std::string & name, std::vector<int64_t> ne, const std::string & kind, ValueDist dist) {
        out_.tensors.push_back(TensorSpec{name, std::move(ne), cfg_.quant.get(kind), dist, kind});
    }
    // A tensor that llama.cpp needs in F32 (norms, routers, recurrent-state parameters).
    void add_f32(const std::string & name, std::vector<int64_t> ne, ValueDist dist) {
        out_.tensors.push_back(TensorSpec{name, std::move(ne), GGML_TYPE_F32, dist, "f32"});
    }
    void matmul(const std::string & name, int64_t n_in, int64_t n_out, const std::string & kind) {
        add(name, {n_in, n_out}, kind, projection(n_in));
    }

    static std::string blk(uint32_t il, const std::string & rest) { return "blk." + std::to_string(il) + "." + rest; }

    // Routed experts; the down projection's kind alternates by half so the mixed plan yields
    // two expert sizes.
    void routed_experts(uint32_t il) {
        const auto & s = cfg_.shape;
        add_f32(blk(il, "ffn_gate_inp.weight"), {s.n_embd, s.n_expert},
                ValueDist{0.0f, 2.0f / std::sqrt(static_cast<float>(s.n_embd))});
        add(blk(il, "ffn_gate_exps.weight"), {s.n_embd, s.n_ff_exp, s.n_expert}, "ffn_gate_exps", projection(s.n_embd));
        add(blk(il, "ffn_up_exps.weight"), {s.n_embd, s.n_ff_exp, s.n_expert}, "ffn_up_exps", projection(s.n_embd));
        const bool second_half = il >= s.n_layer / 2;
        add(blk(il, "ffn_down_exps.weight"), {s.n_ff_exp, s.n_embd, s.n_expert},
            second_half ? "ffn_down_exps_alt" : "ffn_down_exps", projection(s.n_ff_exp));
    }

    void embeddings(int64_t n_vocab) {
        add("token_embd.weight", {cfg_.shape.n_embd, n_vocab}, "token_embd", ValueDist{0.0f, 1.0f});
    }
    void head(int64_t n_vocab) {
        add_f32("output_norm.weight", {cfg_.shape.n_embd}, near_one());
        if (!cfg_.shape.tie_embeddings) {
            matmul("output.weight", cfg_.shape.n_embd, n_vocab, "output");
        }
    }

private:
    const SynthConfig & cfg_;
    ModelLayout & out_;
};

void set_common_kv(gguf_context * g, const SynthConfig & cfg) {
    const auto & s = cfg.shape;
    const std::string a = s.arch;
    gguf_set_val_str(g, "general.architecture", a.c_str());
    gguf_set_val_str(g, "general.name", ("epq synthetic " + cfg.preset).c_str());
    gguf_set_val_u32(g, (a + ".context_length").c_str(), s.n_ctx_train);
    gguf_set_val_u32(g, (a + ".embedding_length").c_str(), s.n_embd);
    gguf_set_val_u32(g, (a + ".block_count").c_str(), s.n_layer);
    gguf_set_val_u32(g, (a + ".expert_count").c_str(), s.n_expert);
    gguf_set_val_u32(g, (a + ".expert_used_count").c_str(), s.n_expert_used);
    gguf_set_val_u32(g, (a + ".attention.head_count").c_str(), s.n_head);
    gguf_set_val_u32(g, (a + ".attention.head_count_kv").c_str(), s.n_head_kv);
    gguf_set_val_f32(g, (a + ".rope.freq_base").c_str(), s.rope_theta);
    gguf_set_val_f32(g, (a + ".attention.layer_norm_rms_epsilon").c_str(), s.rms_eps);
    gguf_set_val_str(g, "epq.synth.preset", cfg.preset.c_str());
    gguf_set_val_str(g, "epq.synth.quant", cfg.quant_name.c_str());
    gguf_set_val_u64(g, "epq.synth.seed", cfg.seed);
}

void layout_qwen3moe(const SynthConfig & cfg, int64_t n_vocab, ModelLayout & out) {
    const auto & s = cfg.shape;
    LayoutBuilder b(cfg, out);
    out.write_metadata = [cfg](gguf_context * g) {
        const auto & sh = cfg.shape;
        set_common_kv(g, cfg);
        gguf_set_val_u32(g, "qwen3moe.expert_feed_forward_length", sh.n_ff_exp);
        gguf_set_val_u32(g, "qwen3moe.feed_forward_length", sh.n_ff_exp * sh.n_expert_used);
        gguf_set_val_u32(g, "qwen3moe.attention.key_length", sh.head_dim);
        gguf_set_val_u32(g, "qwen3moe.attention.value_length", sh.head_dim);
    };
    b.embeddings(n_vocab);
    const int64_t q = int64_t(s.head_dim) * s.n_head, kv = int64_t(s.head_dim) * s.n_head_kv;
    for (uint32_t il = 0; il < s.n_layer; ++il) {
        b.add_f32(LayoutBuilder::blk(il, "attn_norm.weight"), {s.n_embd}, near_one());
        b.matmul(LayoutBuilder::blk(il, "attn_q.weight"), s.n_embd, q, "attn");
        b.matmul(LayoutBuilder::blk(il, "attn_k.weight"), s.n_embd, kv, "attn");
        b.matmul(LayoutBuilder::blk(il, "attn_v.weight"), s.n_embd, kv, "attn");
        b.matmul(LayoutBuilder::blk(il, "attn_output.weight"), q, s.n_embd, "attn");
        b.add_f32(LayoutBuilder::blk(il, "attn_q_norm.weight"), {s.head_dim}, near_one());
        b.add_f32(LayoutBuilder::blk(il, "attn_k_norm.weight"), {s.head_dim}, near_one());
        b.add_f32(LayoutBuilder::blk(il, "ffn_norm.weight"), {s.n_embd}, near_one());
        b.routed_experts(il);
    }
    b.head(n_vocab);
}

void layout_olmoe(const SynthConfig & cfg, int64_t n_vocab, ModelLayout & out) {
    const auto & s = cfg.shape;
    LayoutBuilder b(cfg, out);
    out.write_metadata = [cfg](gguf_context * g) {
        set_common_kv(g, cfg);
        // olmoe reads the expert hidden size from feed_forward_length.
        gguf_set_val_u32(g, "olmoe.feed_forward_length", cfg.shape.n_ff_exp);
    };
    b.embeddings(n_vocab);
    for (uint32_t il = 0; il < s.n_layer; ++il) {
        b.add_f32(LayoutBuilder::blk(il, "attn_norm.weight"), {s.n_embd}, near_one());
        b.matmul(LayoutBuilder::blk(il, "attn_q.weight"), s.n_embd, s.n_embd, "attn");
        b.matmul(LayoutBuilder::blk(il, "attn_k.weight"), s.n_embd, s.n_embd, "attn");
        b.matmul(LayoutBuilder::blk(il, "attn_v.weight"), s.n_embd, s.n_embd, "attn");
        b.matmul(LayoutBuilder::blk(il, "attn_output.weight"), s.n_embd, s.n_embd, "attn");
        // OLMoE normalises q and k over the full width, not per head.
        b.add_f32(LayoutBuilder::blk(il, "attn_q_norm.weight"), {s.n_embd}, near_one());
        b.add_f32(LayoutBuilder::blk(il, "attn_k_norm.weight"), {s.n_embd}, near_one());
        b.add_f32(LayoutBuilder::blk(il, "ffn_norm.weight"), {s.n_embd}, near_one());
        b.routed_experts(il);
    }
    b.head(n_vocab);
}

bool qwen35_is_recurrent(const SynthShape & s, uint32_t il) {
    return (il + 1) % s.full_attn_interval != 0;
}

void layout_qwen35moe(const SynthConfig & cfg, int64_t n_vocab, ModelLayout & out) {
    const auto & s = cfg.shape;
    LayoutBuilder b(cfg, out);
    out.write_metadata = [cfg](gguf_context * g) {
        const auto & sh = cfg.shape;
        set_common_kv(g, cfg);
        gguf_set_val_u32(g, "qwen35moe.expert_feed_forward_length", sh.n_ff_exp);
        gguf_set_val_u32(g, "qwen35moe.expert_shared_feed_forward_length", sh.n_ff_shexp);
        gguf_set_val_u32(g, "qwen35moe.feed_forward_length", sh.n_ff_shexp);
        gguf_set_val_u32(g, "qwen35moe.attention.key_length", sh.head_dim);
        gguf_set_val_u32(g, "qwen35moe.attention.value_length", sh.head_dim);
        // Partial rotary over a quarter of the head, split into interleaved M-RoPE sections
        // (counted in pairs) as the official converter writes them.
        const uint32_t n_rot = sh.head_dim / 4;
        gguf_set_val_u32(g, "qwen35moe.rope.dimension_count", n_rot);
        const uint32_t pairs = n_rot / 2;
        const int32_t sections[4] = {int32_t((pairs + 2) / 3), int32_t((pairs + 1) / 3), int32_t(pairs / 3), 0};
        gguf_set_arr_data(g, "qwen35moe.rope.dimension_sections", GGUF_TYPE_INT32, sections, 4);
        gguf_set_val_u32(g, "qwen35moe.ssm.conv_kernel", sh.ssm_d_conv);
        gguf_set_val_u32(g, "qwen35moe.ssm.state_size", sh.ssm_head_k_dim);
        gguf_set_val_u32(g, "qwen35moe.ssm.group_count", sh.ssm_n_k_heads);
        gguf_set_val_u32(g, "qwen35moe.ssm.time_step_rank", sh.ssm_n_v_heads);
        gguf_set_val_u32(g, "qwen35moe.ssm.inner_size", sh.ssm_n_v_heads * sh.ssm_head_v_dim);
        gguf_set_val_u32(g, "qwen35moe.full_attention_interval", sh.full_attn_interval);
        // The layer pattern as a BOOL array, exactly as the official converter writes it.
        std::vector<int8_t> recurrent(sh.n_layer);
        for (uint32_t il = 0; il < sh.n_layer; ++il) {
            recurrent[il] = qwen35_is_recurrent(sh, il) ? 1 : 0;
        }
        gguf_set_arr_data(g, "qwen35moe.attention.recurrent_layers", GGUF_TYPE_BOOL, recurrent.data(),
                          recurrent.size());
    };
    b.embeddings(n_vocab);
    const int64_t hd = s.head_dim;
    const int64_t key_dim = int64_t(s.ssm_head_k_dim) * s.ssm_n_k_heads;
    const int64_t value_dim = int64_t(s.ssm_head_v_dim) * s.ssm_n_v_heads;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    for (uint32_t il = 0; il < s.n_layer; ++il) {
        auto n = [il](const std::string & rest) { return LayoutBuilder::blk(il, rest); };
        b.add_f32(n("attn_norm.weight"), {s.n_embd}, near_one());
        if (qwen35_is_recurrent(s, il)) {
            b.matmul(n("attn_qkv.weight"), s.n_embd, conv_dim, "attn");
            b.matmul(n("attn_gate.weight"), s.n_embd, value_dim, "attn");
            b.add_f32(n("ssm_conv1d.weight"), {s.ssm_d_conv, conv_dim},
                      ValueDist{0.0f, 1.0f / std::sqrt(static_cast<float>(s.ssm_d_conv))});
            b.add_f32(n("ssm_dt.bias"), {s.ssm_n_v_heads}, ValueDist{0.0f, 0.0f, -0.5f, 0.5f});
            // ssm_a holds -exp(A_log): negative, so the state decays instead of growing.
            b.add_f32(n("ssm_a"), {s.ssm_n_v_heads}, ValueDist{0.0f, 0.0f, -8.0f, -0.5f});
            b.matmul(n("ssm_beta.weight"), s.n_embd, s.ssm_n_v_heads, "attn");
            b.matmul(n("ssm_alpha.weight"), s.n_embd, s.ssm_n_v_heads, "attn");
            b.add_f32(n("ssm_norm.weight"), {s.ssm_head_v_dim}, near_one());
            b.matmul(n("ssm_out.weight"), value_dim, s.n_embd, "attn");
        } else {
            // Query and output gate interleaved per head: 2 x head_dim x n_head rows.
            b.matmul(n("attn_q.weight"), s.n_embd, 2 * hd * s.n_head, "attn");
            b.matmul(n("attn_k.weight"), s.n_embd, hd * s.n_head_kv, "attn");
            b.matmul(n("attn_v.weight"), s.n_embd, hd * s.n_head_kv, "attn");
            b.matmul(n("attn_output.weight"), hd * s.n_head, s.n_embd, "attn");
            b.add_f32(n("attn_q_norm.weight"), {hd}, near_one());
            b.add_f32(n("attn_k_norm.weight"), {hd}, near_one());
        }
        b.add_f32(n("post_attention_norm.weight"), {s.n_embd}, near_one());
        b.routed_experts(il);
        b.add_f32(n("ffn_gate_inp_shexp.weight"), {s.n_embd}, projection(s.n_embd));
        b.matmul(n("ffn_gate_shexp.weight"), s.n_embd, s.n_ff_shexp, "shexp");
        b.matmul(n("ffn_up_shexp.weight"), s.n_embd, s.n_ff_shexp, "shexp");
        b.matmul(n("ffn_down_shexp.weight"), s.n_ff_shexp, s.n_embd, "shexp");
    }
    b.head(n_vocab);
}

}  // namespace

ModelLayout build_layout(const SynthConfig & cfg, int64_t n_vocab) {
    ModelLayout out;
    if (cfg.shape.arch == "qwen3moe") {
        layout_qwen3moe(cfg, n_vocab, out);
    } else if (cfg.shape.arch == "olmoe") {
        layout_olmoe(cfg, n_vocab, out);
    } else if (cfg.shape.arch == "qwen35moe") {
        layout_qwen35moe(cfg, n_vocab, out);
    } else {
        throw Error("unknown architecture '" + cfg.shape.arch + "' (supported: qwen35moe, qwen3moe, olmoe)");
    }
    return out;
}

}  // namespace epq
