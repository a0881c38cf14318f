// Writes a synthetic MoE GGUF: metadata through ggml's gguf API, then every tensor's bytes
// streamed to disk in chunks while the next chunk is generated, so memory use stays at a few
// buffers whatever the model's size.
#pragma once

#include "synth/synth_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace epq {

struct SynthResult {
    std::string path;                // the model: its first file when split
    std::vector<std::string> files;  // every file written
    uint64_t bytes = 0;
    uint64_t n_tensors = 0;
    double seconds = 0.0;
};

struct SynthOptions {
    bool progress = true;
    // Write only the headers; the tensor data is left a hole of the right size (a sparse file):
    // real metadata and offsets at any scale, for inspecting and planning, not for running.
    bool header_only = false;
};

// Throws epq::Error (bad shape, unwritable output, disk full). The file appears under its name
// only once complete: an interrupted run never leaves a truncated model behind. A split model
// (cfg.split_max_bytes) is written as <out_path without .gguf>-00001-of-0000N.gguf, ...
SynthResult synthesize(const SynthConfig & cfg, const std::string & out_path, const SynthOptions & opts = {});

}  // namespace epq
