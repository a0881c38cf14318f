#include "verify/expert_forward.h"

#include "util/error.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <memory>

namespace epq {

namespace {

ggml_tensor * activate(ggml_context * ctx, const ExpertForwardSpec & s, ggml_tensor * gate, ggml_tensor * up) {
    using A = ExpertActivation;
    switch (s.act) {
        case A::swiglu: return ggml_swiglu_split(ctx, gate, up);
        case A::swiglu_oai: return ggml_swiglu_oai(ctx, gate, up, s.alpha, s.limit);
        case A::geglu: return ggml_geglu_split(ctx, gate, up);
        case A::reglu: return ggml_reglu_split(ctx, gate, up);
        case A::silu: return ggml_silu(ctx, up);
        case A::gelu: return ggml_gelu(ctx, up);
        case A::relu: return ggml_relu(ctx, up);
        case A::relu_sqr: return ggml_sqr(ctx, ggml_relu(ctx, up));
    }
    return nullptr;
}

bool gated(ExpertActivation a) {
    using A = ExpertActivation;
    return a == A::swiglu || a == A::swiglu_oai || a == A::geglu || a == A::reglu;
}

// A host vector as a ggml tensor (the graph only reads it).
ggml_tensor * host_f32(ggml_context * ctx, std::vector<float> & v, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
    ggml_tensor * t = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, ne0, ne1, ne2);
    t->data = v.data();
    return t;
}

// Gives a node's output a host buffer of its own and returns the node.
ggml_tensor * into(ggml_tensor * t, std::vector<float> & out) {
    out.resize(static_cast<size_t>(ggml_nelements(t)));
    t->data = out.data();
    return t;
}

// Memory for the nodes between the ones read out (the matmul before its bias, views).
void place_intermediates(ggml_cgraph * gf, std::vector<std::vector<float>> & scratch) {
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        ggml_tensor * n = ggml_graph_node(gf, i);
        if (n->view_src) {
            n->data = static_cast<char *>(n->view_src->data) + n->view_offs;
        } else if (!n->data) {
            scratch.emplace_back(static_cast<size_t>(ggml_nelements(n)));
            n->data = scratch.back().data();
        }
    }
}

void compute_on_cpu(ggml_cgraph * gf, int n_threads) {
    struct BackendFree {
        void operator()(ggml_backend_t b) const { ggml_backend_free(b); }
    };
    std::unique_ptr<ggml_backend, BackendFree> cpu(ggml_backend_cpu_init());
    if (!cpu) {
        throw Error("cannot initialise ggml's CPU backend for the expert forward");
    }
    ggml_backend_cpu_set_n_threads(cpu.get(), n_threads > 0 ? n_threads : 1);
    if (ggml_backend_graph_compute(cpu.get(), gf) != GGML_STATUS_SUCCESS) {
        throw Error("the CPU expert forward failed");
    }
}

struct ContextFree {
    void operator()(ggml_context * c) const { ggml_free(c); }
};

}  // namespace

ExpertForward expert_forward(const ExpertSlotView & view, const std::vector<float> & x, float weight,
                             const ExpertForwardSpec & spec, int n_threads) {
    const auto *gate = view.matrix("gate"), *up = view.matrix("up"), *down = view.matrix("down"),
               *gate_up = view.matrix("gate_up");
    if (!down || !(up || gate_up) || (gated(spec.act) && !gate && !gate_up)) {
        throw Error("layer " + std::to_string(view.layer()) + " lacks the expert matrices its activation needs");
    }
    ExpertForward f;
    const size_t mem = 32 * ggml_tensor_overhead() + ggml_graph_overhead_custom(32, false) + 256;
    std::vector<uint8_t> ctx_mem(mem);
    ggml_init_params ip{mem, ctx_mem.data(), true};
    std::unique_ptr<ggml_context, ContextFree> owner(ggml_init(ip));
    ggml_context * ctx = owner.get();
    const int64_t n_embd = down->placement->n_out;
    std::vector<float> xin(x), wv{weight}, gate_b(spec.gate_b), up_b(spec.up_b), down_b(spec.down_b);
    int32_t slot = view.slot();
    ggml_tensor * xt = host_f32(ctx, xin, n_embd, 1, 1);
    ggml_tensor * it = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, 1);
    it->data = &slot;
    ggml_tensor * wt = host_f32(ctx, wv, 1, 1, 1);
    if (spec.weight_before_ffn) {
        xt = ggml_mul(ctx, xt, wt);
    }
    // Biases as ADD_ID adds them: one float addition per value, the same in a plain add.
    auto biased = [&](ggml_tensor * t, std::vector<float> & b) {
        return b.empty() ? t : ggml_add(ctx, t, host_f32(ctx, b, t->ne[0]));
    };
    ggml_tensor *g = nullptr, *u = nullptr;
    if (gate_up) {
        ggml_tensor * gu = ggml_mul_mat_id(ctx, view.weights(ctx, *gate_up), xt, it);
        const int64_t n_ff = gu->ne[0] / 2;
        g = ggml_cont(ctx, ggml_view_3d(ctx, gu, n_ff, 1, 1, gu->nb[1], gu->nb[2], 0));
        u = ggml_cont(ctx, ggml_view_3d(ctx, gu, n_ff, 1, 1, gu->nb[1], gu->nb[2], n_ff * sizeof(float)));
    } else {
        u = ggml_mul_mat_id(ctx, view.weights(ctx, *up), xt, it);
        g = gate ? ggml_mul_mat_id(ctx, view.weights(ctx, *gate), xt, it) : nullptr;
    }
    // A fused gate_up's bias is split the way its output is (gate half, then up half).
    u = into(biased(u, up_b), f.up);
    g = g ? into(biased(g, gate_b), f.gate) : nullptr;
    ggml_tensor * h = into(activate(ctx, spec, g, u), f.h);
    ggml_tensor * d = into(biased(ggml_mul_mat_id(ctx, view.weights(ctx, *down), h, it), down_b), f.down);
    // With the weight applied before the FFN, llama.cpp's output is down's (copied below).
    ggml_tensor * o = spec.weight_before_ffn ? d : into(ggml_mul(ctx, d, wt), f.out);
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, 32, false);
    ggml_build_forward_expand(gf, o);
    if (g) {
        ggml_build_forward_expand(gf, g);
    }
    std::vector<std::vector<float>> scratch;
    place_intermediates(gf, scratch);
    compute_on_cpu(gf, n_threads);
    if (spec.weight_before_ffn) {
        f.out = f.down;
    }
    return f;
}

}  // namespace epq
