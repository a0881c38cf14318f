// What `epq run`, `epq demo` and `epq chat` share: the model flags, loading (paged or stock)
// and the statistics at the end.
#pragma once

#include "engine/generator.h"
#include "engine/llama_session.h"
#include "engine/paged_model.h"
#include "engine/run_report.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>
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
    uint32_t n_parallel = 1;  // sequences in the context (epq serve's slots)
    SamplingOptions sampling;
    bool no_pager = false;
    bool no_repack = false;                 // -nr: weights stay in the file's layout
    bool repack = false;                    // --repack: repacked as stock's default flags, whatever the arena
    std::string repacked_experts = "auto";  // --repacked-experts: PagedModelOptions::repacked_experts
    std::string arena = "auto";
    int read_threads = 4;
    bool verbose = false;
    bool stats_per_token = false;
    std::string stats_json;
    std::string logits_out;  // every step's logits, raw float32, for exactness checks
    std::string prefetch = "auto";
    std::string policy = kDefaultPolicy;
    std::string trace;
    bool preload = false;
    int n_gpu_layers = -1;     // -ngl: layers on a GPU (-1: llama.cpp's default, all of them)
    std::string rpc;           // --rpc HOST:PORT,...: llama.cpp's RPC servers, devices for -ngl
    std::string tensor_split;  // -ts: llama.cpp's --tensor-split, "3,1"
    bool cpu_moe = false;      // --cpu-moe with --no-pager: stock's experts on the CPU
    bool no_op_offload = false;
    bool no_host = false;       // --no-host with --no-pager: CPU weights bypass a GPU's host buffer
    std::string replay;         // drive decode with this text's tokens instead of sampling
    int replay_prompt = 128;    // of which the first this many are the prompt
    std::string routing_trace;  // epq bench-run only: expert choices from this trace (timing only)
};

// Registers --no-pager, --arena, --read-threads, --prefetch, --policy, --preload, -ngl,
// --cpu-moe, --no-op-offload, --verbose: how a model is loaded.
void add_pager_flags(CLI::App & sub, RunOptions & o);

// Registers -m, -n, -t, -c, -b, sampling, the pager flags, --trace, --stats, --stats-json,
// --logits-out.
void add_model_flags(CLI::App & sub, RunOptions & o, bool model_required = true);

// A loaded model, paged unless --no-pager.
struct LoadedModel {
    std::unique_ptr<PagedModel> paged;
    std::unique_ptr<LlamaSession> session;
    int n_threads = 0;
    bool repack = true;  // the weight layout the run holds (weight_layout.h)
    bool gpu_host = false;
    bool remote_layers = false;  // layers on RPC servers (with their experts)
    double load_seconds = 0.0;
    uint64_t dense_locked_bytes = 0;
    uint64_t expert_tensor_bytes = 0;  // what llama.cpp placed in the pager's buffer
    std::chrono::steady_clock::time_point start;
};
LoadedModel load_model(const RunOptions & o);

// Fills the pager part of a report and prints it (and writes --stats-json).
void finish_report(const RunOptions & o, LoadedModel & m, RunReport & report);

// Generates from the prompt, streaming the text to stdout; everything else goes to stderr.
int run_generation(const RunOptions & o);

}  // namespace epq::cli
