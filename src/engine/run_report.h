// Per-run statistics: generation speed, arena behaviour, reads, memory, time to first token.
#pragma once

#include "backend/pager.h"
#include "engine/generator.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace epq {

struct RunReport {
    GenerationStats gen;
    std::optional<PagerStats> pager;                // absent for --no-pager runs
    std::optional<PagerStats> pager_after_prefill;  // to split reads between prefill and decode
    double load_seconds = 0.0;
    double ttft_seconds = 0.0;  // from the start of the run (model load included) to the first token
    uint64_t peak_rss_bytes = 0;
    uint64_t storage_read_bytes = 0;  // this process's reads from storage (/proc/self/io), mmap faults included
    int n_threads = 0;
    uint64_t arena_bytes = 0;
    uint64_t dense_locked_bytes = 0;  // dense weights locked in RAM (paged runs)

    std::string text() const;
    nlohmann::json json() const;
};

// Peak resident set size of this process so far.
uint64_t peak_rss_bytes();
// Bytes this process caused to be read from storage so far (0 where the kernel does not say).
uint64_t storage_read_bytes();

// One line for --stats after each token: what changed since `before`.
std::string token_stats_line(int step, const PagerStats & before, const PagerStats & after, double seconds);

}  // namespace epq
