// A model and context of stock llama.cpp, owned together: load, tokenize, decode, read logits.
// This is both how the demo runs before the pager exists and the reference every exactness
// check compares against.
#pragma once

#include "llama.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace epq {

struct SessionOptions {
    int n_threads = 2;
    uint32_t n_ctx = 2048;
    uint32_t n_batch = 512;
    // Sequences (epq serve's slots) sharing one KV cache; n_ctx is their total.
    uint32_t n_seq_max = 1;
    // llama.cpp's extra buffer types: weights of the types ggml has interleaved CPU kernels for
    // are repacked at load (its default). Repacking changes which kernel computes a matmul and so
    // the rounding: a paged run must hold its experts the same way (PagedModelOptions::repack).
    // False is llama.cpp's -nr.
    bool use_extra_bufts = true;
    // Expert tensors to the pager's buffer type (PagedModel::overrides); null for stock.
    const llama_model_tensor_buft_override * overrides = nullptr;
    // Layers on a GPU (llama.cpp's -ngl; -1: llama.cpp's default, every layer). Nothing where
    // ggml has no GPU backend. A paged model's routed experts stay with the pager whatever this is.
    int n_gpu_layers = -1;
    // llama.cpp's --tensor-split: one weight per device (model_devices.h); empty for its default
    // (free memory).
    std::vector<float> tensor_split;
    // Stock only (no overrides): routed experts in CPU memory, computed on the CPU (llama.cpp's
    // --cpu-moe): the stock configuration a paged run with -ngl is identical to.
    bool cpu_moe = false;
    // llama.cpp's op offload: large batches of ops on CPU weights computed on the GPU (false is
    // --no-op-offload). The pager's experts are never offloaded: their buffer holds no bytes.
    bool op_offload = true;
    // llama.cpp's --no-host: CPU weights bypass a GPU's host buffer, so the repack buffer can
    // take them (weight_layout.h).
    bool no_host = false;
    // Observes graph nodes (llama_context_params.cb_eval); used by the verify checks.
    ggml_backend_sched_eval_callback cb_eval = nullptr;
    void * cb_eval_user_data = nullptr;
};

// ggml's GPU devices on this build and machine (discrete or integrated; none without a GPU
// backend, and ggml's Vulkan backend skips CPU devices unless GGML_VK_VISIBLE_DEVICES names them).
std::vector<ggml_backend_dev_t> gpu_devices();

// What -ngl N does on this build and machine, for the load line: "" where ggml has no GPU
// device, else e.g. "24 of 49 layers (the output layer counts as one) on Vulkan0 (...)".
std::string gpu_layers_line(int n_gpu_layers, uint32_t n_layer);

class LlamaSession {
public:
    // Throws epq::Error with llama.cpp's reason when the model cannot be loaded.
    LlamaSession(const std::string & model_path, const SessionOptions & opts);
    ~LlamaSession();
    LlamaSession(const LlamaSession &) = delete;
    LlamaSession & operator=(const LlamaSession &) = delete;

    llama_model * model() const { return model_; }
    llama_context * ctx() const { return ctx_; }
    const llama_vocab * vocab() const { return llama_model_get_vocab(model_); }
    int32_t n_vocab() const { return llama_vocab_n_tokens(vocab()); }

    std::vector<llama_token> tokenize(const std::string & text, bool add_special) const;
    std::string piece(llama_token token) const;

    // Decodes `tokens` after what the context already holds, in batches of n_batch.
    // Throws epq::Error on failure. Logits of the last token are then at logits().
    void decode(const std::vector<llama_token> & tokens);
    const float * logits() const;

    void clear();  // forget the context (KV cache and recurrent state)
    // A fresh context on the same model with another batch size: a model is loaded once for
    // runs at several batch sizes (the exactness gates compare many of them in one process).
    void reopen_context(uint32_t n_batch);

private:
    void open_context();
    std::vector<llama_model_tensor_buft_override> cpu_moe_overrides_;  // null-terminated
    std::vector<float> tensor_split_;                                  // llama_max_devices() weights

    llama_model * model_ = nullptr;
    llama_context * ctx_ = nullptr;
    SessionOptions opts_;
    std::string model_path_;
};

}  // namespace epq
