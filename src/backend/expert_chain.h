// Expert-major execution of a layer's routed experts.
//
// llama.cpp computes a MoE layer as separate graph nodes: gate and up MUL_MAT_ID, the
// activation (GLU or UNARY, with ADD_ID biases for some models), down MUL_MAT_ID. The pager
// claims the elementwise nodes between its matmuls, so the scheduler hands it the whole run in
// one split. A chain is such a run: every node is computed row by row, and a row (one token's
// use of one expert) depends only on rows of the same (token, slot) position. That lets the
// pager finish everything an expert does - gate, up, activation, down - while the expert is
// in its slot, so a prompt batch reads each expert once even when it selects more experts
// than the arena holds. Every node is still computed by ggml's own CPU kernel on the same row
// values, so results are bit-identical to stock.
#pragma once

#include "ggml.h"

#include <vector>

namespace epq {

// True for values a chain computes per row: a MUL_MAT_ID on expert weights (as decided by
// `is_expert_weight`), or GLU, UNARY, ADD_ID or VIEW of such values.
bool is_expert_row_value(const ggml_tensor * t, bool (*is_expert_weight)(const ggml_tensor *));

// Whether an elementwise `node` (GLU, UNARY, ADD_ID) has the row layout a chain needs: F32
// rows of `n_slots` x `n_tokens`, contiguous within a row, every row input produced by a node
// of `chain` (directly or through a view inside one row).
bool row_node_fits(const std::vector<ggml_tensor *> & chain, const ggml_tensor * node, int64_t n_slots,
                   int64_t n_tokens);

// True for nodes that compute nothing (views and reshapes of tensors).
bool is_layout_node(const ggml_tensor * t);

}  // namespace epq
