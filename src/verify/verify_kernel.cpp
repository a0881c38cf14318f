#include "backend/pager.h"
#include "engine/paged_model.h"
#include "util/error.h"
#include "util/rng.h"
#include "verify/expert_forward.h"
#include "verify/moe_capture.h"
#include "verify/ref_moe.h"
#include "verify/ref_quant.h"
#include "verify/verify.h"

#include "ggml.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

namespace epq {

namespace {

double max_diff(const std::vector<float> & a, const std::vector<double> & b) {
    double m = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
        m = std::isnan(d) ? INFINITY : std::max(m, d);
    }
    return m;
}

double absmax(const std::vector<double> & v) {
    double m = 0.0;
    for (double x : v) {
        m = std::max(m, std::fabs(x));
    }
    return m;
}

// The reference dequantization against ggml's own, every row of one matrix: max |diff|.
double dequant_vs_ggml(int type, const std::vector<uint8_t> & bytes, int64_t n_in) {
    const auto * traits = ggml_get_type_traits(static_cast<ggml_type>(type));
    const size_t row = ggml_row_size(static_cast<ggml_type>(type), n_in);
    std::vector<float> a(static_cast<size_t>(n_in)), b(static_cast<size_t>(n_in));
    double m = 0.0;
    for (size_t off = 0; off + row <= bytes.size(); off += row) {
        ref::dequantize(type, bytes.data() + off, a.data(), n_in);
        if (type == GGML_TYPE_F32) {
            std::memcpy(b.data(), bytes.data() + off, row);
        } else {
            traits->to_float(bytes.data() + off, b.data(), n_in);
        }
        for (int64_t i = 0; i < n_in; ++i) {
            const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
            m = std::isnan(d) ? INFINITY : std::max(m, d);
        }
    }
    return m;
}

std::vector<std::pair<int, int>> kernel_pairs(const VerifyOptions & o, const ExpertIndex & idx) {
    std::vector<std::pair<int, int>> pairs;
    for (const auto & p : o.pairs) {
        const auto colon = p.find(':');
        if (colon == std::string::npos) {
            throw Error("--pair expects LAYER:EXPERT, got '" + p + "'");
        }
        pairs.emplace_back(std::stoi(p.substr(0, colon)), std::stoi(p.substr(colon + 1)));
    }
    if (pairs.empty()) {
        // The first and last layer of every size class (so every slot size and every expert
        // type is exercised), with experts spread over the range.
        int k = 0;
        for (const auto & c : idx.size_classes) {
            std::set<int> layers = {c.layers.front(), c.layers.back()};
            for (int l : layers) {
                pairs.emplace_back(l, static_cast<int>((3 + 37 * k++) % idx.n_expert));
            }
        }
    }
    return pairs;
}

// The nodes the arena side builds for this layer: the recipe's activation and the biases.
ExpertForwardSpec arena_spec(const ref::ExpertRecipe & r, const ref::ExpertBytes & b) {
    using A = ExpertActivation;
    ExpertForwardSpec s;
    switch (r.op) {
        case ref::FfnOp::SwiGLU: s.act = A::swiglu; break;
        case ref::FfnOp::SwiGLUOai: s.act = A::swiglu_oai; break;
        case ref::FfnOp::GeGLU: s.act = A::geglu; break;
        case ref::FfnOp::ReGLU: s.act = A::reglu; break;
        case ref::FfnOp::SiLU: s.act = A::silu; break;
        case ref::FfnOp::GELU: s.act = A::gelu; break;
        case ref::FfnOp::ReLU: s.act = A::relu; break;
        case ref::FfnOp::ReLUSqr: s.act = A::relu_sqr; break;
    }
    s.alpha = r.alpha;
    s.limit = r.limit;
    s.weight_before_ffn = r.weight_before_ffn;
    s.gate_b = b.gate_b;
    s.up_b = b.up_b;
    s.down_b = b.down_b;
    return s;
}

struct KernelCase {
    Status status = Status::Fail;
    std::string row;  // Markdown table row
    nlohmann::json json;
    std::string reason;  // NOT CHECKED: why
};

KernelCase not_checked(int layer, int expert, const std::string & types, uint64_t slot_bytes,
                       const std::string & reason) {
    KernelCase c;
    c.status = Status::NotChecked;
    c.reason = reason;
    c.row = "| " + std::to_string(layer) + " | " + std::to_string(expert) + " | " + types + " | " +
            std::to_string(slot_bytes) + " | - | - | - | - | - | - | NOT CHECKED (" + reason + ") |\n";
    c.json = {{"layer", layer}, {"expert", expert}, {"types", types}, {"verdict", "NOT CHECKED"}, {"reason", reason}};
    return c;
}

// Two-stage judgement of the expert's output, as in the seed: the fixed tolerance first;
// failing that, a difference that is exactly one Q8 rounding flip of h is labelled as such.
std::string judge_output(const std::vector<float> & got, const std::vector<double> & want, const ref::Forward & ref,
                         double weight, double tol) {
    if (max_diff(got, want) <= tol) {
        return "PASS";
    }
    std::vector<double> diff(want.size());
    for (size_t i = 0; i < diff.size(); ++i) {
        diff[i] = static_cast<double>(got[i]) - want[i];
    }
    const bool flip = max_diff(got, want) <= ref::one_flip_bound(ref, weight) &&
                      ref::explained_by_one_flip({&ref}, {weight}, diff, tol);
    return flip ? "PASS (quantization-boundary)" : "FAIL";
}

struct KernelInput {
    std::vector<float> x;
    int n_threads = 1;
    float weight = 0.37f;
    ref::Q8Rounding q8;
};

KernelCase check_pair(const GgufFile & file, const ExpertIndex & idx, Pager & pager, const KernelInput & in, int layer,
                      int expert) {
    const ExpertLayer * el = idx.layer(layer);
    if (!el || expert < 0 || static_cast<uint32_t>(expert) >= idx.n_expert) {
        throw Error("no expert " + std::to_string(expert) + " in layer " + std::to_string(layer));
    }
    const ref::ExpertBytes bytes = ref::read_expert(file, layer, expert);
    const ref::ExpertRecipe recipe = ref::recipe_from_file(file, layer);
    const std::string types = bytes.types();
    for (const std::string & why : {bytes.unsupported, recipe.unsupported}) {
        if (!why.empty()) {
            return not_checked(layer, expert, types, el->slot_bytes, why);
        }
    }
    const double dq = std::max({dequant_vs_ggml(bytes.gate_type, bytes.gate, bytes.n_embd),
                                dequant_vs_ggml(bytes.up_type, bytes.up, bytes.n_embd),
                                dequant_vs_ggml(bytes.down_type, bytes.down, bytes.n_ff)});
    const ExpertForward arena =
        expert_forward(pager.hold_expert(layer, expert), in.x, in.weight, arena_spec(recipe, bytes), in.n_threads);
    // With the weight before the FFN (llama4) the expert sees x scaled by it, a float product.
    std::vector<float> x = in.x;
    for (float & v : x) {
        v = recipe.weight_before_ffn ? v * in.weight : v;
    }
    const ref::Forward ref = ref::forward(bytes, recipe, x, in.q8);
    std::vector<double> ref_out(ref.down.size());
    for (size_t i = 0; i < ref_out.size(); ++i) {
        ref_out[i] = ref.down[i] * (recipe.weight_before_ffn ? 1.0 : in.weight);
    }
    // gate and up see the activation quantized exactly as the backend does, so they differ only
    // by float accumulation order: one stage, the fixed tolerance, no rounding flip to explain.
    const double d_gate = std::max(max_diff(arena.gate, ref.gate), max_diff(arena.up, ref.up));
    const double gate_tol = 1e-4 * std::max(absmax(ref.gate), absmax(ref.up)) + 1e-7;
    const double d_out = max_diff(arena.out, ref_out);
    const double tol = 1e-4 * absmax(ref_out) + 1e-7;
    const double w_out = recipe.weight_before_ffn ? 1.0 : in.weight;  // the weight on the output
    const double bound = ref::one_flip_bound(ref, w_out);
    std::string verdict = judge_output(arena.out, ref_out, ref, static_cast<float>(w_out), tol);
    if (d_gate > gate_tol) {
        verdict = "FAIL (gate/up differ)";
    }
    if (dq != 0.0) {
        verdict = "FAIL (reference dequantization differs from ggml)";
    }
    KernelCase c;
    c.status = verdict.rfind("PASS", 0) == 0 ? Status::Pass : Status::Fail;
    char line[640];
    std::snprintf(line, sizeof line, "| %d | %d | %s | %llu | %s | %s | %s | %s | %s | %s | %s |\n", layer, expert,
                  types.c_str(), static_cast<unsigned long long>(el->slot_bytes), fmt_float(dq).c_str(),
                  fmt_float(d_gate).c_str(), fmt_float(gate_tol).c_str(), fmt_float(d_out).c_str(),
                  fmt_float(tol).c_str(), fmt_float(bound).c_str(), verdict.c_str());
    c.row = line;
    c.json = {{"layer", layer},
              {"expert", expert},
              {"types", types},
              {"slot_bytes", el->slot_bytes},
              {"dequant_max_diff_vs_ggml", dq},
              {"gate_up_max_abs", d_gate},
              {"gate_up_tolerance", gate_tol},
              {"output_max_abs", d_out},
              {"tolerance", tol},
              {"one_flip_bound", bound},
              {"verdict", verdict}};
    return c;
}

std::string kernel_summary(Status status, int passed, int failed, const std::vector<std::string> & reasons,
                           size_t n_classes) {
    std::string s = status_label(status) + ": " + std::to_string(passed + failed) + " (layer, expert) pairs judged";
    if (failed > 0) {
        s += ", " + std::to_string(failed) + " failed";
    }
    s += ", over " + std::to_string(n_classes) + " slot sizes";
    if (!reasons.empty()) {
        const std::set<std::string> distinct(reasons.begin(), reasons.end());
        s += "; " + std::to_string(reasons.size()) + " NOT CHECKED (" + *distinct.begin() +
             (distinct.size() > 1 ? ", ..." : "") + ")";
    }
    return s;
}

}  // namespace

CheckReport verify_kernel(const VerifyOptions & o) {
    const GgufFile file = GgufFile::open(o.model);
    file.require_tensor_data();
    const ExpertIndex idx = ExpertIndex::build(file);
    PagerOptions po;
    po.arena_bytes = idx.min_arena_bytes * 2;
    po.repack = o.repack;
    Pager pager(o.model, idx, po);
    pager.set_n_threads(o.n_threads);

    KernelInput in;
    in.n_threads = o.n_threads;
    Rng rng(1234);
    in.x.resize(static_cast<size_t>(idx.layers.front().tensors.front().ne[0]));
    for (auto & v : in.x) {
        v = static_cast<float>(rng.normal());
    }
    in.q8 = cpu_q8_rounding();

    std::ostringstream rows;
    nlohmann::json jcases = nlohmann::json::array();
    // No pair at all is a failure: nothing was shown to be right.
    Status status = Status::Fail;
    int passed = 0, failed = 0;
    std::vector<std::string> reasons;
    for (const auto & [layer, expert] : kernel_pairs(o, idx)) {
        const KernelCase c = check_pair(file, idx, pager, in, layer, expert);
        status = passed + failed + static_cast<int>(reasons.size()) == 0 ? c.status : combine(status, c.status);
        passed += c.status == Status::Pass;
        failed += c.status == Status::Fail;
        if (c.status == Status::NotChecked) {
            reasons.push_back(c.reason);
        }
        rows << c.row;
        jcases.push_back(c.json);
    }
    CheckReport r;
    r.check = "kernel";
    r.status = status;
    std::ostringstream md;
    md << "# Kernel: one expert through the arena vs the scalar reference\n\n**Verdict:** " << status_label(status)
       << "  \n**Model:** `" << o.model << "`\n\n"
       << "Each row: the expert's bytes are made resident in an arena slot and run through ggml's CPU kernels "
          "(activation quantized to the weight type's dot-product format, gate and up MUL_MAT_ID or one fused "
          "gate_up, their biases, the layer's activation as llama.cpp builds it, down MUL_MAT_ID and its bias, "
          "routing weight "
       << in.weight
       << "). The reference reads the same expert from the file, dequantizes each block from its format "
          "definition, quantizes the activations as this build's CPU backend does (Q8 scale "
       << (in.q8.scale_127_over_amax ? "127/amax" : "1/d") << ", ties rounded "
       << (in.q8.half_to_even ? "to even" : "away from zero")
       << ") and accumulates in double. The reference dequantization is also compared with ggml's, row by row "
          "(limit 0). gate/up are judged against their tolerance (1e-4 of their magnitude); the output in two "
          "stages (the tolerance, else exactly one Q8 rounding flip of h). A type or expert layout the reference "
          "or the arena-side forward does not cover is NOT CHECKED, with the reason.\n\n"
       << "| Layer | Expert | gate/up/down | Slot bytes | Dequant max diff vs ggml | gate/up max abs | gate/up "
          "tolerance | Output max abs | Tolerance | 1-flip bound | Verdict "
          "|\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n"
       << rows.str();
    r.markdown = md.str();
    r.summary = kernel_summary(status, passed, failed, reasons, idx.size_classes.size());
    r.json = {{"cases", jcases}, {"model", o.model}};
    return r;
}

}  // namespace epq
