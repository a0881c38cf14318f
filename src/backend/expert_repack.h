// Expert matrices in ggml's repacked CPU layout, where stock llama.cpp with default flags would
// repack them.
//
// With its default flags, llama.cpp places a weight whose type this CPU has interleaved kernels
// for (Q4_0, Q4_K, IQ4_NL, MXFP4 with AVX2; Q2_K with AVX-512; others on ARM) in ggml's
// CPU_REPACK buffer type: rows are interleaved in groups of 4 or 8 when loaded, and MUL_MAT_ID
// runs the repacked gemv, whose sums round differently from the plain vec_dot. To give stock's
// bits, an arena slot holds such a matrix in the same interleaved layout (rewritten right after
// its read, on the read thread) and the weight views over the arena are marked so that ggml
// picks the same kernel. Row groups never cross experts (ggml repacks only when rows % 8 == 0),
// so one expert repacked alone is exactly its part of the repacked stacked tensor.
//
// Which matrices, which layout and which kernel are all ggml's own decision, asked of its CPU
// device and its repack buffer type, never a copy of their tables.
#pragma once

#include "gguf/slot_layout.h"

#include "ggml-backend.h"
#include "ggml.h"

#include <cstdint>
#include <map>
#include <tuple>

namespace epq {

// Whether stock llama.cpp with default flags places a weight of this type and shape in ggml's
// CPU_REPACK buffer: a matrix {ne0, ne1} used by MUL_MAT, or with `n_expert` > 1 a stacked
// expert tensor used by MUL_MAT_ID. Asked of ggml's CPU device, as llama.cpp's loader asks it.
bool stock_repacks_weight(ggml_type type, int64_t ne0, int64_t ne1, int64_t n_expert = 1);

class ExpertRepack {
public:
    // `enabled` false (`-nr/--no-repack`): every matrix stays in the file's layout.
    ExpertRepack(bool enabled, const SlotLayout & layout);
    ~ExpertRepack();
    ExpertRepack(const ExpertRepack &) = delete;
    ExpertRepack & operator=(const ExpertRepack &) = delete;

    // Whether stock llama.cpp (default flags) repacks this expert tensor on this CPU.
    bool repacks(const MatrixPlacement & m) const;
    // Number of expert matrices (per expert, over all layers) held repacked.
    size_t n_repacked() const { return n_repacked_; }
    // Rewrites one expert's matrix, read in the file's layout at `data`, in place into the
    // repacked layout. Safe to call from several threads at once.
    void repack(const MatrixPlacement & m, uint8_t * data) const;
    // Marks a weight tensor over arena memory as holding `m` repacked, so that ggml's CPU
    // backend computes its MUL_MAT_ID with the repacked kernel.
    void tag(ggml_tensor * w, const MatrixPlacement & m) const;

private:
    using Key = std::tuple<int, int64_t, int64_t>;  // type, n_in, n_out
    static Key key_of(const MatrixPlacement & m);
    void * traits_of(const MatrixPlacement & m) const;

    ggml_backend_buffer_t tag_ = nullptr;  // a small buffer of the repack type: ggml reads only its type
    std::map<Key, void *> traits_;         // ggml's per-layout repack traits (tensor->extra), repacked ones only
    size_t n_repacked_ = 0;
};

}  // namespace epq
