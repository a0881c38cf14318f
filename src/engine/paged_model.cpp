#include "engine/paged_model.h"

#include "backend/expert_repack.h"

#include "backend/mmap_policy.h"
#include "backend/pager_device.h"
#include "engine/memory_budget.h"
#include "util/byte_size.h"
#include "util/error.h"

#include "common.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <unistd.h>

namespace epq {

namespace {

std::string regex_escape(const std::string & s) {
    std::string out;
    for (char c : s) {
        if (std::string(".^$|()[]{}*+?\\").find(c) != std::string::npos) {
            out += '\\';
        }
        out += c;
    }
    return out;
}

// `ranges` (sorted, disjoint) without the parts covered by `holes`.
std::vector<std::pair<uint64_t, uint64_t>> subtract_ranges(const std::vector<std::pair<uint64_t, uint64_t>> & ranges,
                                                           std::vector<std::pair<uint64_t, uint64_t>> holes) {
    std::sort(holes.begin(), holes.end());
    std::vector<std::pair<uint64_t, uint64_t>> out;
    size_t h = 0;
    for (auto [b, e] : ranges) {
        while (h < holes.size() && holes[h].second <= b) {
            ++h;
        }
        for (size_t i = h; i < holes.size() && holes[i].first < e && b < e; ++i) {
            if (holes[i].first > b) {
                out.emplace_back(b, holes[i].first);
            }
            b = std::max(b, holes[i].second);
        }
        if (b < e) {
            out.emplace_back(b, e);
        }
    }
    return out;
}

// The parts of `ranges` (sorted) inside [begin, end), as offsets from `begin`: one file's ranges
// out of the model's byte space.
std::vector<std::pair<uint64_t, uint64_t>> within(const std::vector<std::pair<uint64_t, uint64_t>> & ranges,
                                                  uint64_t begin, uint64_t end) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const auto & [b, e] : ranges) {
        const uint64_t lo = std::max(b, begin), hi = std::min(e, end);
        if (lo < hi) {
            out.emplace_back(lo - begin, hi - begin);
        }
    }
    return out;
}

}  // namespace

std::optional<RepackedExperts> find_repacked_experts(const ExpertIndex & index, const std::string & asked,
                                                     std::string * note) {
    if (asked == "none") {
        return std::nullopt;
    }
    if (asked != "auto") {
        return open_repacked_experts(asked, index);  // named: what does not fit is an error
    }
    const std::string beside = repacked_experts_path(index);
    if (access(beside.c_str(), F_OK) != 0) {
        return std::nullopt;
    }
    try {
        return open_repacked_experts(beside, index);
    } catch (const Error & e) {
        *note = std::string("not reading experts from it: ") + e.what();
        return std::nullopt;
    }
}

uint64_t estimate_kv_bytes(const GgufFile & file, uint32_t n_ctx) {
    const std::string a = file.architecture();
    const int64_t n_layer = file.get_int(a + ".block_count").value_or(0);
    const int64_t n_embd = file.get_int(a + ".embedding_length").value_or(0);
    const int64_t n_head = std::max<int64_t>(1, file.get_int(a + ".attention.head_count").value_or(1));
    const int64_t n_head_kv = file.get_int(a + ".attention.head_count_kv").value_or(n_head);
    const int64_t k = file.get_int(a + ".attention.key_length").value_or(n_embd / n_head);
    const int64_t v = file.get_int(a + ".attention.value_length").value_or(n_embd / n_head);
    // Metadata comes from the file: a hostile one must not overflow this into a small number.
    uint64_t bytes = 2 * static_cast<uint64_t>(n_ctx);
    for (const int64_t f : {n_layer, n_head_kv, k + v}) {
        if (f < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(f), &bytes)) {
            return UINT64_MAX;
        }
    }
    return bytes;
}

PagedModel::PagedModel(const std::string & path, const PagedModelOptions & opts) : n_gpu_layers_(opts.n_gpu_layers) {
    const GgufFile file = GgufFile::open(path);
    file.require_tensor_data();
    // Layers on an RPC server keep their tensors, experts included, there (LayerPlacement).
    const std::string arch = file.architecture();
    const int64_t n_layer = file.get_int(arch + ".block_count").value_or(0);
    if (n_layer > 0 && n_layer < (1 << 20)) {
        placement_ = place_layers(static_cast<int>(n_layer), opts.n_gpu_layers, opts.tensor_split);
    }
    std::vector<bool> remote;
    if (placement_.any_remote()) {
        for (int il = 0; il <= n_layer; ++il) {
            remote.push_back(placement_.remote(il));
        }
    }
    index_ = ExpertIndex::build(file, opts.load_mtp, remote);

    // Everything besides the arena, counted before anything is allocated. llama.cpp's compute
    // buffer reserves a row of logits per batch token, but only the rows a step outputs (one per
    // sequence) are ever written, so the pages of the rest are never taken: count 64 rows, and
    // the batch's activations. The pager's scratch grows with the batch (Pager::scratch_bound).
    MemoryNeeds needs;
    needs.dense = index_.dense_bytes;
    needs.kv = estimate_kv_bytes(file, opts.n_ctx);
    int64_t n_vocab = 0, n_embd = 0;
    if (const auto * tok = file.find_tensor("token_embd.weight")) {
        n_vocab = tok->ne[1];
        n_embd = tok->ne[0];
    }
    needs.compute = static_cast<uint64_t>(n_vocab) * 4 * std::min<uint32_t>(opts.n_batch, 64) +
                    static_cast<uint64_t>(n_embd) * 4 * 8 * opts.n_batch + (16ull << 20);
    needs.pager_scratch = Pager::scratch_bound(index_, opts.n_batch);
    needs.other = opts.other_needs;
    const MemoryAvailable mem = available_memory();

    // An arena beyond every expert's slot is never filled.
    uint64_t all_slots = 0;
    for (const auto & l : index_.layers) {
        all_slots += l.slot_bytes * index_.n_expert;
    }
    uint64_t arena = 0;
    if (opts.arena == "auto") {
        const ArenaSizing s = auto_arena(mem, needs, index_.min_arena_bytes);
        arena = s.arena_bytes;
        arena_reasoning_ = "--arena auto: " + s.reasoning;
    } else {
        const auto parsed = parse_byte_size(opts.arena);
        if (!parsed) {
            throw Error("--arena expects a size such as 4G or 512M, or 'auto'; got '" + opts.arena + "'");
        }
        arena = *parsed;
        // Only every expert's slots have to fit.
        check_arena_fits(mem, needs, std::min(arena, all_slots),
                         "--arena " + opts.arena + (arena > all_slots ? ", of which every expert takes" : ""));
        arena_reasoning_ = "--arena " + opts.arena;
    }

    gpu_host_ = gpu_host_buffer_first();
    std::optional<RepackedExperts> ready;
    if (opts.layout != WeightLayout::file) {
        ready = find_repacked_experts(index_, opts.repacked_experts, &repacked_note_);
    } else if (opts.repacked_experts != "auto" && opts.repacked_experts != "none") {
        repacked_note_ =
            "-nr keeps every weight in the file's layout: not reading experts from " + opts.repacked_experts;
    }
    repack_ = layout_repacks(opts.layout, arena >= all_slots || ready.has_value(), gpu_host_);
    if (repack_ && ready) {
        repacked_file_ = ready->path;
    }

    PagerOptions po;
    po.arena_bytes = arena;
    po.read_threads = opts.read_threads;
    po.prefetch = opts.prefetch;
    po.policy = opts.policy;
    po.trace_path = opts.trace_path;
    po.repack = repack_;
    if (!repacked_file_.empty()) {
        po.repacked_file = std::move(ready);
    }
    pager_ = std::make_unique<Pager>(path, index_, po);

    register_pager_device();
    attach_pager(pager_.get());
    // Exactly the indexed expert tensors: one pattern per tensor name suffix, listing its layers
    // (llama.cpp compiles every pattern once per tensor, so a few alternations beat one per name).
    std::map<std::string, std::string> layers_of;
    for (const auto & l : index_.layers) {
        for (const auto & t : l.tensors) {
            std::string & alt = layers_of[t.name.substr(t.name.find('.', 4) + 1)];
            alt += (alt.empty() ? "" : "|") + std::to_string(l.layer);
        }
    }
    for (const auto & [suffix, layers] : layers_of) {
        override_patterns_.push_back("^blk\\.(" + layers + ")\\." + regex_escape(suffix) + "$");
    }
    // What else belongs to the paged layers' routed experts (their biases, scales) stays in CPU
    // memory, as stock's --cpu-moe keeps it (LLM_FFN_EXPS_REGEX): beside a GPU it would otherwise
    // go there with its layer, and the ops that use it with it, where stock computes them on the
    // CPU. A remote layer's stay with its experts.
    std::string paged_layers;
    for (const auto & l : index_.layers) {
        paged_layers += (paged_layers.empty() ? "" : "|") + std::to_string(l.layer);
    }
    override_patterns_.push_back("^blk\\.(" + paged_layers + ")" + LLM_FFN_EXPS_REGEX);
    for (size_t i = 0; i < override_patterns_.size(); ++i) {
        const bool pager = i + 1 < override_patterns_.size();
        overrides_.push_back(
            {override_patterns_[i].c_str(), pager ? pager_buffer_type() : ggml_backend_cpu_buffer_type()});
    }
    overrides_.push_back({nullptr, nullptr});

    // Prefetch exactly the bytes llama.cpp loads that are not routed experts, in every file of the
    // model (not the MTP layers it skips).
    std::vector<std::pair<uint64_t, uint64_t>> expert_ranges = index_.unused_ranges, dense;
    for (const auto & l : index_.layers) {
        for (const auto & t : l.tensors) {
            expert_ranges.emplace_back(t.file_offset, t.file_offset + t.expert_stride * index_.n_expert);
        }
    }
    std::vector<std::pair<uint64_t, uint64_t>> whole;
    for (const auto & s : file.shards()) {
        whole.emplace_back(s.base, s.base + s.size);
    }
    dense = subtract_ranges(whole, expert_ranges);
    // With repacking on, llama.cpp copies the dense matrices ggml repacks out of the mapping into
    // memory of its own: locking their file pages as well would hold them twice.
    // Nor the remote layers' bytes: llama.cpp reads them once, to send them to their server.
    std::vector<std::pair<uint64_t, uint64_t>> copied = index_.remote_ranges;
    // Nor a local GPU's layers': llama.cpp reads them once, to upload them, and locked they would
    // stay in RAM beside the device's copy (measured: a 30B model with every layer on lavapipe
    // went over an 8 GiB cap its arena was sized for). What the CPU override above keeps in the
    // mapping (the paged layers' expert biases) stays locked.
    static const std::regex kept_on_cpu(LLM_FFN_EXPS_REGEX);
    for (const auto & t : file.tensors()) {
        const int il = placed_layer(t.name, static_cast<size_t>(std::max<int64_t>(n_layer, 0)));
        if (placement_.local_device(il) && !std::regex_search(t.name, kept_on_cpu)) {
            copied.emplace_back(t.file_offset, t.file_offset + t.nbytes);
        }
    }
    if (repack_) {
        for (const auto & t : file.tensors()) {
            // Matrices (stacked experts are 3-D); token_embd is looked up (GET_ROWS), not multiplied.
            if (t.n_dims == 2 && t.name != "token_embd.weight" && stock_repacks_weight(t.type, t.ne[0], t.ne[1])) {
                copied.emplace_back(t.file_offset, t.file_offset + t.nbytes);
            }
        }
    }
    const auto locked = subtract_ranges(dense, std::move(copied));
    std::vector<LazyFile> files;
    for (const auto & s : file.shards()) {
        files.push_back({s.path, within(dense, s.base, s.base + s.size), within(locked, s.base, s.base + s.size)});
    }
    set_lazy_mapping(std::move(files));
}

void PagedModel::configure(SessionOptions & so) const {
    so.overrides = overrides();
    so.n_gpu_layers = n_gpu_layers_;
    if (placement_.pin_split()) {
        so.tensor_split = placement_.weights;
    }
    so.use_extra_bufts = repack_;
    so.no_host = repack_ && gpu_host_;
    if (gpu_host_) {
        so.op_offload = false;
    }
}

DenseLock PagedModel::loaded() {
    // The policy stays until the pager goes: a server that sleeps when idle (llama-server's
    // --sleep-idle-seconds) frees the model and loads it again, and that mapping must be as lazy.
    return dense_lock();
}

PagedModel::~PagedModel() {
    clear_lazy_mapping();
    attach_pager(nullptr);
}

}  // namespace epq
