#include "engine/llama_session.h"

#include "backend/pager_device.h"
#include "util/error.h"

#include "common.h"

#include <algorithm>
#include <mutex>

namespace epq {

namespace {

void init_backend_once() {
    static std::once_flag once;
    std::call_once(once, [] { llama_backend_init(); });
}

}  // namespace

std::vector<ggml_backend_dev_t> gpu_devices() {
    init_backend_once();
    std::vector<ggml_backend_dev_t> out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const auto type = ggml_backend_dev_type(dev);
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
            out.push_back(dev);
        }
    }
    return out;
}

std::string gpu_layers_line(int n_gpu_layers, uint32_t n_layer) {
    std::string gpus;
    for (ggml_backend_dev_t dev : gpu_devices()) {
        gpus += (gpus.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(dev)) + " (" +
                ggml_backend_dev_description(dev) + ")";
    }
    if (gpus.empty()) {
        return "";
    }
    // llama.cpp counts the output layer as one more: -ngl n_layer + 1 offloads everything.
    const uint32_t all = n_layer + 1;
    const uint32_t on_gpu = n_gpu_layers < 0 ? all : std::min<uint32_t>(static_cast<uint32_t>(n_gpu_layers), all);
    return std::to_string(on_gpu) + " of " + std::to_string(all) + " layers (with the output layer) on " + gpus;
}

LlamaSession::LlamaSession(const std::string & model_path, const SessionOptions & opts)
    : opts_(opts), model_path_(model_path) {
    init_backend_once();
    llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = opts.use_extra_bufts;
    mp.tensor_buft_overrides = opts.overrides;
    mp.n_gpu_layers = opts.n_gpu_layers;
    mp.no_host = opts.no_host;
    if (!opts.tensor_split.empty()) {
        if (opts.tensor_split.size() > llama_max_devices()) {
            throw Error("--tensor-split names more devices than llama.cpp supports (" +
                        std::to_string(llama_max_devices()) + ")");
        }
        tensor_split_ = opts.tensor_split;
        tensor_split_.resize(llama_max_devices(), 0.0f);
        mp.tensor_split = tensor_split_.data();
    }
    if (opts.cpu_moe) {
        if (opts.overrides) {
            throw Error("cpu_moe is stock's placement of the experts: a paged model's are the pager's");
        }
        cpu_moe_overrides_ = {llm_ffn_exps_cpu_override(), {nullptr, nullptr}};
        mp.tensor_buft_overrides = cpu_moe_overrides_.data();
    }
    model_ = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model_) {
        throw Error("llama.cpp could not load " + model_path + " (its reason is printed above)");
    }
    try {
        open_context();
    } catch (...) {
        llama_model_free(model_);
        throw;
    }
}

void LlamaSession::open_context() {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = opts_.n_ctx;
    cp.n_batch = opts_.n_batch;
    cp.n_ubatch = opts_.n_batch;
    cp.n_seq_max = opts_.n_seq_max;
    // One KV buffer for every sequence: a step that holds tokens of several slots is then one
    // ubatch (one graph, each expert read once), not one per sequence.
    cp.kv_unified = opts_.n_seq_max > 1;
    // Sliding-window layers keep every position, not only the last window (llama.cpp's default,
    // unlike llama-server's): epq serve's prompt cache may go on from any kept prefix, and the
    // memory budget counts those layers at the full context.
    cp.swa_full = true;
    cp.n_threads = opts_.n_threads;
    cp.n_threads_batch = opts_.n_threads;
    cp.cb_eval = opts_.cb_eval;
    cp.cb_eval_user_data = opts_.cb_eval_user_data;
    cp.op_offload = opts_.op_offload;
    ctx_ = llama_init_from_model(model_, cp);
    if (!ctx_) {
        throw Error("llama.cpp could not create a context for " + model_path_ + " (n_ctx " +
                    std::to_string(opts_.n_ctx) + "); try a smaller -c");
    }
}

void LlamaSession::reopen_context(uint32_t n_batch) {
    llama_free(ctx_);
    ctx_ = nullptr;
    opts_.n_batch = n_batch;
    open_context();
}

LlamaSession::~LlamaSession() {
    if (ctx_) {
        llama_free(ctx_);
    }
    llama_model_free(model_);
}

std::vector<llama_token> LlamaSession::tokenize(const std::string & text, bool add_special) const {
    const int32_t len = static_cast<int32_t>(text.size());
    std::vector<llama_token> out(text.size() + 8);
    int32_t n =
        llama_tokenize(vocab(), text.data(), len, out.data(), static_cast<int32_t>(out.size()), add_special, true);
    if (n < 0) {
        out.resize(static_cast<size_t>(-n));
        n = llama_tokenize(vocab(), text.data(), len, out.data(), static_cast<int32_t>(out.size()), add_special, true);
    }
    if (n < 0) {
        throw Error("cannot tokenize the prompt");
    }
    out.resize(static_cast<size_t>(n));
    return out;
}

std::string LlamaSession::piece(llama_token token) const {
    char buf[256];
    const int32_t n = llama_token_to_piece(vocab(), token, buf, sizeof buf, 0, true);
    if (n < 0) {
        std::string big(static_cast<size_t>(-n), '\0');
        llama_token_to_piece(vocab(), token, big.data(), static_cast<int32_t>(big.size()), 0, true);
        return big;
    }
    return std::string(buf, static_cast<size_t>(n));
}

void LlamaSession::decode(const std::vector<llama_token> & tokens) {
    const uint32_t used = static_cast<uint32_t>(llama_memory_seq_pos_max(llama_get_memory(ctx_), 0) + 1);
    if (used + tokens.size() > llama_n_ctx(ctx_)) {
        throw Error("the context is full (" + std::to_string(llama_n_ctx(ctx_)) + " tokens): raise -c");
    }
    for (size_t i = 0; i < tokens.size(); i += opts_.n_batch) {
        const size_t n = std::min<size_t>(opts_.n_batch, tokens.size() - i);
        llama_batch batch = llama_batch_get_one(const_cast<llama_token *>(tokens.data() + i), static_cast<int32_t>(n));
        const int32_t rc = llama_decode(ctx_, batch);
        if (rc != 0) {
            if (std::string why = pager_last_error(); opts_.overrides && !why.empty()) {
                throw Error(why);
            }
            throw Error("llama_decode failed (code " + std::to_string(rc) + ")");
        }
        if (opts_.overrides) {
            // Before anyone reads these logits: were they computed from one version of the file?
            check_attached_model_file();
        }
    }
}

const float * LlamaSession::logits() const {
    return llama_get_logits_ith(ctx_, -1);
}

void LlamaSession::clear() {
    llama_memory_clear(llama_get_memory(ctx_), true);
}

}  // namespace epq
