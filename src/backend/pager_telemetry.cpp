#include "backend/pager_telemetry.h"

namespace epq {

namespace {

int32_t id_at(const ggml_tensor * ids, int64_t k, int64_t t) {
    return *reinterpret_cast<const int32_t *>(static_cast<const char *>(ids->data) + t * ids->nb[1] + k * ids->nb[0]);
}

}  // namespace

PagerTelemetry::PagerTelemetry(const std::string & model_path, const ExpertIndex & index, const SlotLayout & layout,
                               const std::string & trace_path)
    : n_expert_(index.n_expert),
      layer_ops_(layout.layers.size(), 0),
      layer_batches_(layout.layers.size(), 0),
      read_in_batch_(layout.layers.size() * index.n_expert, 0),
      activity_(layout.layers.size(), index.n_expert) {
    if (trace_path.empty()) {
        return;
    }
    TraceHeader h;
    h.model = model_path.substr(model_path.find_last_of('/') + 1);
    h.arch = index.arch;
    h.n_expert = index.n_expert;
    h.n_expert_used = index.n_expert_used;
    for (size_t c = 0; c < layout.class_bytes.size(); ++c) {
        h.classes.push_back({layout.class_bytes[c], layout.class_experts[c]});
    }
    for (const auto & l : layout.layers) {
        h.layers.emplace_back(static_cast<uint32_t>(l.layer), l.size_class);
    }
    trace_ = std::make_unique<TraceWriter>(trace_path, h);
}

bool PagerTelemetry::begin_chain(size_t li, size_t n_mm, size_t n_matrices) {
    stats_.ops += n_mm;
    ++stats_.chains;
    const bool first_op_of_layer = layer_ops_[li] % n_matrices == 0;
    layer_ops_[li] += n_mm;
    if (first_op_of_layer) {
        ++layer_batches_[li];
        if (li == 0) {
            activity_.next_batch();
        }
    }
    return first_op_of_layer;
}

// Blocked on reads: a layer's own misses, and the guessed reads it settles before it starts.
double PagerTelemetry::read_waits() const {
    return stats_.wait_seconds + stats_.prefetch_wait_seconds;
}

void PagerTelemetry::batch_starts(uint64_t tokens) {
    if (batch_tokens_ > 0 && batch_tokens_ <= stats_.decode_batch_max && last_chain_end_ > batch_start_) {
        stats_.decode_tokens += batch_tokens_;
        stats_.decode_seconds += std::chrono::duration<double>(last_chain_end_ - batch_start_).count();
        stats_.decode_wait_seconds += read_waits() - batch_wait0_;
        ++stats_.decode_steps;
        stats_.decode_lookups += stats_.expert_lookups - batch_lookups0_;
        stats_.decode_demand_misses += demand_reads_ - batch_demand0_;
        stats_.decode_missed_bytes += stats_.missed_expert_bytes - batch_missed0_;
    }
    batch_tokens_ = tokens;
    batch_start_ = std::chrono::steady_clock::now();
    batch_wait0_ = read_waits();
    batch_lookups0_ = stats_.expert_lookups;
    batch_demand0_ = demand_reads_;
    batch_missed0_ = stats_.missed_expert_bytes;
}

void PagerTelemetry::chain_ends() {
    last_chain_end_ = std::chrono::steady_clock::now();
}

void PagerTelemetry::count_demand_read(size_t li, uint32_t e) {
    ++demand_reads_;
    uint64_t & last = read_in_batch_[li * n_expert_ + e];
    stats_.rereads += last == layer_batches_[li];
    last = layer_batches_[li];
}

void PagerTelemetry::record_routing(size_t li, uint32_t layer_no, const ggml_tensor * ids) {
    if (!trace_) {
        return;
    }
    if (li == 0) {
        ++trace_step_;
        trace_token_ += trace_step_tokens_;
        trace_step_tokens_ = static_cast<uint64_t>(ids->ne[1]);
    }
    std::vector<int32_t> row(static_cast<size_t>(ids->ne[0]));
    for (int64_t t = 0; t < ids->ne[1]; ++t) {
        for (int64_t k = 0; k < ids->ne[0]; ++k) {
            row[static_cast<size_t>(k)] = id_at(ids, k, t);
        }
        trace_->record(trace_step_, trace_token_ + static_cast<uint64_t>(t), layer_no, row.data(), row.size());
    }
}

void PagerTelemetry::record_guess(uint32_t layer_no, const std::vector<uint32_t> & experts) {
    if (trace_) {
        trace_->record_guess(trace_step_, layer_no, experts.data(), experts.size());
    }
}

void PagerTelemetry::flush_trace() {
    if (trace_) {
        trace_->flush();
    }
}

}  // namespace epq
