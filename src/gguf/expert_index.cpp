#include "gguf/expert_index.h"

#include "gguf/slot_layout.h"

#include "util/byte_size.h"
#include "util/error.h"

#include <algorithm>
#include <map>
#include <regex>

namespace epq {

namespace {

// A layer's weight tensor: blk.<layer>.<name>.weight.
const std::regex & layer_weight_pattern() {
    static const std::regex re(R"(^blk\.(\d+)\.([a-z0-9_]+)\.weight$)");
    return re;
}

// The matrix kind of a routed-expert tensor name: "gate", "up", "down", "gate_up" for
// llama.cpp's ffn_<kind>_exps, else the name itself.
std::string matrix_kind(const std::string & name) {
    static const std::regex re(R"(^ffn_([a-z_]+)_exps$)");
    std::smatch m;
    return std::regex_match(name, m, re) ? m[1].str() : name;
}

// A stack of one matrix per expert as llama.cpp names its routed experts (ffn_gate_exps,
// ffn_up_exps, ffn_down_exps, ffn_gate_up_exps, ...): 3-D, each expert's slice contiguous.
// Per-expert vectors (biases, scales, arctic's ffn_norm_exps) are 1-D or 2-D and stay with the
// dense weights, as do grovemoe's chunk experts (ffn_*_chexps, another count).
bool is_expert_stack(const TensorInfo & t) {
    static const std::regex re(R"(^blk\.\d+\.[a-z0-9_]*_exps\.weight$)");
    return t.n_dims == 3 && t.ne[3] == 1 && t.nb[2] == t.nb[1] * static_cast<uint64_t>(t.ne[1]) &&
           std::regex_match(t.name, re);
}

}  // namespace

bool is_routed_expert_matrix(const TensorInfo & t, int64_t n_expert) {
    return n_expert > 0 && t.ne[2] == n_expert && is_expert_stack(t);
}

bool has_routed_experts(const GgufFile & file) {
    // By shape and name alone: a stack whose count disagrees with expert_count is a broken MoE
    // model (ExpertIndex::build says so), not a dense one.
    for (const auto & t : file.tensors()) {
        if (is_expert_stack(t)) {
            return true;
        }
    }
    return false;
}

int placed_layer(const std::string & name, size_t n_layer) {
    static const std::regex block_tensor(R"(^blk\.(\d{1,9})\.)");
    std::smatch m;
    if (std::regex_search(name, m, block_tensor)) {
        const size_t il = std::stoul(m[1].str());
        return il < n_layer ? static_cast<int>(il) : -1;
    }
    return name.rfind("output", 0) == 0 ? static_cast<int>(n_layer) : -1;
}

ExpertIndex ExpertIndex::build(const GgufFile & file, bool load_mtp, const std::vector<bool> & remote) {
    ExpertIndex idx;
    idx.arch = file.architecture();
    idx.file_size = file.file_size();
    idx.shards = file.shards();
    if (idx.arch.empty()) {
        throw Error(file.path() + ": no general.architecture in the GGUF metadata; not a llama.cpp model");
    }
    // llama.cpp's architecture names are printable ASCII. Any other byte would go on into key
    // names, messages and the inspect report's JSON (which refuses text that is not UTF-8).
    for (const char c : idx.arch) {
        if (c <= ' ' || c > '~') {
            throw Error(file.path() + ": general.architecture is not an architecture name (it holds bytes outside " +
                        "printable ASCII); not a llama.cpp model");
        }
    }
    const auto n_layer = file.get_int(idx.arch + ".block_count");
    const auto n_expert = file.get_int(idx.arch + ".expert_count");
    const auto n_used = file.get_int(idx.arch + ".expert_used_count");
    idx.n_layer = static_cast<uint32_t>(n_layer.value_or(0));
    // The MTP blocks are the last nextn_predict_layers of block_count. llama.cpp creates their
    // tensors with TENSOR_SKIP unless MTP is loaded (all MoE families of the pinned tree but
    // step35, which loads its MTP block's experts regardless: there they count as usual).
    const int64_t n_nextn = file.get_int(idx.arch + ".nextn_predict_layers").value_or(0);
    if (n_nextn > 0 && n_layer && n_nextn < *n_layer) {
        idx.n_mtp_layers = static_cast<uint32_t>(n_nextn);
        idx.mtp_loaded = load_mtp || idx.arch == "step35";
    }
    const int64_t first_mtp = idx.n_mtp_layers > 0 && !idx.mtp_loaded ? *n_layer - n_nextn : INT64_MAX;
    static const std::regex block_tensor(R"(^blk\.(\d{1,9})\.)");

    const auto is_remote = [&](const TensorInfo & t) {
        const int il = remote.empty() ? -1 : placed_layer(t.name, remote.size() - 1);
        return il >= 0 && remote[static_cast<size_t>(il)];
    };
    std::map<int, ExpertLayer> by_layer;
    uint64_t remote_expert_bytes = 0;
    std::smatch m;
    for (const auto & t : file.tensors()) {
        if (std::regex_search(t.name, m, block_tensor) && std::stoll(m[1].str()) >= first_mtp) {
            idx.unused_bytes += t.nbytes;
            idx.unused_ranges.emplace_back(t.file_offset, t.file_offset + t.nbytes);
            continue;
        }
        if (is_remote(t)) {
            idx.remote_bytes += t.nbytes;
            idx.remote_ranges.emplace_back(t.file_offset, t.file_offset + t.nbytes);
            remote_expert_bytes += is_expert_stack(t) ? t.nbytes : 0;
            continue;
        }
        if (!is_expert_stack(t) || !std::regex_match(t.name, m, layer_weight_pattern())) {
            idx.dense_bytes += t.nbytes;
            continue;
        }
        // A stack with no elements has no experts to page (and slots of 0 bytes).
        if (t.ne[0] == 0 || t.ne[1] == 0 || t.ne[2] == 0) {
            throw Error(file.path() + ": expert tensor '" + t.name + "' is empty (shape [" + std::to_string(t.ne[0]) +
                        ", " + std::to_string(t.ne[1]) + ", " + std::to_string(t.ne[2]) + "]); the file is corrupt");
        }
        // llama.cpp names layers blk.%d: a number of more digits than an int holds is no layer
        // (and std::stoi would throw std::out_of_range rather than say so).
        const std::string digits = m[1].str();
        if (digits.size() > 9) {
            throw Error(file.path() + ": expert tensor '" + t.name + "' names layer " + digits +
                        ", more than any model has; the file is corrupt");
        }
        ExpertTensor e;
        e.name = t.name;
        e.kind = matrix_kind(m[2].str());
        e.type = t.type;
        for (int d = 0; d < 3; ++d) {
            e.ne[d] = t.ne[d];
        }
        e.expert_stride = t.nb[2];
        e.file_offset = t.file_offset;
        e.shard = t.shard;
        const int il = std::stoi(digits);
        auto & layer = by_layer[il];
        layer.layer = il;
        layer.expert_bytes += e.expert_stride;
        layer.tensors.push_back(std::move(e));
        idx.expert_bytes += t.nbytes;
    }

    if (by_layer.empty() && remote_expert_bytes > 0) {
        throw Error(
            file.path() +
            ": every layer with experts is on the RPC servers (-ngl): nothing is left for the pager "
            "here. Keep some on this machine: -ngl below the model's " +
            std::to_string(idx.n_layer + 1) +
            " layers (with the output layer), or a --tensor-split share for a local GPU; or run stock llama.cpp");
    }
    if (by_layer.empty() || !n_expert || *n_expert <= 0) {
        throw Error(file.path() + ": not a MoE model: nothing to page (architecture '" + idx.arch +
                    "' has no routed expert tensors blk.N.ffn_*_exps.weight" +
                    (n_expert ? "" : " and no " + idx.arch + ".expert_count") +
                    "); run it with stock llama.cpp instead");
    }
    // Expert counts are 32-bit everywhere past this point: a larger one would wrap.
    if (*n_expert > static_cast<int64_t>(UINT32_MAX)) {
        throw Error(file.path() + ": " + idx.arch + ".expert_count is " + std::to_string(*n_expert) +
                    ", more than the 4294967295 experts a layer can have; the file is corrupt");
    }
    idx.n_expert = static_cast<uint32_t>(*n_expert);
    if (!n_used || *n_used <= 0 || *n_used > *n_expert) {
        throw Error(file.path() + ": " + idx.arch + ".expert_used_count is " +
                    (n_used ? std::to_string(*n_used) : std::string("missing")) +
                    "; it must be between 1 and expert_count (" + std::to_string(*n_expert) + ")");
    }
    idx.n_expert_used = static_cast<uint32_t>(*n_used);

    for (auto & [il, layer] : by_layer) {
        if (n_layer && il >= *n_layer) {
            throw Error(file.path() + ": expert tensor of layer " + std::to_string(il) + " but the model has only " +
                        std::to_string(*n_layer) + " layers");
        }
        for (const auto & e : layer.tensors) {
            if (e.ne[2] != idx.n_expert) {
                throw Error(file.path() + ": expert tensor '" + e.name + "' holds " + std::to_string(e.ne[2]) +
                            " experts but " + idx.arch + ".expert_count is " + std::to_string(idx.n_expert));
            }
        }
        std::sort(layer.tensors.begin(), layer.tensors.end(),
                  [](const ExpertTensor & a, const ExpertTensor & b) { return a.file_offset < b.file_offset; });
        layer.slot_bytes = place_matrices(layer.tensors, nullptr);
        idx.layers.push_back(layer);
    }

    std::map<uint64_t, SizeClass> classes;
    for (const auto & layer : idx.layers) {
        auto & c = classes[layer.expert_bytes];
        c.expert_bytes = layer.expert_bytes;
        c.slot_bytes = std::max(c.slot_bytes, layer.slot_bytes);
        c.layers.push_back(layer.layer);
    }
    for (auto & [bytes, c] : classes) {
        idx.size_classes.push_back(c);
    }

    // One MUL_MAT_ID reads all the experts a token selected in a layer at once, so the
    // arena must be able to pin that many experts of the largest slot size at the same time.
    uint64_t largest = 0;
    for (const auto & c : idx.size_classes) {
        largest = std::max(largest, c.slot_bytes);
    }
    idx.min_arena_bytes = static_cast<uint64_t>(idx.n_expert_used) * largest;
    idx.min_arena_reason =
        "a token's " + std::to_string(idx.n_expert_used) +
        " selected experts of one layer must be resident together while the "
        "layer's expert matmuls read them: " +
        std::to_string(idx.n_expert_used) + " x " + std::to_string(largest) +
        " B (largest expert slot, matrices page-aligned for direct reads) = " + format_bytes(idx.min_arena_bytes);
    return idx;
}

const ExpertLayer * ExpertIndex::layer(int il) const {
    for (const auto & l : layers) {
        if (l.layer == il) {
            return &l;
        }
    }
    return nullptr;
}

}  // namespace epq
