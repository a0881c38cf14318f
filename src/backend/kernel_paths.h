// Which CPU kernel ggml picks for an expert's rows, asked of ggml itself.
//
// ggml's CPU MUL_MAT_ID computes every output element with one vec_dot over the whole row,
// except where it chooses another kernel per expert: the IQ panel gemm for grid-based IQ types
// (and IQ4_XS) when an expert has enough rows, on AVX2. That kernel gives different bits, and
// its node-level test needs a contiguous weight tensor - which a window of arena slots is not
// (a slot holds all of an expert's matrices). So an expert that stock llama.cpp would compute
// with such a kernel gets a node of its own over just its slot (one expert: contiguous), where
// ggml makes the same choice with the same rows. The decision is taken by ggml's own predicates
// of the pinned tree, never by a copy of its thresholds.
#pragma once

#include "ggml.h"

#include <cstdint>

namespace epq {

// True when ggml's CPU MUL_MAT_ID, given a contiguous stack of `type` weights {ne0, ne1, *} and
// an expert selected for `rows` rows, would compute that expert with a kernel other than the
// per-row vec_dot (so the pager must give it a contiguous single-expert node).
bool expert_takes_special_kernel(ggml_type type, int64_t ne0, int64_t ne1, int64_t rows);

}  // namespace epq
