#include "synth/model_layout.h"

#include "util/error.h"

#include "gguf.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

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
// Biases small beside the order-one activations they are added to.
ValueDist small_bias() {
    return ValueDist{0.0f, 0.1f};
}

class LayoutBuilder {
public:
    LayoutBuilder(const SynthConfig & cfg, ModelLayout & out) : cfg_(cfg), out_(out) {}

    // A tensor whose type is chosen by --type `kind` (or its llama-quantize fallback).
    void add(const std::string & name, std::vector<int64_t> ne, const std::string & kind, ValueDist dist) {
        if (writes_residual(name)) {
            dist.stddev *= cfg_.routing == RoutingProfile::flat ? kFlatResidualScale : cfg_.residual_scale;
            const auto & ra = cfg_.recent_attention;
            if (cfg_.routing == RoutingProfile::realistic && ra.sharpness > 0.0f &&
                ends_with(name, ".attn_output.weight") && layer_of(name) < ra.gain_layers) {
                dist.stddev *= ra.output_gain;  // the context enters here: see RecentAttention
            }
        }
        const ggml_type type = cfg_.quant.for_row(kind, ne[0]);
        out_.tensors.push_back(TensorSpec{name, std::move(ne), type, dist, kind});
    }
    // A tensor that llama.cpp needs in F32 (norms, routers, recurrent-state parameters).
    void add_f32(const std::string & name, std::vector<int64_t> ne, ValueDist dist) {
        out_.tensors.push_back(TensorSpec{name, std::move(ne), GGML_TYPE_F32, dist, "f32"});
    }
    void matmul(const std::string & name, int64_t n_in, int64_t n_out, const std::string & kind) {
        add(name, {n_in, n_out}, kind, projection(n_in));
    }

    // The flat routing profile: the matrices that add a layer's output to the residual stream
    // write 1/20 of their usual magnitude, so the stream stays mostly the token's own embedding
    // and routers see little of the context (measured: next-token reuse near top-k / n_expert).
    static constexpr float kFlatResidualScale = 0.05f;
    // The layer number of "blk.N.<rest>".
    static uint32_t layer_of(const std::string & name) {
        return static_cast<uint32_t>(std::strtoul(name.c_str() + std::strlen("blk."), nullptr, 10));
    }
    static bool ends_with(const std::string & name, const char * suffix) {
        const size_t n = std::strlen(suffix);
        return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
    }
    static bool writes_residual(const std::string & name) {
        for (const char * out : {".attn_output.weight", ".ssm_out.weight", ".ffn_down_exps.weight",
                                 ".ffn_down_shexp.weight", ".ffn_down.weight"}) {
            if (ends_with(name, out)) {
                return true;
            }
        }
        return false;
    }

    TensorSpec & tensor(const std::string & name) {
        for (auto it = out_.tensors.rbegin(); it != out_.tensors.rend(); ++it) {
            if (it->name == name) {
                return *it;
            }
        }
        throw Error("synthetic layout: no tensor " + name);
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

    // Makes layer `il`'s attention (already added: attn_q, attn_k and their per-head norms) favour
    // recent tokens. The first `n_rot` dims of a head rotate in NEOX pairs (pair p: dims p and
    // p + n_rot / 2); attn_q holds `q_rows` rows per head, the query's head_dim first (gated
    // attention adds its gate after). See SynthConfig::RecentAttention.
    void recent_attention(uint32_t il, int64_t n_rot, int64_t q_rows) {
        const auto & ra = cfg_.recent_attention;
        if (cfg_.routing != RoutingProfile::realistic || ra.sharpness <= 0.0f) {
            return;
        }
        const int64_t hd = cfg_.shape.head_dim;
        const auto on_band = [ra, n_rot](int64_t dim) {
            const int64_t pair = dim % (n_rot / 2);
            return dim < n_rot && pair >= ra.first_pair && pair <= ra.last_pair;
        };
        // On the band, every row reads the shared embedding direction (all ones) alone.
        const float shared = 1.0f / std::sqrt(static_cast<float>(cfg_.shape.n_embd));
        const auto rows = [on_band, shared](int64_t stride) {
            return ValueShaper([on_band, shared, stride](std::vector<float> & v, int64_t n_per_row) {
                for (size_t r = 0; r * n_per_row < v.size(); ++r) {
                    if (on_band(static_cast<int64_t>(r) % stride)) {
                        std::fill(v.begin() + r * n_per_row, v.begin() + (r + 1) * n_per_row, shared);
                    }
                }
            });
        };
        const ValueShaper norm = [on_band, ra](std::vector<float> & v, int64_t) {
            for (size_t i = 0; i < v.size(); ++i) {
                v[i] = on_band(static_cast<int64_t>(i)) ? ra.sharpness : 0.0f;
            }
        };
        tensor(blk(il, "attn_q.weight")).shape_values = rows(q_rows);
        tensor(blk(il, "attn_k.weight")).shape_values = rows(hd);
        tensor(blk(il, "attn_q_norm.weight")).shape_values = norm;
        tensor(blk(il, "attn_k_norm.weight")).shape_values = norm;
    }

    // gpt-oss adds a bias after every expert matmul and to the router logits.
    void expert_biases(uint32_t il) {
        const auto & s = cfg_.shape;
        add_f32(blk(il, "ffn_gate_inp.bias"), {s.n_expert}, small_bias());
        add_f32(blk(il, "ffn_gate_exps.bias"), {s.n_ff_exp, s.n_expert}, small_bias());
        add_f32(blk(il, "ffn_up_exps.bias"), {s.n_ff_exp, s.n_expert}, small_bias());
        add_f32(blk(il, "ffn_down_exps.bias"), {s.n_embd, s.n_expert}, small_bias());
    }

    // Shared experts always on beside the routed ones (deepseek2: n_expert_shared of n_ff_exp,
    // stored as one wider FFN).
    void shared_experts(uint32_t il, int64_t n_ff_sh) {
        const int64_t n_embd = cfg_.shape.n_embd;
        matmul(blk(il, "ffn_gate_shexp.weight"), n_embd, n_ff_sh, "shexp");
        matmul(blk(il, "ffn_up_shexp.weight"), n_embd, n_ff_sh, "shexp");
        matmul(blk(il, "ffn_down_shexp.weight"), n_ff_sh, n_embd, "shexp");
    }

    void dense_ffn(uint32_t il) {
        const int64_t n_embd = cfg_.shape.n_embd, n_ff = cfg_.shape.n_ff;
        matmul(blk(il, "ffn_gate.weight"), n_embd, n_ff, "ffn");
        matmul(blk(il, "ffn_up.weight"), n_embd, n_ff, "ffn");
        matmul(blk(il, "ffn_down.weight"), n_ff, n_embd, "ffn");
    }

    void embeddings(int64_t n_vocab) {
        const float offset = cfg_.routing == RoutingProfile::realistic ? cfg_.embd_offset : 0.0f;
        add("token_embd.weight", {cfg_.shape.n_embd, n_vocab}, "token_embd", ValueDist{offset, 1.0f});
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
    if (s.rope_yarn_factor > 0.0f) {
        gguf_set_val_str(g, (a + ".rope.scaling.type").c_str(), "yarn");
        gguf_set_val_f32(g, (a + ".rope.scaling.factor").c_str(), s.rope_yarn_factor);
        gguf_set_val_u32(g, (a + ".rope.scaling.original_context_length").c_str(), s.rope_yarn_orig_ctx);
    }
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
        b.recent_attention(il, s.head_dim, s.head_dim);
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

// Partial rotary: a quarter of each head rotates.
uint32_t qwen35_rotary_dims(const SynthShape & s) {
    return s.head_dim / 4;
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
        const uint32_t n_rot = qwen35_rotary_dims(sh);
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
            b.recent_attention(il, qwen35_rotary_dims(s), 2 * hd);
        }
        b.add_f32(n("post_attention_norm.weight"), {s.n_embd}, near_one());
        b.routed_experts(il);
        b.add_f32(n("ffn_gate_inp_shexp.weight"), {s.n_embd}, projection(s.n_embd));
        b.shared_experts(il, s.n_ff_shexp);
    }
    b.head(n_vocab);
}

void write_gpt_oss_kv(gguf_context * g, const SynthConfig & cfg) {
    const auto & s = cfg.shape;
    set_common_kv(g, cfg);
    gguf_set_val_u32(g, "gpt-oss.feed_forward_length", s.n_ff_exp);
    gguf_set_val_u32(g, "gpt-oss.expert_feed_forward_length", s.n_ff_exp);
    gguf_set_val_u32(g, "gpt-oss.attention.key_length", s.head_dim);
    gguf_set_val_u32(g, "gpt-oss.attention.value_length", s.head_dim);
    // The pattern (sliding window on even layers, full attention on odd) is llama.cpp's default
    // for this architecture, so like the official files only the window is written.
    gguf_set_val_u32(g, "gpt-oss.attention.sliding_window", s.n_swa);
}

void layout_gpt_oss(const SynthConfig & cfg, int64_t n_vocab, ModelLayout & out) {
    const auto & s = cfg.shape;
    LayoutBuilder b(cfg, out);
    out.write_metadata = [cfg](gguf_context * g) { write_gpt_oss_kv(g, cfg); };
    b.embeddings(n_vocab);
    const int64_t q = int64_t(s.head_dim) * s.n_head, kv = int64_t(s.head_dim) * s.n_head_kv;
    for (uint32_t il = 0; il < s.n_layer; ++il) {
        auto n = [il](const std::string & rest) { return LayoutBuilder::blk(il, rest); };
        b.add_f32(n("attn_norm.weight"), {s.n_embd}, near_one());
        b.matmul(n("attn_q.weight"), s.n_embd, q, "attn");
        b.add_f32(n("attn_q.bias"), {q}, small_bias());
        b.matmul(n("attn_k.weight"), s.n_embd, kv, "attn");
        b.add_f32(n("attn_k.bias"), {kv}, small_bias());
        b.matmul(n("attn_v.weight"), s.n_embd, kv, "attn");
        b.add_f32(n("attn_v.bias"), {kv}, small_bias());
        b.matmul(n("attn_output.weight"), q, s.n_embd, "attn");
        b.add_f32(n("attn_output.bias"), {s.n_embd}, small_bias());
        // Sinks are per-head logits of a virtual token every query may attend to instead.
        b.add_f32(n("attn_sinks.weight"), {s.n_head}, ValueDist{0.0f, 0.0f, -1.0f, 1.0f});
        b.add_f32(n("post_attention_norm.weight"), {s.n_embd}, near_one());
        b.routed_experts(il);
        b.expert_biases(il);
    }
    b.head(n_vocab);
}

void write_deepseek2_kv(gguf_context * g, const SynthConfig & cfg) {
    const auto & s = cfg.shape;
    set_common_kv(g, cfg);
    gguf_set_val_u32(g, "deepseek2.feed_forward_length", s.n_ff);
    gguf_set_val_u32(g, "deepseek2.leading_dense_block_count", s.n_dense_lead);
    gguf_set_val_u32(g, "deepseek2.expert_feed_forward_length", s.n_ff_exp);
    gguf_set_val_u32(g, "deepseek2.expert_shared_count", s.n_expert_shared);
    gguf_set_val_f32(g, "deepseek2.expert_weights_scale", s.expert_weights_scale);
    gguf_set_val_bool(g, "deepseek2.expert_weights_norm", s.expert_weights_norm);
    gguf_set_val_u32(g, "deepseek2.expert_gating_func", s.sigmoid_gating ? 2u : 1u);  // llama.cpp: 1 softmax, 2 sigmoid
    gguf_set_val_u32(g, "deepseek2.attention.q_lora_rank", s.q_lora_rank);
    gguf_set_val_u32(g, "deepseek2.attention.kv_lora_rank", s.kv_lora_rank);
    // As the converter writes MLA files: the cached "head" is the latent plus the rotary key,
    // and the per-head sizes of the decompressed attention are the *_mla keys.
    gguf_set_val_u32(g, "deepseek2.attention.key_length", s.kv_lora_rank + s.qk_rope_dim);
    gguf_set_val_u32(g, "deepseek2.attention.value_length", s.kv_lora_rank);
    gguf_set_val_u32(g, "deepseek2.attention.key_length_mla", s.head_dim);
    gguf_set_val_u32(g, "deepseek2.attention.value_length_mla", s.v_head_dim);
    gguf_set_val_u32(g, "deepseek2.rope.dimension_count", s.qk_rope_dim);
    if (s.rope_yarn_factor > 0.0f) {
        gguf_set_val_f32(g, "deepseek2.rope.scaling.yarn_log_multiplier", 0.0707f);  // 0.1 x mscale_all_dim 0.707
    }
}

// Multi-head latent attention: keys and values are decompressed per head from one latent vector
// (attn_k_b, attn_v_b), queries directly or through their own low-rank projection.
void mla_attention(LayoutBuilder & b, const SynthShape & s, uint32_t il) {
    auto n = [il](const std::string & rest) { return LayoutBuilder::blk(il, rest); };
    const int64_t q = int64_t(s.head_dim) * s.n_head;
    if (s.q_lora_rank > 0) {
        b.matmul(n("attn_q_a.weight"), s.n_embd, s.q_lora_rank, "attn");
        b.add_f32(n("attn_q_a_norm.weight"), {s.q_lora_rank}, near_one());
        b.matmul(n("attn_q_b.weight"), s.q_lora_rank, q, "attn");
    } else {
        b.matmul(n("attn_q.weight"), s.n_embd, q, "attn");
    }
    b.matmul(n("attn_kv_a_mqa.weight"), s.n_embd, s.kv_lora_rank + s.qk_rope_dim, "attn");
    b.add_f32(n("attn_kv_a_norm.weight"), {s.kv_lora_rank}, near_one());
    const int64_t qk_nope = s.head_dim - s.qk_rope_dim;
    b.add(n("attn_k_b.weight"), {qk_nope, s.kv_lora_rank, s.n_head}, "attn", projection(qk_nope));
    b.add(n("attn_v_b.weight"), {s.kv_lora_rank, s.v_head_dim, s.n_head}, "attn", projection(s.kv_lora_rank));
    b.matmul(n("attn_output.weight"), int64_t(s.v_head_dim) * s.n_head, s.n_embd, "attn");
}

void layout_deepseek2(const SynthConfig & cfg, int64_t n_vocab, ModelLayout & out) {
    const auto & s = cfg.shape;
    LayoutBuilder b(cfg, out);
    out.write_metadata = [cfg](gguf_context * g) { write_deepseek2_kv(g, cfg); };
    b.embeddings(n_vocab);
    for (uint32_t il = 0; il < s.n_layer; ++il) {
        auto n = [il](const std::string & rest) { return LayoutBuilder::blk(il, rest); };
        b.add_f32(n("attn_norm.weight"), {s.n_embd}, near_one());
        mla_attention(b, s, il);
        b.add_f32(n("ffn_norm.weight"), {s.n_embd}, near_one());
        if (il < s.n_dense_lead) {
            b.dense_ffn(il);
            continue;
        }
        b.routed_experts(il);
        if (s.sigmoid_gating) {
            // Added to the sigmoid scores for selection only: shifts which experts win.
            b.add_f32(n("exp_probs_b.bias"), {s.n_expert}, ValueDist{0.0f, 0.05f});
        }
        b.shared_experts(il, int64_t(s.n_ff_exp) * s.n_expert_shared);
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
    } else if (cfg.shape.arch == "gpt-oss") {
        layout_gpt_oss(cfg, n_vocab, out);
    } else if (cfg.shape.arch == "deepseek2") {
        layout_deepseek2(cfg, n_vocab, out);
    } else {
        throw Error("unknown architecture '" + cfg.shape.arch +
                    "' (supported: qwen35moe, qwen3moe, olmoe, gpt-oss, deepseek2)");
    }
    return out;
}

}  // namespace epq
