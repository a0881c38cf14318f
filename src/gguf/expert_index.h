// Where a MoE model's routed experts live in its GGUF file: per layer, the merged expert
// tensors (gate/up/down or fused gate_up, `blk.N.ffn_*_exps.weight`), the bytes one expert
// occupies in each, the distinct expert sizes, and the smallest arena that can run the model.
#pragma once

#include "gguf/gguf_file.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace epq {

// True for a tensor llama.cpp's MoE graph multiplies with MUL_MAT_ID as routed experts:
// 3-D {n_in, n_out, n_expert}, one contiguous matrix per expert, named blk.N.*exps.weight.
bool is_routed_expert_matrix(const TensorInfo & t, int64_t n_expert);
// Whether a model has any expert stack, whatever its count (a dense model has nothing to page).
bool has_routed_experts(const GgufFile & file);

// The layer llama.cpp creates a tensor with, for its device: N for blk.N.*, n_layer for the
// output layer's (output*), -1 for the rest (the input layer's: token_embd, ...).
int placed_layer(const std::string & name, size_t n_layer);

struct ExpertTensor {
    std::string name;
    std::string kind;  // "gate", "up", "down", "gate_up", ... (between "ffn_" and "_exps")
    ggml_type type = GGML_TYPE_F32;
    int64_t ne[3] = {0, 0, 0};   // {n_in, n_out, n_expert}
    uint64_t expert_stride = 0;  // bytes of one expert's matrix (nb[2])
    uint64_t file_offset = 0;    // expert 0's offset in the model's byte space (GgufFile)
    uint32_t shard = 0;          // the file of a split model that holds it
};

struct ExpertLayer {
    int layer = 0;
    std::vector<ExpertTensor> tensors;
    uint64_t expert_bytes = 0;  // one expert's bytes over all its tensors
    uint64_t slot_bytes = 0;    // what it takes in an arena slot: each matrix page-aligned for direct reads
};

struct SizeClass {
    uint64_t expert_bytes = 0;
    uint64_t slot_bytes = 0;  // the largest slot need among its layers
    std::vector<int> layers;
};

struct ExpertIndex {
    std::string arch;
    uint32_t n_layer = 0;
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 0;
    std::vector<ExpertLayer> layers;      // only layers that have routed experts, ascending
    std::vector<SizeClass> size_classes;  // ascending by size
    std::vector<GgufShard> shards;        // the model's files (one unless split) and their byte-space bases
    uint64_t file_size = 0;               // bytes of every file together
    uint64_t expert_bytes = 0;            // all routed expert bytes
    uint64_t dense_bytes = 0;             // every other tensor byte llama.cpp loads
    // Next-token-prediction (MTP) layers (<arch>.nextn_predict_layers, the last blocks): llama.cpp
    // skips their tensors unless asked to load MTP, so they are neither paged nor budgeted.
    uint32_t n_mtp_layers = 0;
    bool mtp_loaded = false;
    uint64_t unused_bytes = 0;                                 // bytes of the tensors skipped
    std::vector<std::pair<uint64_t, uint64_t>> unused_ranges;  // their [begin, end) in the byte space
    // Layers another machine holds (llama.cpp's RPC backend): their tensors, experts included,
    // are neither paged nor kept in RAM here.
    uint64_t remote_bytes = 0;
    std::vector<std::pair<uint64_t, uint64_t>> remote_ranges;  // their [begin, end) in the byte space
    uint64_t min_arena_bytes = 0;
    std::string min_arena_reason;

    // Throws epq::Error for a model without routed experts or with inconsistent expert tensors.
    // `load_mtp`: llama.cpp will load the MTP layers (MTP speculative decoding), so they count.
    // `remote`: per block, then the output layer (output*), whether a remote device holds it
    // (LayerPlacement); empty for none.
    static ExpertIndex build(const GgufFile & file, bool load_mtp = false, const std::vector<bool> & remote = {});

    const ExpertLayer * layer(int il) const;
};

}  // namespace epq
