#include "verify/ref_moe.h"

#include "util/error.h"
#include "verify/ref_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

namespace epq::ref {

namespace {

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

// Dequantized row `row` of a 2-D (per-expert bias) tensor, or empty when absent.
std::vector<float> read_bias(const GgufFile & file, const std::string & name, int row) {
    const TensorInfo * t = file.find_tensor(name);
    if (!t) {
        return {};
    }
    std::vector<float> out(static_cast<size_t>(t->ne[0]));
    const auto bytes = file.read(t->file_offset + static_cast<uint64_t>(row) * t->nb[1], t->nb[1]);
    if (!supported(t->type)) {
        throw Error("no scalar reference for the bias type " + type_name(t->type) + " of " + name);
    }
    dequantize(t->type, bytes.data(), out.data(), t->ne[0]);
    return out;
}

// One expert's slice of a 3-D expert tensor.
std::vector<uint8_t> read_slice(const GgufFile & file, const TensorInfo & t, int expert) {
    return file.read(t.file_offset + static_cast<uint64_t>(expert) * t.nb[2], t.nb[2]);
}

std::string unsupported_types(const ExpertBytes & e) {
    for (int t : {e.gate_type, e.up_type, e.down_type}) {
        if (!supported(t)) {
            return "no scalar reference for " + type_name(t);
        }
    }
    return "";
}

// Splits a fused gate_up expert (2 n_ff rows: gate first, as llama.cpp views it) into gate and up.
void split_fused(ExpertBytes * e, std::vector<float> fused_bias) {
    const size_t half = e->up.size() / 2;
    e->gate.assign(e->up.begin(), e->up.begin() + static_cast<std::ptrdiff_t>(half));
    e->up.erase(e->up.begin(), e->up.begin() + static_cast<std::ptrdiff_t>(half));
    e->n_ff /= 2;
    if (!fused_bias.empty()) {
        e->gate_b.assign(fused_bias.begin(), fused_bias.begin() + e->n_ff);
        e->up_b.assign(fused_bias.begin() + e->n_ff, fused_bias.end());
    }
}

// The activation's input, rounded to fp16 and looked up in ggml's fp16 GELU table
// (GGML_GELU_FP16 in vec.h): the table holds gelu of each fp16 value, rounded to fp16. Outside
// [-10, 10] the table is bypassed (0, or x itself).
double gelu_fp16_table(double x) {
    if (x <= -10.0) {
        return 0.0;
    }
    if (x >= 10.0) {
        return x;
    }
    const double v = round_to_fp16(static_cast<float>(x));
    const double g =
        0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * v * (1.0 + 0.044715 * v * v)));
    return round_to_fp16(static_cast<float>(g));
}

double silu(double x) {
    return x / (1.0 + std::exp(-x));
}

void check_shapes(const ExpertBytes & e, const ExpertRecipe & r) {
    if (!e.unsupported.empty() || !r.unsupported.empty()) {
        throw Error("internal: reference asked to compute an expert it does not model");
    }
    if (is_gated(r.op) != e.has_gate) {
        throw Error("internal: " + op_name(r.op) + (e.has_gate ? " with" : " without") + " a gate tensor");
    }
}

// gate and up (with their biases) for one expert.
void gate_up(const ExpertBytes & e, const std::vector<float> & x, const Q8Rounding & q8, Forward * f) {
    const auto row_bytes = [](int type, int64_t n) {
        return static_cast<size_t>(n / block_values(type) * block_bytes(type));
    };
    const auto act_u = quantize_activation(activation_type(e.up_type), x.data(), e.n_embd, q8);
    f->up.resize(static_cast<size_t>(e.n_ff));
    f->gate.assign(static_cast<size_t>(e.n_ff), 0.0);
    for (int64_t j = 0; j < e.n_ff; ++j) {
        f->up[j] = dot_row(e.up_type, e.up.data() + j * row_bytes(e.up_type, e.n_embd), act_u, e.n_embd) +
                   (e.up_b.empty() ? 0.0 : e.up_b[static_cast<size_t>(j)]);
    }
    if (!e.has_gate) {
        return;
    }
    const auto act_g = quantize_activation(activation_type(e.gate_type), x.data(), e.n_embd, q8);
    for (int64_t j = 0; j < e.n_ff; ++j) {
        f->gate[j] = dot_row(e.gate_type, e.gate.data() + j * row_bytes(e.gate_type, e.n_embd), act_g, e.n_embd) +
                     (e.gate_b.empty() ? 0.0 : e.gate_b[static_cast<size_t>(j)]);
    }
}

// The down projection of h (with its bias), and what the one-flip judgement needs.
void down(const ExpertBytes & e, const Q8Rounding & q8, Forward * f) {
    std::vector<float> hf(f->h.begin(), f->h.end());  // ggml hands the down matmul float h
    const int act_d = activation_type(e.down_type);
    const auto act_h = quantize_activation(act_d, hf.data(), e.n_ff, q8);
    f->h_step = max_step(act_d, hf);
    f->n_embd = e.n_embd;
    f->n_ff = e.n_ff;
    f->h_steps.resize(static_cast<size_t>(e.n_ff));
    const int64_t block = act_d == Q8_K ? 256 : act_d == Q8_0 || act_d == Q8_1 ? 32 : 1;
    for (int64_t b = 0; b < e.n_ff; b += block) {
        const std::vector<float> part(hf.begin() + b, hf.begin() + std::min(e.n_ff, b + block));
        const double step = max_step(act_d, part);
        for (int64_t j = b; j < std::min(e.n_ff, b + block); ++j) {
            f->h_steps[static_cast<size_t>(j)] = step;
        }
    }
    const size_t row_bytes = static_cast<size_t>(e.n_ff / block_values(e.down_type) * block_bytes(e.down_type));
    f->down_w.resize(static_cast<size_t>(e.n_embd * e.n_ff));
    f->down.resize(static_cast<size_t>(e.n_embd));
    std::vector<float> row(static_cast<size_t>(e.n_ff));
    for (int64_t i = 0; i < e.n_embd; ++i) {
        const uint8_t * r = e.down.data() + i * row_bytes;
        f->down[i] =
            dot_row(e.down_type, r, act_h, e.n_ff) + (e.down_b.empty() ? 0.0 : e.down_b[static_cast<size_t>(i)]);
        dequantize(e.down_type, r, row.data(), e.n_ff);
        std::copy(row.begin(), row.end(), f->down_w.begin() + i * e.n_ff);
        for (float w : row) {
            f->down_absmax = std::max(f->down_absmax, std::fabs(static_cast<double>(w)));
        }
    }
}

// Architectures whose experts are not SiLU-gated, from the pinned llama.cpp's build_moe_ffn
// calls (src/models/*.cpp); every other architecture passes LLM_FFN_SILU.
struct ArchOp {
    const char * arch;
    FfnOp gated, ungated;
    const char * unsupported;
};
const ArchOp kArchOps[] = {
    {"gpt-oss", FfnOp::SwiGLUOai, FfnOp::SwiGLUOai, nullptr},
    {"minimax-m3", FfnOp::SwiGLUOai, FfnOp::SwiGLUOai, nullptr},
    {"grok", FfnOp::GeGLU, FfnOp::GELU, nullptr},
    {"gemma4", FfnOp::GeGLU, FfnOp::GELU, nullptr},
    {"bert", FfnOp::GeGLU, FfnOp::GELU, nullptr},
    {"nomic-bert-moe", FfnOp::GeGLU, FfnOp::GELU, nullptr},
    {"jina-bert-v3", FfnOp::GeGLU, FfnOp::GELU, nullptr},
    {"smallthinker", FfnOp::ReGLU, FfnOp::ReLU, nullptr},
    {"nemotron_h", FfnOp::ReLUSqr, FfnOp::ReLUSqr, "gated squared ReLU (llama.cpp aborts on it)"},
    {"nemotron_h_moe", FfnOp::ReLUSqr, FfnOp::ReLUSqr, "gated squared ReLU (llama.cpp aborts on it)"},
    {"kimi-k3", FfnOp::SwiGLU, FfnOp::SwiGLU, "the SiTU activation"},
};

}  // namespace

bool is_gated(FfnOp op) {
    return op == FfnOp::SwiGLU || op == FfnOp::SwiGLUOai || op == FfnOp::GeGLU || op == FfnOp::ReGLU;
}

std::string op_name(FfnOp op) {
    switch (op) {
        case FfnOp::SwiGLU: return "swiglu";
        case FfnOp::SwiGLUOai: return "swiglu_oai";
        case FfnOp::GeGLU: return "geglu";
        case FfnOp::ReGLU: return "reglu";
        case FfnOp::SiLU: return "silu";
        case FfnOp::GELU: return "gelu";
        case FfnOp::ReLU: return "relu";
        case FfnOp::ReLUSqr: return "relu_sqr";
    }
    return "?";
}

std::string ExpertRecipe::describe() const {
    std::string s = op_name(op);
    if (op == FfnOp::SwiGLUOai) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "(alpha %g, limit %g)", static_cast<double>(alpha), static_cast<double>(limit));
        s += buf;
    }
    return weight_before_ffn ? s + ", weight before the FFN" : s;
}

std::string ExpertBytes::types() const {
    const std::string d = type_name(down_type);
    if (fused_gate_up) {
        return "gate_up " + type_name(up_type) + "/" + d;
    }
    return (has_gate ? type_name(gate_type) : std::string("-")) + "/" + type_name(up_type) + "/" + d;
}

ExpertRecipe recipe_from_file(const GgufFile & file, int layer) {
    ExpertRecipe r;
    const std::string arch = file.architecture();
    const std::string blk = "blk." + std::to_string(layer) + ".";
    const bool gated =
        file.find_tensor(blk + "ffn_gate_exps.weight") || file.find_tensor(blk + "ffn_gate_up_exps.weight");
    r.op = gated ? FfnOp::SwiGLU : FfnOp::SiLU;
    for (const auto & a : kArchOps) {
        if (arch == a.arch) {
            r.op = gated ? a.gated : a.ungated;
            if (a.unsupported) {
                r.unsupported = std::string(a.unsupported) + " of " + arch;
            }
        }
    }
    if (r.op == FfnOp::SwiGLUOai) {
        r.alpha = 1.702f;  // constants of build_moe_ffn's LLM_FFN_SWIGLU_OAI_MOE
        r.limit = 7.0f;
    }
    r.weight_before_ffn = arch == "llama4";
    if (file.has_key(arch + ".swiglu_clamp_exp")) {
        r.unsupported = "the clamped SwiGLU (" + arch + ".swiglu_clamp_exp)";
    }
    for (const char * kind : {"gate", "up", "down"}) {
        if (file.find_tensor(blk + "ffn_" + kind + "_exps.scale")) {
            r.unsupported = std::string("per-expert scales (ffn_") + kind + "_exps.scale)";
        }
    }
    return r;
}

ExpertBytes read_expert(const GgufFile & file, int layer, int expert) {
    ExpertBytes e;
    const std::string blk = "blk." + std::to_string(layer) + ".ffn_";
    const TensorInfo * fused = file.find_tensor(blk + "gate_up_exps.weight");
    const TensorInfo * gate = file.find_tensor(blk + "gate_exps.weight");
    const TensorInfo * up = fused ? fused : file.find_tensor(blk + "up_exps.weight");
    const TensorInfo * dn = file.find_tensor(blk + "down_exps.weight");
    if (!up || !dn) {
        throw Error("layer " + std::to_string(layer) + " has no up/gate_up and down expert tensors");
    }
    e.fused_gate_up = fused != nullptr;
    e.has_gate = fused || gate;
    e.n_embd = up->ne[0];
    e.n_ff = up->ne[1];
    e.up_type = e.gate_type = up->type;
    e.down_type = dn->type;
    e.up = read_slice(file, *up, expert);
    e.down = read_slice(file, *dn, expert);
    if (gate && !fused) {
        e.gate_type = gate->type;
        e.gate = read_slice(file, *gate, expert);
        e.gate_b = read_bias(file, blk + "gate_exps.bias", expert);
    }
    e.down_b = read_bias(file, blk + "down_exps.bias", expert);
    if (fused) {
        split_fused(&e, read_bias(file, blk + "gate_up_exps.bias", expert));
    } else {
        e.up_b = read_bias(file, blk + "up_exps.bias", expert);
    }
    e.unsupported = unsupported_types(e);
    return e;
}

double activation(const ExpertRecipe & r, double g, double u) {
    switch (r.op) {
        case FfnOp::SwiGLU: return silu(g) * u;
        case FfnOp::SwiGLUOai: {
            // ggml_compute_forward_swiglu_oai_f32: x = min(gate, limit), y = clamp(up, +-limit),
            // x * sigmoid(alpha x) * (y + 1).
            const double lim = r.limit, x = std::min(g, lim), y = std::clamp(u, -lim, lim);
            return x / (1.0 + std::exp(-static_cast<double>(r.alpha) * x)) * (y + 1.0);
        }
        case FfnOp::GeGLU: return gelu_fp16_table(g) * u;
        case FfnOp::ReGLU: return g > 0.0 ? g * u : 0.0;
        case FfnOp::SiLU: return silu(u);
        case FfnOp::GELU: return gelu_fp16_table(u);
        case FfnOp::ReLU: return std::max(u, 0.0);
        case FfnOp::ReLUSqr: return std::max(u, 0.0) * std::max(u, 0.0);
    }
    return NAN;
}

Forward forward(const ExpertBytes & e, const ExpertRecipe & r, const std::vector<float> & x, const Q8Rounding & q8) {
    check_shapes(e, r);
    Forward f;
    gate_up(e, x, q8, &f);
    f.h.resize(static_cast<size_t>(e.n_ff));
    for (int64_t j = 0; j < e.n_ff; ++j) {
        // ggml stores gate and up as float before the activation reads them.
        f.h[j] = activation(r, static_cast<float>(f.gate[j]), static_cast<float>(f.up[j]));
    }
    down(e, q8, &f);
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
