// epq bench: epq against stock llama.cpp on the same file, side by side, beside the floors the
// hardware sets. Every measured run is a child process of this binary (`epq run`, paged or
// --no-pager), so each starts with a clean process and, when capped, its own memory cgroup.
#pragma once

#include "arena/replacement_policy.h"
#include "engine/weight_layout.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace epq {

struct BenchOptions {
    std::string model;
    std::string self_exe;
    std::vector<std::string> memcaps = {"none"};  // sizes for scripts/memcap.sh, or "none"
    std::string arena = "auto";
    int threads = 0;
    int runs = 3;
    int n_decode = 64;        // epq tokens replayed per run
    int n_decode_stock = 16;  // stock's (it can be 30x slower under a cap)
    int replay_prompt = 64;
    uint32_t n_ctx = 512;
    uint32_t n_batch = 512;
    std::string replay;  // text file; default: the shipped sample
    std::string prefetch = "auto";
    std::string policy = kDefaultPolicy;
    int read_threads = 4;
    WeightLayout layout = WeightLayout::automatic;  // epq's; --repack / -nr name it for every run
    bool stock = true;
    std::string routing;  // a routing trace: epq's runs follow its expert choices (timing only)
    bool drop_caches = true;  // before each capped run, when allowed (root)
    double read_floor_seconds = 4.0;
    std::string json_path;
    std::string plot_path;
    std::vector<int> streams;    // non-empty: the concurrency benchmark of epq serve (serve_bench.h)
    std::string decode_streams;  // epq serve's --decode-streams ("": its default)
};

// The weight-layout flag of a child run. Stock under a memory cap always runs -nr: repacking
// copies every repackable weight out of the mapping into anonymous memory, so the whole model
// would have to fit; its best under a cap is mmap without repacking. Uncapped, stock runs its
// default flags unless -nr is named. epq runs the layout named, or lets its arena choose (the
// file's layout, stock -nr's, when the arena holds part of the experts).
std::vector<std::string> layout_flags(bool paged, const std::string & cap, WeightLayout layout);

// One child run's figures, from its --stats-json.
struct RunFigures {
    bool ok = false;
    std::string error;
    double decode_tps = 0, prefill_tps = 0;
    double decode_seconds = 0;
    int n_decode = 0, n_prompt = 0;
    double decode_wait_seconds = 0;  // epq: decode time blocked on reads
    double decode_missed_bytes = 0;  // epq: expert bytes the decode misses needed
    double decode_read_bytes = 0;    // epq: bytes read from the file during decode
    double decode_hit_rate = 0;
    double prefill_seconds = 0;
    double prefill_wait_seconds = 0;                               // epq: prefill time blocked on reads
    double prefill_read_bytes = 0;                                 // epq: bytes read from the file during prefill
    double decode_repack_seconds = 0, prefill_repack_seconds = 0;  // epq: read threads repacking
    bool repacked = true;                                          // the run's weight layout
    uint64_t arena_bytes = 0;
    uint64_t storage_read_bytes = 0;  // the whole process, from /proc/self/io
    std::string memcap_line;
    nlohmann::json stats;
};

// Median of `v` (0 when empty).
double median(std::vector<double> v);
// Median of the successful runs' values of `f`.
double median_of(const std::vector<RunFigures> & runs, double RunFigures::*f);

// What a failed child run says: OOM-killed, its "epq: error:" line, or its exit status.
std::string child_failure(int exit_code, const std::string & err);
// The "memcap: ..." line scripts/memcap.sh printed in `err` (empty when uncapped).
std::string memcap_line_of(const std::string & err);
// Writes `j` to `path` and says so. Throws epq::Error when it cannot.
void write_json_file(const std::string & path, const nlohmann::json & j);

// The default replay text, shipped with the source.
std::string default_replay_text();

// A file of the source tree (scripts/memcap.sh, data/...).
std::string source_file(const std::string & rel);

// Empties the page cache before a capped run (needs root). False when it could not.
bool drop_page_cache();

// Runs the whole benchmark, prints the table, writes JSON and the plot. Returns the exit code.
int run_bench(const BenchOptions & o);

}  // namespace epq
