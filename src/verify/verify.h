// `epq verify`: the checks that prove the paging path exact, each against its own oracle.
//   kernel       one expert's forward through the arena vs an independent scalar reference
//   layer        a captured MoE layer recomputed independently, two-stage judgement
//   multitoken   every layer, batch sizes 1..512: epq vs stock llama.cpp (ids, weights, output)
//   generate     N greedy tokens, logits bit-identical to stock across arenas and threads
//   determinism  repeated runs with different arena histories give byte-identical logits
#pragma once

#include "verify/check_report.h"

#include <string>
#include <vector>

namespace epq {

struct VerifyOptions {
    std::string model;
    std::string report_dir = "verify-report";
    std::string self_exe;  // the epq binary, for checks that compare separate processes
    int n_threads = 2;
    bool fast = false;
    int n_generate = 256;
    int runs = 5;
    int n_determinism = 48;
    std::vector<int> batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 512};
    std::vector<std::string> pairs;  // kernel: "layer:expert" pairs (default: every size class and type)
    int layer = -1;                  // layer: which layer (default: one per size class)
    // Weights in ggml's repacked layout where stock's default flags repack them (false: -nr),
    // on both sides of every comparison.
    bool repack = true;
    std::string memcap;  // generate/determinism: run the epq (paged) processes in a memory cgroup of this size
};

CheckReport verify_kernel(const VerifyOptions & o);
CheckReport verify_layer(const VerifyOptions & o);
CheckReport verify_multitoken(const VerifyOptions & o);
CheckReport verify_generate(const VerifyOptions & o);
CheckReport verify_determinism(const VerifyOptions & o);

// Tokens of the built-in English sample, repeated until there are at least n.
std::vector<int32_t> sample_tokens(const struct llama_vocab * vocab, size_t n);

}  // namespace epq
