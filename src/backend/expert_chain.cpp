#include "backend/expert_chain.h"

#include <algorithm>

namespace epq {

namespace {

bool in_chain(const std::vector<ggml_tensor *> & chain, const ggml_tensor * t) {
    return std::find(chain.begin(), chain.end(), t) != chain.end();
}

bool rows_f32(const ggml_tensor * t, int64_t n_slots, int64_t n_tokens) {
    return t->type == GGML_TYPE_F32 && t->nb[0] == sizeof(float) && t->ne[1] == n_slots && t->ne[2] == n_tokens &&
           t->ne[3] == 1;
}

// A row input of an elementwise chain node: a chain node, or a view that selects a part of
// each row of one (the gate and up halves of a fused gate_up matmul).
bool row_input_fits(const std::vector<ggml_tensor *> & chain, const ggml_tensor * src, int64_t n_slots,
                    int64_t n_tokens) {
    if (!rows_f32(src, n_slots, n_tokens)) {
        return false;
    }
    if (in_chain(chain, src)) {
        return true;
    }
    const ggml_tensor * base = src->view_src;
    return src->op == GGML_OP_VIEW && base && in_chain(chain, base) && src->nb[1] == base->nb[1] &&
           src->nb[2] == base->nb[2] && src->view_offs + src->ne[0] * sizeof(float) <= base->ne[0] * sizeof(float);
}

}  // namespace

bool is_layout_node(const ggml_tensor * t) {
    switch (t->op) {
        case GGML_OP_NONE:
        case GGML_OP_VIEW:
        case GGML_OP_RESHAPE:
        case GGML_OP_PERMUTE:
        case GGML_OP_TRANSPOSE: return true;
        default: return false;
    }
}

bool is_expert_row_value(const ggml_tensor * t, bool (*is_expert_weight)(const ggml_tensor *)) {
    for (int depth = 0; t && depth < 16; ++depth) {
        switch (t->op) {
            case GGML_OP_MUL_MAT_ID: return is_expert_weight(t->src[0]);
            case GGML_OP_VIEW: t = t->view_src; break;
            case GGML_OP_UNARY:
            case GGML_OP_ADD_ID: t = t->src[0]; break;
            case GGML_OP_GLU:
                if (t->src[1] && !is_expert_row_value(t->src[1], is_expert_weight)) {
                    return false;
                }
                t = t->src[0];
                break;
            default: return false;
        }
    }
    return false;
}

bool row_node_fits(const std::vector<ggml_tensor *> & chain, const ggml_tensor * node, int64_t n_slots,
                   int64_t n_tokens) {
    if (!rows_f32(node, n_slots, n_tokens) || !ggml_is_contiguous_rows(node)) {
        return false;
    }
    switch (node->op) {
        case GGML_OP_UNARY: return row_input_fits(chain, node->src[0], n_slots, n_tokens);
        case GGML_OP_GLU:
            return row_input_fits(chain, node->src[0], n_slots, n_tokens) &&
                   (!node->src[1] || row_input_fits(chain, node->src[1], n_slots, n_tokens));
        case GGML_OP_ADD_ID:
            // src1: a per-expert bias [n, n_expert] in host memory; src2: the chain's expert ids.
            return row_input_fits(chain, node->src[0], n_slots, n_tokens) && node->src[1] &&
                   node->src[1]->type == GGML_TYPE_F32 && node->src[1]->nb[0] == sizeof(float) &&
                   node->src[2] == chain.front()->src[2];
        default: return false;
    }
}

}  // namespace epq
