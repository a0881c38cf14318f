#include "verify/ref_moe.h"

#include "util/error.h"
#include "verify/ref_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

namespace epq::ref {

namespace {

std::vector<uint8_t> read_at(const std::string & path, uint64_t offset, uint64_t len) {
    std::unique_ptr<FILE, int (*)(FILE *)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    std::vector<uint8_t> out(len);
    if (!f || fseeko(f.get(), static_cast<off_t>(offset), SEEK_SET) != 0 ||
        std::fread(out.data(), 1, len, f.get()) != len) {
        throw Error("cannot read " + std::to_string(len) + " bytes at " + std::to_string(offset) + " of " + path);
    }
    return out;
}

// Largest quantization step ggml's activation format gives these values.
double max_step(int act, const std::vector<float> & v) {
    double step = 0.0;
    const int block = act == Q8_K ? 256 : act == Q8_0 || act == Q8_1 ? 32 : 1;
    for (size_t b = 0; b < v.size(); b += static_cast<size_t>(block)) {
        double amax = 0.0;
        for (size_t j = b; j < std::min(v.size(), b + static_cast<size_t>(block)); ++j) {
            amax = std::max(amax, std::fabs(static_cast<double>(v[j])));
        }
        if (act == Q8_K || act == Q8_0 || act == Q8_1) {
            step = std::max(step, amax / 127.0);
        } else if (act == F16) {
            step = std::max(step, amax * std::ldexp(1.0, -10));
        } else if (act == BF16) {
            step = std::max(step, amax * std::ldexp(1.0, -7));
        }
    }
    return step;
}

}  // namespace

ExpertBytes read_expert(const GgufFile & file, int layer, int expert) {
    ExpertBytes e;
    auto load = [&](const char * kind, int * type, std::vector<uint8_t> * bytes, int64_t * n_in, int64_t * n_out) {
        const std::string name = "blk." + std::to_string(layer) + ".ffn_" + kind + "_exps.weight";
        const TensorInfo * t = file.find_tensor(name);
        if (!t) {
            throw Error("no tensor " + name + " (the kernel reference needs separate gate, up and down experts)");
        }
        *type = t->type;
        *n_in = t->ne[0];
        *n_out = t->ne[1];
        *bytes = read_at(file.path(), t->file_offset + static_cast<uint64_t>(expert) * t->nb[2], t->nb[2]);
    };
    int64_t a = 0, b = 0;
    load("gate", &e.gate_type, &e.gate, &e.n_embd, &e.n_ff);
    load("up", &e.up_type, &e.up, &a, &b);
    load("down", &e.down_type, &e.down, &a, &b);
    return e;
}

Forward forward(const ExpertBytes & e, const std::vector<float> & x) {
    for (int t : {e.gate_type, e.up_type, e.down_type}) {
        if (!supported(t)) {
            throw Error("no scalar reference for " + type_name(t));
        }
    }
    Forward f;
    const auto row_bytes = [](int type, int64_t n) {
        return static_cast<size_t>(n / block_values(type) * block_bytes(type));
    };
    const auto act_g = quantize_activation(activation_type(e.gate_type), x.data(), e.n_embd);
    const auto act_u = quantize_activation(activation_type(e.up_type), x.data(), e.n_embd);
    f.gate.resize(static_cast<size_t>(e.n_ff));
    f.up.resize(static_cast<size_t>(e.n_ff));
    f.h.resize(static_cast<size_t>(e.n_ff));
    for (int64_t j = 0; j < e.n_ff; ++j) {
        f.gate[j] = dot_row(e.gate_type, e.gate.data() + j * row_bytes(e.gate_type, e.n_embd), act_g, e.n_embd);
        f.up[j] = dot_row(e.up_type, e.up.data() + j * row_bytes(e.up_type, e.n_embd), act_u, e.n_embd);
        f.h[j] = f.gate[j] / (1.0 + std::exp(-f.gate[j])) * f.up[j];  // SiLU(gate) * up
    }
    std::vector<float> hf(f.h.begin(), f.h.end());
    const int act_d = activation_type(e.down_type);
    const auto act_h = quantize_activation(act_d, hf.data(), e.n_ff);
    f.h_step = max_step(act_d, hf);
    f.n_embd = e.n_embd;
    f.n_ff = e.n_ff;
    f.h_steps.resize(static_cast<size_t>(e.n_ff));
    const int64_t block = act_d == Q8_K ? 256 : act_d == Q8_0 || act_d == Q8_1 ? 32 : 1;
    for (int64_t b = 0; b < e.n_ff; b += block) {
        const std::vector<float> part(hf.begin() + b, hf.begin() + std::min(e.n_ff, b + block));
        const double step = max_step(act_d, part);
        for (int64_t j = b; j < std::min(e.n_ff, b + block); ++j) {
            f.h_steps[static_cast<size_t>(j)] = step;
        }
    }
    f.down_w.resize(static_cast<size_t>(e.n_embd * e.n_ff));
    f.down.resize(static_cast<size_t>(e.n_embd));
    std::vector<float> row(static_cast<size_t>(e.n_ff));
    for (int64_t i = 0; i < e.n_embd; ++i) {
        const uint8_t * r = e.down.data() + i * row_bytes(e.down_type, e.n_ff);
        f.down[i] = dot_row(e.down_type, r, act_h, e.n_ff);
        dequantize(e.down_type, r, row.data(), e.n_ff);
        std::copy(row.begin(), row.end(), f.down_w.begin() + i * e.n_ff);
        for (float w : row) {
            f.down_absmax = std::max(f.down_absmax, std::fabs(static_cast<double>(w)));
        }
    }
    return f;
}

bool explained_by_one_flip(const std::vector<const Forward *> & experts, const std::vector<double> & weights,
                           const std::vector<double> & diff, double tol) {
    for (size_t k = 0; k < experts.size(); ++k) {
        const Forward & f = *experts[k];
        for (int64_t i = 0; i < f.n_ff; ++i) {
            const double scale = weights[k] * f.h_steps[static_cast<size_t>(i)];
            for (double sign : {1.0, -1.0}) {
                bool fits = true;
                for (int64_t j = 0; j < f.n_embd && fits; ++j) {
                    const double predicted = sign * scale * f.down_w[static_cast<size_t>(j * f.n_ff + i)];
                    fits = std::fabs(diff[static_cast<size_t>(j)] - predicted) <= tol;
                }
                if (fits) {
                    return true;
                }
            }
        }
    }
    return false;
}

}  // namespace epq::ref
