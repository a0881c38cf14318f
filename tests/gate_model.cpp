#include "gate_model.h"

#include "engine/generator.h"
#include "engine/llama_log.h"

namespace epq::test {

GateModel::GateModel(const std::string & path, const GateConfig & cfg) {
    set_llama_verbosity(false);
    SessionOptions so;
    so.n_threads = cfg.n_threads;
    so.n_ctx = cfg.n_ctx;
    so.n_batch = 512;
    so.use_extra_bufts = cfg.repack;
    so.n_gpu_layers = cfg.n_gpu_layers;
    so.cpu_moe = cfg.cpu_moe;
    so.op_offload = cfg.op_offload;
    so.no_host = cfg.no_host;
    so.tensor_split = cfg.tensor_split;
    if (!cfg.cpu_pattern.empty()) {
        cpu_pattern_ = cfg.cpu_pattern;
        stock_overrides_ = {{cpu_pattern_.c_str(), ggml_backend_cpu_buffer_type()}, {nullptr, nullptr}};
        so.overrides = stock_overrides_.data();
    }
    if (cfg.paged) {
        PagedModelOptions po;
        po.arena = std::to_string(cfg.arena);
        po.n_ctx = cfg.n_ctx;
        po.n_gpu_layers = cfg.n_gpu_layers;
        po.tensor_split = cfg.tensor_split;
        po.layout = cfg.auto_layout ? WeightLayout::automatic
                    : cfg.repack    ? WeightLayout::repacked
                                    : WeightLayout::file;
        paged_ = std::make_unique<PagedModel>(path, po);
        paged_->configure(so);  // as epq run loads it
    }
    session_ = std::make_unique<LlamaSession>(path, so);
    if (paged_) {
        paged_->loaded();
    }
}

GateRun GateModel::run(const std::string & prompt, int n_predict, uint32_t n_batch) {
    session_->reopen_context(n_batch);  // a fresh context, as a new epq run has
    GateRun r;
    if (paged_) {
        r.before = paged_->pager().stats();
    }
    const auto tokens = session_->tokenize(prompt, true);
    SamplingOptions greedy;  // temperature 0, as epq run's default
    const GenerationStats st = generate(
        *session_, tokens, n_predict, greedy,
        [&](const std::string & piece, llama_token) {
            r.text += piece;
            return true;
        },
        [&](int, const float * logits, int32_t n_vocab) {
            const auto * b = reinterpret_cast<const uint8_t *>(logits);
            r.logits.insert(r.logits.end(), b, b + static_cast<size_t>(n_vocab) * sizeof(float));
        });
    r.n_prompt = st.n_prompt;
    r.n_generated = st.n_generated;
    if (paged_) {
        paged_->pager().check_model_file();
        r.after = paged_->pager().stats();
    }
    return r;
}

}  // namespace epq::test
