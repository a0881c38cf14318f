// The disk's floor for expert paging: how fast whole experts can be read from the model's own
// file with direct reads, several in flight, at random (layer, expert) positions - the access
// pattern of arena misses.
#pragma once

#include "gguf/expert_index.h"

#include <cstdint>
#include <string>
#include <vector>

namespace epq {

struct ReadFloor {
    uint64_t reads = 0;  // whole experts
    uint64_t bytes = 0;
    double seconds = 0.0;
    bool direct = false;  // false: the file system refused O_DIRECT (the page cache may flatter)
    double bytes_per_second() const { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0; }
};

// Reads random experts on `threads` threads for about `seconds`, the way the pager reads them:
// one request per matrix into a slot-shaped buffer, `depth` experts queued at once (the pager
// queues a layer's misses together: tens of experts; 0 means 8 per thread).
ReadFloor measure_expert_reads(const std::string & path, const ExpertIndex & index, int threads, double seconds,
                               uint64_t seed = 1, size_t depth = 0);

}  // namespace epq
