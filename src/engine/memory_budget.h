// How much memory this process may use (the cgroup's limit or the machine's MemAvailable,
// whichever is smaller), and the arena size `--arena auto` derives from it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace epq {

struct MemoryAvailable {
    uint64_t bytes = 0;
    std::string source;  // how it was found, for the user
};

MemoryAvailable available_memory();

struct ArenaSizing {
    uint64_t arena_bytes = 0;
    std::string reasoning;
};

// What a paged run holds in memory besides the arena.
struct MemoryNeeds {
    uint64_t dense = 0;          // the weights that stay in RAM
    uint64_t kv = 0;             // the KV cache at the context size
    uint64_t compute = 0;        // llama.cpp's compute buffers at the batch size
    uint64_t pager_scratch = 0;  // the pager's own buffers at the batch size (Pager::scratch_bound)
    // What a server holds besides (prompt cache, context checkpoints, a draft model and its KV
    // cache, a multimodal projector): named, so the reasoning lists each.
    std::vector<std::pair<std::string, uint64_t>> other;
};

// available - dense weights - KV cache - compute buffers - pager scratch - headroom. Throws
// epq::Error when that is below `min_arena` (saying how much memory is missing).
ArenaSizing auto_arena(const MemoryAvailable & mem, const MemoryNeeds & needs, uint64_t min_arena);
// An arena size given by the user: throws epq::Error, with the numbers, when it cannot fit in
// what is available beside the rest (before anything is allocated or touched).
void check_arena_fits(const MemoryAvailable & mem, const MemoryNeeds & needs, uint64_t arena, const std::string & flag);

}  // namespace epq
