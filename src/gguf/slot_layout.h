// Where each matrix of an expert sits inside an arena slot, per layer, chosen so that direct
// reads land in place: each matrix gets a 4 KiB-aligned region and starts at the same offset
// within its page as in the file (possible when the expert stride is a whole number of pages,
// true of real model shapes); otherwise it starts at the region and is read through a copy.
#pragma once

#include "gguf/expert_index.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace epq {

struct MatrixPlacement {
    std::string name;  // GGUF tensor name
    std::string kind;  // gate, up, down, gate_up
    int type = 0;      // ggml type
    int64_t n_in = 0, n_out = 0;
    uint64_t slot_offset = 0;   // where the matrix starts inside a slot
    uint64_t region_begin = 0;  // its 4 KiB-aligned region inside the slot
    uint64_t region_end = 0;
    uint64_t file_offset = 0;  // expert 0's bytes in the file
    uint64_t stride = 0;       // bytes of one expert's matrix
};

// Places one expert's matrices of a layer in a slot; returns the slot bytes they need.
uint64_t place_matrices(const std::vector<ExpertTensor> & tensors, std::vector<MatrixPlacement> * out);

struct LayerLayout {
    int layer = 0;
    uint32_t size_class = 0;  // index into SlotLayout::class_bytes
    uint64_t bytes = 0;       // slot bytes this layer needs
    std::vector<MatrixPlacement> matrices;
};

struct SlotLayout {
    std::vector<LayerLayout> layers;      // same order as ExpertIndex::layers
    std::vector<uint64_t> class_bytes;    // slot size of each class, ascending
    std::vector<uint64_t> class_experts;  // experts of each class in the model

    static SlotLayout build(const ExpertIndex & idx);

    // The layer and matrix an expert tensor name belongs to; nullptr if it is not one.
    const LayerLayout * find(const std::string & tensor_name, const MatrixPlacement ** matrix) const;

private:
    std::unordered_map<std::string, std::pair<size_t, size_t>> by_name_;
};

}  // namespace epq
