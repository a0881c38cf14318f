#include "backend/router_predictor.h"

#include "gguf/gguf_file.h"

#include "ggml-cpu.h"

#include <algorithm>
#include <cmath>
#include <fcntl.h>
#include <numeric>
#include <sys/mman.h>
#include <unistd.h>

namespace epq {

namespace {

// Whether ggml's CPU backend has a dot product for rows of `type` that are `n` wide.
bool has_cpu_dot(ggml_type type, int64_t n) {
    const auto * cpu = ggml_get_type_traits_cpu(type);
    if (!cpu || !cpu->vec_dot || n % ggml_blck_size(type) != 0) {
        return false;
    }
    const ggml_type pair = cpu->vec_dot_type;
    return pair == GGML_TYPE_F32 ||
           (n % ggml_blck_size(pair) == 0 && ggml_get_type_traits_cpu(pair)->from_float != nullptr);
}

}  // namespace

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
        if (!w || w->ne[1] != index.n_expert || !has_cpu_dot(w->type, w->ne[0])) {
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
    // ggml's own dot product for the router's type (SIMD; x converted once to the type it pairs
    // with). A guess needs the ranking, not llama.cpp's rounding; a scalar loop in double took
    // 0.12 ms a layer on the 30B shape, an eighth of the layer's expert compute.
    const auto * cpu = ggml_get_type_traits_cpu(r.type);
    const void * xv = x;
    if (cpu->vec_dot_type != GGML_TYPE_F32) {
        x_conv_.resize(ggml_row_size(cpu->vec_dot_type, n_embd));
        ggml_get_type_traits_cpu(cpu->vec_dot_type)->from_float(x, x_conv_.data(), n_embd);
        xv = x_conv_.data();
    }
    for (uint32_t e = 0; e < n_expert_; ++e) {
        float s = 0.0f;
        cpu->vec_dot(static_cast<int>(n_embd), &s, 0, r.weight + e * r.row_bytes, 0, xv, 0, 1);
        // Softmax and sigmoid gating rank experts like their logits do; a selection bias is
        // added to sigmoid scores (as llama.cpp does), which changes the ranking.
        scores_[e] = r.selection_bias ? 1.0f / (1.0f + std::exp(-s)) + r.selection_bias[e] : s;
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
