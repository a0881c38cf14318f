#include "backend/router_predictor.h"

#include "gguf/gguf_file.h"

#include <algorithm>
#include <cmath>
#include <fcntl.h>
#include <numeric>
#include <sys/mman.h>
#include <unistd.h>

namespace epq {

RouterPredictor::RouterPredictor(const std::string & path, const ExpertIndex & index)
    : n_expert_(index.n_expert), k_(index.n_expert_used) {
    const GgufFile file = GgufFile::open(path);
    for (const auto & shard : file.shards()) {
        const int fd = ::open(shard.path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            why_ = "cannot open the model file " + shard.path;
            return;
        }
        maps_.push_back(Mapping::read_only(fd, shard.size));
        ::close(fd);
        if (!maps_.back().data()) {
            why_ = "cannot map the model file " + shard.path;
            return;
        }
        madvise(maps_.back().data(), maps_.back().size(), MADV_RANDOM);
    }
    // Where a tensor's bytes are in the mapping of its shard.
    auto at = [&](const TensorInfo & t) {
        return maps_[t.shard].data() + (t.file_offset - file.shards()[t.shard].base);
    };
    for (const auto & layer : index.layers) {
        const std::string prefix = "blk." + std::to_string(layer.layer) + ".";
        const TensorInfo * w = file.find_tensor(prefix + "ffn_gate_inp.weight");
        if (!w || w->ne[1] != index.n_expert ||
            (w->type != GGML_TYPE_F32 && !ggml_get_type_traits(w->type)->to_float)) {
            why_ = "layer " + std::to_string(layer.layer) + " has no usable router (ffn_gate_inp.weight)";
            return;
        }
        Router r;
        r.weight = at(*w);
        r.type = w->type;
        r.n_embd = w->ne[0];
        r.row_bytes = w->nb[1];
        if (const TensorInfo * b = file.find_tensor(prefix + "exp_probs_b.bias");
            b && b->type == GGML_TYPE_F32 && b->ne[0] == index.n_expert) {
            r.selection_bias = reinterpret_cast<const float *>(at(*b));
        }
        routers_[layer.layer] = r;
    }
    available_ = !routers_.empty();
    if (!available_) {
        why_ = "the model has no routed layers";
    }
}

RouterPredictor::~RouterPredictor() = default;

std::vector<uint32_t> RouterPredictor::predict(int layer, const float * x, int64_t n_embd) const {
    auto it = routers_.find(layer);
    if (it == routers_.end() || it->second.n_embd != n_embd) {
        return {};
    }
    const Router & r = it->second;
    scores_.resize(n_expert_);
    row_.resize(static_cast<size_t>(n_embd));
    const auto * traits = ggml_get_type_traits(r.type);
    for (uint32_t e = 0; e < n_expert_; ++e) {
        const uint8_t * row = r.weight + e * r.row_bytes;
        const float * w = reinterpret_cast<const float *>(row);
        if (r.type != GGML_TYPE_F32) {
            traits->to_float(row, row_.data(), n_embd);
            w = row_.data();
        }
        double s = 0.0;
        for (int64_t i = 0; i < n_embd; ++i) {
            s += static_cast<double>(w[i]) * x[i];
        }
        // Softmax and sigmoid gating rank experts like their logits do; a selection bias is
        // added to sigmoid scores (as llama.cpp does), which changes the ranking.
        scores_[e] = r.selection_bias ? 1.0f / (1.0f + std::exp(-static_cast<float>(s))) + r.selection_bias[e]
                                      : static_cast<float>(s);
    }
    std::vector<uint32_t> order(n_expert_);
    std::iota(order.begin(), order.end(), 0u);
    const size_t k = std::min<size_t>(k_, order.size());
    std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(),
                      [&](uint32_t a, uint32_t b) { return scores_[a] > scores_[b]; });
    order.resize(k);
    return order;
}

}  // namespace epq
