#include "backend/expert_repack.h"

#include "util/error.h"

#include "ggml-cpu.h"

#include <cstring>
#include <string>
#include <vector>

namespace epq {

namespace {

// ggml's CPU repack buffer type, found the way llama.cpp finds it: among the CPU device's
// extra buffer types. Null where this build of ggml has none.
ggml_backend_buffer_type_t repack_buffer_type() {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) {
        return nullptr;
    }
    auto get_extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
        ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(cpu), "ggml_backend_dev_get_extra_bufts"));
    if (!get_extra) {
        return nullptr;
    }
    for (ggml_backend_buffer_type_t * b = get_extra(cpu); b && *b; ++b) {
        if (std::string(ggml_backend_buft_name(*b)) == "CPU_REPACK") {
            return *b;
        }
    }
    return nullptr;
}

// A tensor header for one expert's matrix at `data` (no context: nothing is allocated).
ggml_tensor matrix_header(const MatrixPlacement & m, void * data) {
    ggml_tensor t{};
    t.type = static_cast<ggml_type>(m.type);
    t.ne[0] = m.n_in;
    t.ne[1] = m.n_out;
    t.ne[2] = t.ne[3] = 1;
    t.nb[0] = ggml_type_size(t.type);
    t.nb[1] = ggml_row_size(t.type, m.n_in);
    t.nb[2] = t.nb[3] = t.nb[1] * static_cast<size_t>(m.n_out);
    t.data = data;
    return t;
}

// A buffer of the repack type: ggml's checks look only at a weight's buffer type.
ggml_backend_buffer_t new_tag_buffer(ggml_backend_buffer_type_t buft) {
    ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(buft, 64);
    if (!b) {
        throw Error("cannot create ggml's CPU repack buffer");
    }
    return b;
}

bool repacks_in(ggml_backend_buffer_t tag, ggml_type type, int64_t ne0, int64_t ne1, int64_t n_expert) {
    // llama.cpp's test (weight_buft_supported): the CPU device accepts the op of a weight that
    // lies in a repack buffer only where ggml has a repacked layout and kernel for it.
    std::vector<uint8_t> mem(8 * ggml_tensor_overhead() + 256);
    ggml_init_params ip{mem.size(), mem.data(), true};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * op = nullptr;
    if (n_expert > 1) {
        ggml_tensor * w = ggml_new_tensor_3d(ctx, type, ne0, ne1, n_expert);
        w->buffer = tag;
        op = ggml_mul_mat_id(ctx, w, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, ne0, 1, 1),
                             ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, 1));
    } else {
        ggml_tensor * w = ggml_new_tensor_2d(ctx, type, ne0, ne1);
        w->buffer = tag;
        op = ggml_mul_mat(ctx, w, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne0, 1));
    }
    const bool yes = ggml_backend_dev_supports_op(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU), op);
    ggml_free(ctx);
    return yes;
}

}  // namespace

bool stock_repacks_weight(ggml_type type, int64_t ne0, int64_t ne1, int64_t n_expert) {
    // One tag buffer for the process: asked once per dense matrix at load.
    static const ggml_backend_buffer_t tag = [] {
        ggml_backend_buffer_type_t buft = repack_buffer_type();
        return buft ? new_tag_buffer(buft) : nullptr;
    }();
    return tag && repacks_in(tag, type, ne0, ne1, n_expert);
}

ExpertRepack::Key ExpertRepack::key_of(const MatrixPlacement & m) {
    return {m.type, m.n_in, m.n_out};
}

ExpertRepack::ExpertRepack(bool enabled, const SlotLayout & layout) {
    ggml_backend_buffer_type_t buft = enabled ? repack_buffer_type() : nullptr;
    if (!buft) {
        return;
    }
    tag_ = new_tag_buffer(buft);
    for (const auto & l : layout.layers) {
        for (const auto & m : l.matrices) {
            const Key k = key_of(m);
            auto it = traits_.find(k);
            if (it == traits_.end()) {
                void * traits = nullptr;
                if (repacks_in(tag_, static_cast<ggml_type>(m.type), m.n_in, m.n_out, 2)) {
                    ggml_tensor t = matrix_header(m, nullptr);
                    t.buffer = tag_;
                    ggml_backend_buffer_init_tensor(tag_, &t);  // sets t.extra to ggml's repack traits
                    traits = t.extra;
                }
                it = traits_.emplace(k, traits).first;
            }
            n_repacked_ += it->second != nullptr;
        }
    }
}

ExpertRepack::~ExpertRepack() {
    if (tag_) {
        ggml_backend_buffer_free(tag_);
    }
}

void * ExpertRepack::traits_of(const MatrixPlacement & m) const {
    auto it = traits_.find(key_of(m));
    return it == traits_.end() ? nullptr : it->second;
}

bool ExpertRepack::repacks(const MatrixPlacement & m) const {
    return traits_of(m) != nullptr;
}

void ExpertRepack::repack(const MatrixPlacement & m, uint8_t * data) const {
    void * traits = traits_of(m);
    if (!traits) {
        return;
    }
    // ggml's repack reads the plain layout from one buffer and writes the interleaved one to
    // another, so the read bytes move to scratch first.
    thread_local std::vector<uint8_t> plain;
    ggml_tensor t = matrix_header(m, data);
    const size_t n = ggml_nbytes(&t);
    plain.assign(data, data + n);
    t.buffer = tag_;
    t.extra = traits;
    ggml_backend_tensor_set(&t, plain.data(), 0, n);
}

void ExpertRepack::tag(ggml_tensor * w, const MatrixPlacement & m) const {
    if (void * traits = traits_of(m)) {
        w->buffer = tag_;
        w->extra = traits;
    }
}

}  // namespace epq
