#include "gguf/inspect_report.h"

#include "util/byte_size.h"

#include "gguf.h"

#include <cstdio>
#include <sstream>

namespace epq {

namespace {

std::string shape_str(const int64_t * ne, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) {
        s += (i ? ", " : "") + std::to_string(ne[i]);
    }
    return s + "]";
}

std::string with_commas(uint64_t v) {
    std::string s = std::to_string(v);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) {
        s.insert(static_cast<size_t>(i), ",");
    }
    return s;
}

std::string percent(uint64_t part, uint64_t whole) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.1f%%",
                  whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
    return buf;
}

// A BOOL array such as qwen35moe's attention.recurrent_layers, rendered as layer ranges.
std::string recurrent_layers(const GgufFile & file, const std::string & arch, std::vector<int> * out) {
    const int64_t id = gguf_find_key(file.ctx(), (arch + ".attention.recurrent_layers").c_str());
    if (id < 0 || gguf_get_kv_type(file.ctx(), id) != GGUF_TYPE_ARRAY ||
        gguf_get_arr_type(file.ctx(), id) != GGUF_TYPE_BOOL) {
        return "";
    }
    const auto * flags = static_cast<const int8_t *>(gguf_get_arr_data(file.ctx(), id));
    std::vector<int> layers;
    for (size_t i = 0; i < gguf_get_arr_n(file.ctx(), id); ++i) {
        if (flags[i]) {
            layers.push_back(static_cast<int>(i));
        }
    }
    if (out) {
        *out = layers;
    }
    return format_ranges(layers);
}

// Expert bytes in each file of the model.
std::vector<uint64_t> expert_bytes_per_shard(const ExpertIndex & idx) {
    std::vector<uint64_t> out(idx.shards.size(), 0);
    for (const auto & l : idx.layers) {
        for (const auto & t : l.tensors) {
            out[t.shard] += t.expert_stride * static_cast<uint64_t>(t.ne[2]);
        }
    }
    return out;
}

}  // namespace

std::string format_ranges(const std::vector<int> & v) {
    std::string s;
    for (size_t i = 0; i < v.size();) {
        size_t j = i;
        while (j + 1 < v.size() && v[j + 1] == v[j] + 1) {
            ++j;
        }
        s += (s.empty() ? "" : ", ") + std::to_string(v[i]) + (j > i ? "-" + std::to_string(v[j]) : "");
        i = j + 1;
    }
    return s;
}

std::string inspect_text(const GgufFile & file, const ExpertIndex & idx, bool per_layer) {
    std::ostringstream o;
    const uint64_t total = idx.dense_bytes + idx.expert_bytes;
    o << "model:          " << file.path() << " (" << format_bytes(idx.file_size) << ")\n";
    if (file.split()) {
        const auto experts = expert_bytes_per_shard(idx);
        o << "split:          " << idx.shards.size() << " files, every one's experts paged\n";
        for (size_t k = 0; k < idx.shards.size(); ++k) {
            o << "  " << (k + 1) << "/" << idx.shards.size() << "  " << idx.shards[k].path << " ("
              << format_bytes(idx.shards[k].size) << ", experts " << format_bytes(experts[k]) << ")\n";
        }
    }
    o << "architecture:   " << idx.arch << ", " << idx.n_layer << " layers, " << idx.n_expert << " routed experts, "
      << idx.n_expert_used << " used per token\n";
    const std::string rec = recurrent_layers(file, idx.arch, nullptr);
    if (!rec.empty()) {
        o << "recurrent:      layers " << rec << " (attention.recurrent_layers)\n";
    }
    if (idx.n_mtp_layers > 0) {
        const int first = static_cast<int>(idx.n_layer - idx.n_mtp_layers);
        o << "mtp layers:     "
          << (idx.n_mtp_layers == 1 ? "layer " + std::to_string(first)
                                    : "layers " + std::to_string(first) + "-" + std::to_string(idx.n_layer - 1))
          << " (next-token prediction, " << format_bytes(idx.unused_bytes) << "): "
          << (idx.mtp_loaded ? "loaded by llama.cpp, counted below"
                             : "llama.cpp skips them unless MTP drafting is on; neither read nor budgeted")
          << "\n";
    }
    o << "dense weights:  " << format_bytes(idx.dense_bytes) << " (" << percent(idx.dense_bytes, total)
      << ")  stay in RAM\n";
    o << "expert weights: " << format_bytes(idx.expert_bytes) << " (" << percent(idx.expert_bytes, total) << ") in "
      << idx.layers.size() << " layers  paged from disk\n";
    o << "expert size classes (bytes of one expert, all its matrices):\n";
    for (const auto & c : idx.size_classes) {
        const ExpertLayer * l = idx.layer(c.layers.front());
        std::string parts;
        for (const auto & t : l->tensors) {
            parts += (parts.empty() ? "" : " + ") + t.kind + " " + ggml_type_name(t.type) + " " +
                     with_commas(t.expert_stride);
        }
        o << "  " << with_commas(c.expert_bytes) << " B (" << parts << ")  layers " << format_ranges(c.layers) << " ("
          << c.layers.size() << "), arena slot " << with_commas(c.slot_bytes) << " B\n";
    }
    o << "minimum arena:  " << format_bytes(idx.min_arena_bytes) << " (" << with_commas(idx.min_arena_bytes)
      << " B): " << idx.min_arena_reason << "\n";
    o << "all experts:    " << format_bytes(idx.expert_bytes) << " (an arena this large never evicts)\n";
    if (per_layer) {
        o << "\nlayer  tensor                      type    shape [in, out, experts]  bytes/expert  file offset"
          << (file.split() ? " (file)" : "") << "\n";
        for (const auto & l : idx.layers) {
            for (const auto & t : l.tensors) {
                char line[320];
                std::snprintf(line, sizeof line, "%5d  %-26s  %-6s  %-24s  %12s  %llu", l.layer, t.name.c_str(),
                              ggml_type_name(t.type), shape_str(t.ne, 3).c_str(), with_commas(t.expert_stride).c_str(),
                              static_cast<unsigned long long>(t.file_offset - idx.shards[t.shard].base));
                o << line;
                if (file.split()) {
                    o << " (" << (t.shard + 1) << "/" << idx.shards.size() << ")";
                }
                o << "\n";
            }
        }
    }
    return o.str();
}

nlohmann::json inspect_json(const GgufFile & file, const ExpertIndex & idx) {
    using nlohmann::json;
    json j;
    j["path"] = file.path();
    j["file_bytes"] = idx.file_size;
    j["files"] = json::array();
    const auto experts = expert_bytes_per_shard(idx);
    for (size_t k = 0; k < idx.shards.size(); ++k) {
        j["files"].push_back(
            {{"path", idx.shards[k].path}, {"bytes", idx.shards[k].size}, {"expert_bytes", experts[k]}});
    }
    j["architecture"] = idx.arch;
    j["n_layer"] = idx.n_layer;
    j["n_expert"] = idx.n_expert;
    j["n_expert_used"] = idx.n_expert_used;
    j["dense_bytes"] = idx.dense_bytes;
    j["mtp_layers"] = idx.n_mtp_layers;
    j["mtp_loaded"] = idx.mtp_loaded;
    j["unused_bytes"] = idx.unused_bytes;
    j["expert_bytes"] = idx.expert_bytes;
    std::vector<int> rec;
    if (!recurrent_layers(file, idx.arch, &rec).empty() || !rec.empty()) {
        j["recurrent_layers"] = rec;
    }
    j["size_classes"] = json::array();
    for (const auto & c : idx.size_classes) {
        j["size_classes"].push_back(
            {{"expert_bytes", c.expert_bytes}, {"slot_bytes", c.slot_bytes}, {"layers", c.layers}});
    }
    j["min_arena_bytes"] = idx.min_arena_bytes;
    j["min_arena_reason"] = idx.min_arena_reason;
    j["layers"] = json::array();
    for (const auto & l : idx.layers) {
        json jl{{"layer", l.layer},
                {"expert_bytes", l.expert_bytes},
                {"slot_bytes", l.slot_bytes},
                {"tensors", json::array()}};
        for (const auto & t : l.tensors) {
            jl["tensors"].push_back({{"name", t.name},
                                     {"kind", t.kind},
                                     {"type", ggml_type_name(t.type)},
                                     {"shape", {t.ne[0], t.ne[1], t.ne[2]}},
                                     {"bytes_per_expert", t.expert_stride},
                                     {"file", t.shard},
                                     {"file_offset", t.file_offset - idx.shards[t.shard].base}});
        }
        j["layers"].push_back(jl);
    }
    return j;
}

}  // namespace epq
