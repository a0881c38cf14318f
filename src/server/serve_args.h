// epq serve's command line: epq's own pager flags, taken out before everything else goes to
// llama.cpp's own argument parser for its server (so every llama-server flag, its --help and its
// environment variables work unchanged). Pure: no llama.cpp here.
#pragma once

#include "arena/replacement_policy.h"

#include <optional>
#include <string>
#include <vector>

namespace epq::server {

// --decode-streams all: every slot (as many as any -np).
constexpr int kAllDecodeStreams = 1 << 30;

// The flags only epq knows. Unset ones keep the defaults of `epq run`.
struct PagerFlags {
    std::string arena = "auto";
    std::string policy = kDefaultPolicy;
    std::string prefetch = "auto";
    int read_threads = 4;
    bool preload = false;
    bool no_pager = false;
    std::string trace;
    std::string repacked_experts = "auto";
    int decode_streams = 0;  // requests that generate at once; 0: as many as the arena fits
};

struct SplitArgs {
    PagerFlags pager;
    std::vector<std::string> llama;  // everything else, in order, for llama.cpp's parser
    bool help = false;               // -h/--help/--usage was among them
};

// Splits `args` (without the program name and the subcommand). Accepts `--flag value` and
// `--flag=value`. Throws epq::Error for a pager flag without its value or with a bad number.
SplitArgs split_serve_args(const std::vector<std::string> & args);

// Router mode re-executes the binary once per model with llama.cpp's arguments only; the pager
// flags reach those children through this environment variable (one line, tab-separated).
constexpr const char * kPagerFlagsEnv = "EPQ_SERVE_PAGER_FLAGS";
std::string encode_pager_flags(const std::vector<std::string> & pager_args);
// The arguments a parent put in the environment (empty when none), to be parsed before the
// command line's own (which win).
std::vector<std::string> decode_pager_flags(const char * env);

// The pager arguments exactly as given (for encode_pager_flags).
std::vector<std::string> pager_args_of(const std::vector<std::string> & args);

// epq's part of `epq serve --help`.
std::string pager_flags_help();

}  // namespace epq::server
