// How much memory this process may use (the cgroup's limit or the machine's MemAvailable,
// whichever is smaller), and the arena size `--arena auto` derives from it.
#pragma once

#include <cstdint>
#include <string>

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

// available - dense weights - KV cache - compute buffers - headroom. Throws epq::Error when
// that is below `min_arena` (saying how much memory is missing).
ArenaSizing auto_arena(const MemoryAvailable & mem, uint64_t dense_bytes, uint64_t kv_bytes, uint64_t compute_bytes,
                       uint64_t min_arena);

}  // namespace epq
