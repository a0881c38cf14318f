#include "backend/kernel_paths.h"

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

// ggml-cpu's own predicates for the IQ panel path (ggml/src/ggml-cpu/iqp.h of the pinned tree;
// internal, not exported in a public header, but global symbols of the static ggml-cpu).
extern "C" {
bool ggml_cpu_iqp_mul_mat_id_min_batch(int64_t cne1);
bool ggml_cpu_iqp_supports_mul_mat_id(const struct ggml_tensor * dst);
}

namespace epq {

namespace {

// Whether the panel path is open at all for a node of this weight shape, built as llama.cpp's
// graph builds it: F32 activations, one row per token, ids for enough rows that the node-level
// test only looks at type, shape and layout.
bool panel_path_open(ggml_type type, int64_t ne0, int64_t ne1) {
    std::vector<uint8_t> mem(8 * ggml_tensor_overhead() + 1024);
    ggml_init_params ip{mem.size(), mem.data(), true};
    ggml_context * ctx = ggml_init(ip);
    constexpr int64_t kRows = 1024;
    ggml_tensor * w = ggml_new_tensor_3d(ctx, type, ne0, ne1, 2);
    ggml_tensor * x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, ne0, 1, kRows);
    ggml_tensor * ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, kRows);
    ggml_tensor * dst = ggml_mul_mat_id(ctx, w, x, ids);
    const bool open = ggml_cpu_iqp_supports_mul_mat_id(dst);
    ggml_free(ctx);
    return open;
}

}  // namespace

bool expert_takes_special_kernel(ggml_type type, int64_t ne0, int64_t ne1, int64_t rows) {
    static std::mutex mu;
    static std::map<std::tuple<int, int64_t, int64_t>, bool> open_for;
    bool open = false;
    {
        std::lock_guard<std::mutex> lock(mu);
        const auto key = std::make_tuple(static_cast<int>(type), ne0, ne1);
        auto it = open_for.find(key);
        if (it == open_for.end()) {
            it = open_for.emplace(key, panel_path_open(type, ne0, ne1)).first;
        }
        open = it->second;
    }
    return open && ggml_cpu_iqp_mul_mat_id_min_batch(rows);
}

}  // namespace epq
