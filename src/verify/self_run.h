// Runs the epq binary itself as a child process, so a check can compare a stock llama.cpp
// process with a paged one (each with a clean ggml backend registry).
#pragma once

#include <string>
#include <vector>

namespace epq {

struct SelfRun {
    int exit_code = -1;
    std::string out, err;
    double seconds = 0.0;
};

// The path of the running binary (to start copies of it). Throws epq::Error.
std::string self_exe();

// `env` entries are NAME=VALUE set for the child only.
SelfRun run_self(const std::string & exe, const std::vector<std::string> & args,
                 const std::vector<std::string> & env = {});

// A scratch directory for the children's files (removed at exit).
const std::string & scratch_dir();

std::string read_whole_file(const std::string & path);

}  // namespace epq
