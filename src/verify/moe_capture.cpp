#include "verify/moe_capture.h"

#include "ggml-cpu.h"

#include <cstring>

namespace epq {

namespace {

// "ffn_moe_topk-12" -> ("ffn_moe_topk", 12)
bool split_name(const char * name, std::string * base, int * layer) {
    const char * dash = std::strrchr(name, '-');
    if (!dash || !dash[1]) {
        return false;
    }
    for (const char * p = dash + 1; *p; ++p) {  // "ffn_moe_out-3 (reshaped)" is not the node itself
        if (*p < '0' || *p > '9') {
            return false;
        }
    }
    *base = std::string(name, static_cast<size_t>(dash - name));
    *layer = std::atoi(dash + 1);
    return true;
}

// Copies a (possibly strided) 2-D or 3-D host tensor as [outer][ne0] rows of T.
template <typename T>
std::vector<T> rows(const ggml_tensor * t, int64_t * ne0, int64_t * n_rows) {
    *ne0 = t->ne[0];
    *n_rows = t->ne[1] * t->ne[2] * t->ne[3];
    std::vector<T> out(static_cast<size_t>(*ne0 * *n_rows));
    std::vector<char> tmp;
    const char * base = static_cast<const char *>(t->data);
    if (t->buffer && !ggml_backend_buffer_is_host(t->buffer)) {
        tmp.resize(ggml_nbytes(t));
        ggml_backend_tensor_get(t, tmp.data(), 0, tmp.size());
        base = tmp.data();
    }
    size_t r = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3) {
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2) {
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1, ++r) {
                for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
                    std::memcpy(&out[r * static_cast<size_t>(*ne0) + static_cast<size_t>(i0)],
                                base + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], sizeof(T));
                }
            }
        }
    }
    return out;
}

void record_node(MoeLayerCapture * c, const std::string & base, const ggml_tensor * t) {
    MoeLayerCapture::Node n;
    n.op = t->op;
    std::memcpy(n.params, t->op_params, sizeof n.params);
    n.src0_op = t->src[0] ? t->src[0]->op : GGML_OP_NONE;
    c->nodes[base] = n;
}

float param_f32(const MoeLayerCapture::Node & n, int i) {
    float f;
    std::memcpy(&f, &n.params[i], 4);
    return f;
}

// The activation node build_moe_ffn named, and which recipe op it is when its ggml op matches.
struct ActNode {
    const char * name;
    ref::FfnOp op;
    int ggml_op, sub_op;  // GGML_OP_GLU with a glu op, or GGML_OP_UNARY with a unary op, or another op
};
const ActNode kActNodes[] = {
    {"ffn_moe_swiglu_oai", ref::FfnOp::SwiGLUOai, GGML_OP_GLU, GGML_GLU_OP_SWIGLU_OAI},
    {"ffn_moe_swiglu", ref::FfnOp::SwiGLU, GGML_OP_GLU, GGML_GLU_OP_SWIGLU},
    {"ffn_moe_geglu", ref::FfnOp::GeGLU, GGML_OP_GLU, GGML_GLU_OP_GEGLU},
    {"ffn_moe_reglu", ref::FfnOp::ReGLU, GGML_OP_GLU, GGML_GLU_OP_REGLU},
    {"ffn_moe_relu_sqr", ref::FfnOp::ReLUSqr, GGML_OP_SQR, -1},
    {"ffn_moe_silu", ref::FfnOp::SiLU, GGML_OP_UNARY, GGML_UNARY_OP_SILU},
    {"ffn_moe_gelu", ref::FfnOp::GELU, GGML_OP_UNARY, GGML_UNARY_OP_GELU},
    {"ffn_moe_relu", ref::FfnOp::ReLU, GGML_OP_UNARY, GGML_UNARY_OP_RELU},
};

// Nodes build_moe_ffn adds for things the reference does not model.
const char * const kUnmodelled[] = {"ffn_moe_swiglu_limited", "ffn_moe_situ",        "ffn_moe_up_scaled",
                                    "ffn_moe_gate_scaled",    "ffn_moe_down_scaled", "ffn_moe_gate_up_scaled",
                                    "ffn_moe_up_clamped"};

}  // namespace

ref::ExpertRecipe MoeLayerCapture::recipe() const {
    ref::ExpertRecipe r;
    for (const char * name : kUnmodelled) {
        if (nodes.count(name)) {
            r.unsupported = std::string("the graph's ") + name + " node";
            return r;
        }
    }
    const ActNode * found = nullptr;
    for (const auto & a : kActNodes) {
        if (!found && nodes.count(a.name)) {
            found = &a;
        }
    }
    if (!found) {
        r.unsupported = "no expert activation node recognised in the graph";
        return r;
    }
    const Node & n = nodes.at(found->name);
    const int sub = n.op == GGML_OP_GLU || n.op == GGML_OP_UNARY ? n.params[0] : -1;
    if (n.op != found->ggml_op || sub != found->sub_op) {
        r.unsupported = std::string(found->name) + " computed by ggml op " + ggml_op_name(static_cast<ggml_op>(n.op)) +
                        " (sub-op " + std::to_string(sub) + "), not modelled";
        return r;
    }
    r.op = found->op;
    if (r.op == ref::FfnOp::SwiGLUOai) {
        r.alpha = param_f32(n, 2);
        r.limit = param_f32(n, 3);
    }
    if (nodes.count("ffn_moe_weighted")) {
        // Weighted after the FFN, its first source is the down projection (or its bias).
        const int src = nodes.at("ffn_moe_weighted").src0_op;
        r.weight_before_ffn = src != GGML_OP_MUL_MAT_ID && src != GGML_OP_ADD_ID;
    }
    return r;
}

ref::Q8Rounding cpu_q8_rounding() {
    ref::Q8Rounding r;
    // ggml-cpu/arch/x86/quants.c (AVX, AVX2) and arch/arm/quants.c (NEON); other targets use the
    // scalar definition.
    r.scale_127_over_amax = ggml_cpu_has_avx() != 0;
    r.half_to_even = ggml_cpu_has_avx() != 0 || ggml_cpu_has_neon() != 0;
    return r;
}

bool MoeCapture::callback(ggml_tensor * t, bool ask, void * user) {
    std::string base;
    int layer = 0;
    if (!split_name(t->name, &base, &layer)) {
        return ask ? false : true;
    }
    if (ask && base.rfind("ffn_moe_", 0) == 0) {
        record_node(&static_cast<MoeCapture *>(user)->layers[layer], base, t);
    }
    const bool wanted =
        base == "ffn_moe_logits" || base == "ffn_moe_topk" || base == "ffn_moe_weighted" || base == "ffn_moe_out";
    if (ask) {
        return wanted;
    }
    if (!wanted) {
        return true;
    }
    auto & c = static_cast<MoeCapture *>(user)->layers[layer];
    int64_t ne0 = 0, n = 0;
    if (base == "ffn_moe_logits") {
        c.input = rows<float>(t->src[1], &ne0, &n);  // the router's input
        c.n_embd = ne0;
        c.n_tokens = n;
    } else if (base == "ffn_moe_topk") {
        c.ids = rows<int32_t>(t, &ne0, &n);
        c.n_used = ne0;
    } else if (base == "ffn_moe_weighted") {
        const ggml_tensor * w = t->src[1];  // [1, n_used, n_tokens]
        c.weights = rows<float>(w, &ne0, &n);
    } else if (base == "ffn_moe_out") {
        c.output = rows<float>(t, &ne0, &n);
    }
    return true;
}

}  // namespace epq
