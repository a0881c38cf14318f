#include "gguf/slot_layout.h"

#include <algorithm>
#include <map>

namespace epq {

namespace {
constexpr uint64_t kPage = 4096;
uint64_t round_up(uint64_t v, uint64_t a) {
    return (v + a - 1) / a * a;
}
}  // namespace

uint64_t place_matrices(const std::vector<ExpertTensor> & tensors, std::vector<MatrixPlacement> * out) {
    uint64_t at = 0;
    for (const auto & t : tensors) {
        MatrixPlacement m;
        m.name = t.name;
        m.kind = t.kind;
        m.type = t.type;
        m.n_in = t.ne[0];
        m.n_out = t.ne[1];
        m.file_offset = t.file_offset;
        m.stride = t.expert_stride;
        const uint64_t skew = t.expert_stride % kPage == 0 ? t.file_offset % kPage : 0;
        m.region_begin = at;
        m.slot_offset = at + skew;
        m.region_end = at + round_up(skew + t.expert_stride, kPage);
        at = m.region_end;
        if (out) {
            out->push_back(m);
        }
    }
    return at;
}

SlotLayout SlotLayout::build(const ExpertIndex & idx) {
    SlotLayout out;
    std::map<uint64_t, std::vector<size_t>> by_expert_bytes;  // the index's size classes
    for (const auto & l : idx.layers) {
        LayerLayout ll;
        ll.layer = l.layer;
        ll.bytes = place_matrices(l.tensors, &ll.matrices);
        by_expert_bytes[l.expert_bytes].push_back(out.layers.size());
        out.layers.push_back(std::move(ll));
    }
    for (const auto & [bytes, members] : by_expert_bytes) {
        uint64_t slot = 0;
        for (size_t i : members) {
            slot = std::max(slot, out.layers[i].bytes);
        }
        out.class_bytes.push_back(slot);
        out.class_experts.push_back(static_cast<uint64_t>(members.size()) * idx.n_expert);
    }
    // Classes were formed by exact expert size; page rounding can reorder slot sizes.
    std::vector<size_t> order(out.class_bytes.size());
    for (size_t i = 0; i < order.size(); ++i) {
        order[i] = i;
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return out.class_bytes[a] < out.class_bytes[b]; });
    std::vector<uint64_t> bytes_sorted, experts_sorted;
    std::vector<uint32_t> rank(order.size());
    for (size_t r = 0; r < order.size(); ++r) {
        bytes_sorted.push_back(out.class_bytes[order[r]]);
        experts_sorted.push_back(out.class_experts[order[r]]);
        rank[order[r]] = static_cast<uint32_t>(r);
    }
    out.class_bytes = bytes_sorted;
    out.class_experts = experts_sorted;
    size_t c = 0;
    for (const auto & [bytes, members] : by_expert_bytes) {
        for (size_t i : members) {
            out.layers[i].size_class = rank[c];
        }
        ++c;
    }
    for (size_t li = 0; li < out.layers.size(); ++li) {
        for (size_t mi = 0; mi < out.layers[li].matrices.size(); ++mi) {
            out.by_name_[out.layers[li].matrices[mi].name] = {li, mi};
        }
    }
    return out;
}

const LayerLayout * SlotLayout::find(const std::string & tensor_name, const MatrixPlacement ** matrix) const {
    auto it = by_name_.find(tensor_name);
    if (it == by_name_.end()) {
        return nullptr;
    }
    const LayerLayout & l = layers[it->second.first];
    if (matrix) {
        *matrix = &l.matrices[it->second.second];
    }
    return &l;
}

}  // namespace epq
