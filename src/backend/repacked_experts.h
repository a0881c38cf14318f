// A model's routed experts rewritten once into ggml's repacked CPU layout, in a file beside the
// model, so that an arena holding only part of the experts reads bytes ready for stock's default
// kernels instead of repacking them after every read (which takes CPU from the compute threads)
// or falling back to the file's layout (stock -nr's slower kernels).
//
// The file: "EPQREPK1", the header's length (u64, little-endian) and the header (JSON: the model
// it was made from, the slot layout, the CPU it was made on), then from the next 4 KiB boundary
// every paged layer's slot images, expert after expert, in the index's layer order. A slot image
// is exactly what an arena slot holds after its read and repack (SlotLayout), so one direct read
// of LayerLayout::bytes fills a slot, and computing it is what stock's default flags compute.
//
// A repacked layout belongs to the CPU that made it: ggml picks the interleave and which types it
// repacks by CPU features. Opening checks the model (files, layout) and, for every matrix shape,
// that two experts' bytes equal this CPU's own rewrite of the model's bytes.
#pragma once

#include "gguf/expert_index.h"
#include "gguf/slot_layout.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace epq {

struct RepackedExperts {
    std::string path;
    uint64_t data_offset = 0;                 // where the first slot image starts
    std::vector<uint64_t> layer_offset;       // per SlotLayout layer: its expert 0's image
    std::vector<uint64_t> layer_image_bytes;  // per SlotLayout layer: one image (LayerLayout::bytes)
    uint64_t file_bytes = 0;
    size_t repacked_matrices = 0;  // expert matrices per expert held repacked (over the layers)
    std::string cpu;               // the CPU features it was made for

    // Where the slot image of `expert` of layer `li` (index into SlotLayout::layers) starts.
    uint64_t image_offset(size_t li, uint32_t expert) const {
        return layer_offset[li] + static_cast<uint64_t>(expert) * layer_image_bytes[li];
    }
};

// The file beside the model (beside the first shard of a split model).
std::string repacked_experts_path(const ExpertIndex & index);

// This CPU's features as ggml's CPU backend reports them (the ones set, space-separated).
std::string cpu_features();

struct RepackWriteReport {
    uint64_t file_bytes = 0;    // the disk the file takes
    uint64_t expert_bytes = 0;  // the model's routed expert bytes it holds
    size_t repacked_matrices = 0;
    double seconds = 0.0;
};

// Writes the file for `index` at `out` (through a temporary name, renamed when complete).
// `progress` gets the expert bytes done so far. Throws epq::Error (no type of this model is
// repacked on this CPU, I/O errors, no room on the disk).
RepackWriteReport write_repacked_experts(const ExpertIndex & index, const std::string & out,
                                         const std::function<void(uint64_t)> & progress = {});

// Opens the file at `path` for `index` and checks it (see above). Throws epq::Error saying what
// does not match and what to do.
RepackedExperts open_repacked_experts(const std::string & path, const ExpertIndex & index);

}  // namespace epq
