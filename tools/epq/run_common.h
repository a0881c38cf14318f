// What `epq run` and `epq demo` share: the generation flags and the run itself.
#pragma once

#include "engine/generator.h"

#include <CLI/CLI.hpp>
#include <string>

namespace epq::cli {

struct RunOptions {
    std::string model;
    std::string prompt;
    std::string prompt_file;
    int n_predict = 128;
    int n_threads = 0;  // 0: all cores
    uint32_t n_ctx = 4096;
    uint32_t n_batch = 512;
    SamplingOptions sampling;
    bool no_pager = false;
    bool verbose = false;
};

// Registers -n, -t, -c, -b, --temp, --top-k, --top-p, --seed, --no-pager, --verbose.
void add_generation_flags(CLI::App& sub, RunOptions& o);

// Validates the model, loads it and streams the generated text to stdout; everything else
// goes to stderr. Returns the exit code.
int run_generation(const RunOptions& o);

}  // namespace epq::cli
