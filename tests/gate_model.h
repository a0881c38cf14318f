// A model loaded once inside the test process, stock or paged, on which the exactness gates run
// what `epq run --logits-out` runs: tokenize the prompt, prefill it in batches of -b, generate
// greedily, keep every step's logits. Each run opens a fresh context at its batch size on the
// same loaded model, so a gate compares dozens of configurations without a process and a model
// load for each (the arena stays as the previous run left it: the logits must not depend on it).
// A few gates still run the `epq` binary end to end (test_util.h: run_logged).
#pragma once

#include "backend/pager.h"
#include "engine/llama_session.h"
#include "engine/paged_model.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace epq::test {

struct GateConfig {
    bool paged = false;
    uint64_t arena = 0;  // bytes, paged only
    bool repack = true;  // false: -nr (every weight in the file's layout), as for stock
    uint32_t n_ctx = 2048;
    int n_threads = 2;
    // Devices beside the pager (SessionOptions): layers on a GPU, stock's --cpu-moe, op offload.
    int n_gpu_layers = -1;
    std::vector<float> tensor_split;  // --tensor-split: one weight per device; empty: by free memory
    bool cpu_moe = false;             // stock only
    // Stock only: tensors whose names match go to CPU memory (llama.cpp's -ot PATTERN=CPU).
    std::string cpu_pattern;
    bool op_offload = true;
    bool no_host = false;      // stock only: --no-host (a paged run sets it with its layout)
    bool auto_layout = false;  // paged only: the layout PagedModel chooses (repack is then ignored)
};

struct GateRun {
    std::vector<uint8_t> logits;  // every step's logits, raw float32, as --logits-out writes them
    std::string text;             // the generated text
    int n_prompt = 0;
    int n_generated = 0;
    PagerSnapshot before, after;  // the pager's counters around the run (zero for stock)
};

class GateModel {
public:
    // Throws epq::Error as epq run would fail.
    GateModel(const std::string & path, const GateConfig & cfg);
    GateModel(const GateModel &) = delete;
    GateModel & operator=(const GateModel &) = delete;

    GateRun run(const std::string & prompt, int n_predict, uint32_t n_batch);
    const PagedModel * paged() const { return paged_.get(); }

private:
    std::string cpu_pattern_;
    std::vector<llama_model_tensor_buft_override> stock_overrides_;  // null-terminated
    std::unique_ptr<PagedModel> paged_;                              // before session_: it outlives the model load
    std::unique_ptr<LlamaSession> session_;
};

}  // namespace epq::test
