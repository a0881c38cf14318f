// What llama-server holds in memory besides the model, counted before the arena is sized: the
// KV cache of every slot, the host prompt cache (--cache-ram, 8 GiB by default upstream), the
// context checkpoints of hybrid and sliding-window models, a draft model and its KV cache, a
// multimodal projector. Where a default would not leave room for the arena under a small
// memory limit, it is lowered here and the plan says so (a value the user gave is kept).
#pragma once

#include "gguf/gguf_file.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace epq::server {

struct ServeMemoryRequest {
    int32_t n_ctx = 0;  // 0: the model's training context
    int32_t n_parallel = 1;
    int32_t cache_ram_mib = 8192;  // -1: no limit, 0: off
    bool cache_ram_given = false;
    int32_t n_ctx_checkpoints = 32;
    bool checkpoints_given = false;
    std::string draft_path;   // -md
    std::string mmproj_path;  // --mmproj
};

struct ServeMemoryPlan {
    int32_t n_ctx = 0;
    int32_t cache_ram_mib = 0;
    int32_t n_ctx_checkpoints = 0;
    std::vector<std::pair<std::string, uint64_t>> needs;  // besides the model, its KV cache and compute
    std::vector<std::string> notes;                       // what was lowered, and why
};

// `available`: the memory this process may use (engine/memory_budget.h). Throws epq::Error
// when a draft model or projector cannot be read.
ServeMemoryPlan plan_serve_memory(const GgufFile & model, const ServeMemoryRequest & req, uint64_t available);

// Bytes of one context checkpoint of one sequence: the recurrent state of a hybrid model, the
// sliding window's KV cache of an SWA model; 0 when the model needs none.
uint64_t checkpoint_bytes(const GgufFile & model);

}  // namespace epq::server
