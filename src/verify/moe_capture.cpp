#include "verify/moe_capture.h"

#include <cstring>

namespace epq {

namespace {

// "ffn_moe_topk-12" -> ("ffn_moe_topk", 12)
bool split_name(const char * name, std::string * base, int * layer) {
    const char * dash = std::strrchr(name, '-');
    if (!dash || !dash[1]) {
        return false;
    }
    for (const char * p = dash + 1; *p; ++p) {  // "ffn_moe_out-3 (reshaped)" is not the node itself
        if (*p < '0' || *p > '9') {
            return false;
        }
    }
    *base = std::string(name, static_cast<size_t>(dash - name));
    *layer = std::atoi(dash + 1);
    return true;
}

// Copies a (possibly strided) 2-D or 3-D host tensor as [outer][ne0] rows of T.
template <typename T>
std::vector<T> rows(const ggml_tensor * t, int64_t * ne0, int64_t * n_rows) {
    *ne0 = t->ne[0];
    *n_rows = t->ne[1] * t->ne[2] * t->ne[3];
    std::vector<T> out(static_cast<size_t>(*ne0 * *n_rows));
    std::vector<char> tmp;
    const char * base = static_cast<const char *>(t->data);
    if (t->buffer && !ggml_backend_buffer_is_host(t->buffer)) {
        tmp.resize(ggml_nbytes(t));
        ggml_backend_tensor_get(t, tmp.data(), 0, tmp.size());
        base = tmp.data();
    }
    size_t r = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3) {
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2) {
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1, ++r) {
                for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
                    std::memcpy(&out[r * static_cast<size_t>(*ne0) + static_cast<size_t>(i0)],
                                base + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], sizeof(T));
                }
            }
        }
    }
    return out;
}

}  // namespace

bool MoeCapture::callback(ggml_tensor * t, bool ask, void * user) {
    std::string base;
    int layer = 0;
    if (!split_name(t->name, &base, &layer)) {
        return ask ? false : true;
    }
    const bool wanted =
        base == "ffn_moe_logits" || base == "ffn_moe_topk" || base == "ffn_moe_weighted" || base == "ffn_moe_out";
    if (ask) {
        return wanted;
    }
    if (!wanted) {
        return true;
    }
    auto & c = static_cast<MoeCapture *>(user)->layers[layer];
    int64_t ne0 = 0, n = 0;
    if (base == "ffn_moe_logits") {
        c.input = rows<float>(t->src[1], &ne0, &n);  // the router's input
        c.n_embd = ne0;
        c.n_tokens = n;
    } else if (base == "ffn_moe_topk") {
        c.ids = rows<int32_t>(t, &ne0, &n);
        c.n_used = ne0;
    } else if (base == "ffn_moe_weighted") {
        const ggml_tensor * w = t->src[1];  // [1, n_used, n_tokens]
        c.weights = rows<float>(w, &ne0, &n);
    } else if (base == "ffn_moe_out") {
        c.output = rows<float>(t, &ne0, &n);
    }
    return true;
}

}  // namespace epq
