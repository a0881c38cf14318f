// Keeps llama.cpp's loader from reading the whole model at load time.
//
// The stock loader maps the model with MAP_POPULATE (every byte read before the first token)
// and FADV_SEQUENTIAL (doubled readahead, so faults on dense weights drag in neighbouring
// expert bytes). The epq binary is linked with -Wl,--wrap=mmap: for the registered model file
// only, the mapping is made without MAP_POPULATE, readahead is switched to random access, and
// exactly the dense (non-expert) byte ranges are read ahead in large requests and locked in RAM
// (mlock) where llama.cpp computes from the mapping itself (not where it copies a weight out to
// repack it, and not where locking is not allowed: RLIMIT_MEMLOCK).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace epq {

// One file of the model (each shard of a split one): `dense` are [begin, end) ranges of the file
// to read ahead, `lock` those of them to keep locked (the rest llama.cpp copies out of the
// mapping, repacked).
struct LazyFile {
    std::string path;
    std::vector<std::pair<uint64_t, uint64_t>> dense, lock;
};
// Applies to the next mappings of these files.
void set_lazy_mapping(std::vector<LazyFile> files);
void clear_lazy_mapping();
struct DenseLock {
    uint64_t bytes = 0;  // dense bytes locked in RAM (over every file)
    int error = 0;       // errno of the first mlock that failed (then the rest is only prefetched)
};
DenseLock dense_lock();
// How many mappings the policy has changed (tests check it is not silently inactive).
int lazy_mappings_applied();

}  // namespace epq
