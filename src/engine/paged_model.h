// Everything that turns a stock llama.cpp model load into a paged one: the expert index, the
// arena size, the pager and its device, the buffer-type overrides for the expert tensors and
// the lazy mapping of the file. Create it before the LlamaSession and keep it alive longer.
#pragma once

#include "backend/mmap_policy.h"
#include "backend/pager.h"
#include "engine/llama_session.h"
#include "engine/model_devices.h"
#include "engine/weight_layout.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"

#include "llama.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace epq {

struct PagedModelOptions {
    std::string arena = "auto";  // bytes ("4G") or "auto"
    int read_threads = 4;
    uint32_t n_ctx = 4096;
    uint32_t n_batch = 512;
    PrefetchMode prefetch = PrefetchMode::automatic;
    std::string policy = kDefaultPolicy;  // a name parse_run_policy accepts
    std::string trace_path;
    WeightLayout layout = WeightLayout::automatic;
    // Experts rewritten once in ggml's repacked layout (epq repack; backend/repacked_experts.h):
    // "auto" reads them from the file beside the model when it is there and made for this CPU
    // (ignored with a notice when not), a path names one (an error when it does not fit), "none"
    // never. Read from there, an arena holding part of the experts runs stock's default layout.
    std::string repacked_experts = "auto";
    bool load_mtp = false;  // llama.cpp loads the MTP layers too (MTP speculative decoding)
    // Where llama.cpp puts the layers (-ngl, --tensor-split; model_devices.h): the experts of layers
    // on an RPC server stay there, only this machine's are paged.
    int n_gpu_layers = -1;
    std::vector<float> tensor_split;
    // Memory the caller's own parts hold besides the model, the KV cache at n_ctx and the
    // compute buffers (a server's prompt cache, a draft model, ...): the arena leaves it free.
    std::vector<std::pair<std::string, uint64_t>> other_needs;
};

class PagedModel {
public:
    // Throws epq::Error (not a MoE model, arena below the minimum, not enough memory).
    PagedModel(const std::string & path, const PagedModelOptions & opts);
    ~PagedModel();
    PagedModel(const PagedModel &) = delete;
    PagedModel & operator=(const PagedModel &) = delete;

    const ExpertIndex & index() const { return index_; }
    Pager & pager() { return *pager_; }
    const std::string & arena_reasoning() const { return arena_reasoning_; }
    // Which device each layer goes to; the remote ones' experts are not in index().
    const LayerPlacement & placement() const { return placement_; }
    // The layout chosen: weights repacked as stock's default flags do (true), or the file's (-nr).
    // The llama.cpp session must load the dense weights the same way (use_extra_bufts).
    bool repack() const { return repack_; }
    // Whether a GPU's host buffer holds llama.cpp's CPU weights (weight_layout.h). With repack(),
    // the session must then bypass it (llama_model_params.no_host, stock's --no-host).
    bool gpu_host() const { return gpu_host_; }
    // The repacked-experts file the experts are read from, or "" (also when repack() is false).
    const std::string & repacked_file() const { return repacked_file_; }
    // Why a repacked-experts file beside the model is not used, or "".
    const std::string & repacked_note() const { return repacked_note_; }
    // Null-terminated, for llama_model_params.tensor_buft_overrides.
    const llama_model_tensor_buft_override * overrides() const { return overrides_.data(); }
    // How the llama.cpp session must load this model: the overrides, the layout of the weights it
    // keeps (use_extra_bufts, no_host), the layer split (-ngl, pinned: LayerPlacement) and, beside
    // a GPU, no op offload: the scheduler would copy CPU weights to the GPU for large batches,
    // which the pager's byte-less experts cannot be, so the stock configuration a run matches is
    // --cpu-moe --no-op-offload.
    void configure(SessionOptions & so) const;
    // Call once the model is loaded: returns the dense bytes locked in RAM, and why not all were
    // (0: all were). Later mappings of the file (a model loaded again) get the same policy.
    DenseLock loaded();

private:
    LayerPlacement placement_;
    int n_gpu_layers_ = -1;
    ExpertIndex index_;
    std::unique_ptr<Pager> pager_;
    std::string arena_reasoning_;
    bool repack_ = true;
    bool gpu_host_ = false;
    std::string repacked_file_;
    std::string repacked_note_;
    std::vector<std::string> override_patterns_;  // owned here: overrides_ points into them
    std::vector<llama_model_tensor_buft_override> overrides_;
};

// The repacked-experts file PagedModelOptions::repacked_experts asks for, checked against `index`
// and this CPU: "none" none; a path, that file (throws epq::Error when it does not fit); "auto",
// the file beside the model when it is there and fits, else none with `note` saying why.
std::optional<RepackedExperts> find_repacked_experts(const ExpertIndex & index, const std::string & asked,
                                                     std::string * note);

// KV cache bytes for n_ctx tokens (F16 keys and values in every attention layer).
uint64_t estimate_kv_bytes(const GgufFile & file, uint32_t n_ctx);

}  // namespace epq
