// epq verify: the independent reference agrees with ggml's formats, every check passes on
// each architecture, and every check fails when a fault is planted in the paging path.
#include "test_util.h"

#include "verify/moe_capture.h"
#include "verify/ref_moe.h"
#include "verify/ref_quant.h"

#include "ggml-cpu.h"
#include "ggml.h"

#include <cmath>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>

using namespace epq;
using namespace epq::test;

class RefFormat : public ::testing::TestWithParam<int> {};

TEST_P(RefFormat, DequantizationMatchesGgmlExactly) {
    const auto type = static_cast<ggml_type>(GetParam());
    const int64_t n_per_row = 512, rows = 64;
    std::mt19937 rng(GetParam());
    std::normal_distribution<float> dist(0.0f, 0.7f);
    std::vector<float> x(static_cast<size_t>(n_per_row * rows));
    for (auto & v : x) {
        v = dist(rng);
    }
    std::vector<uint8_t> q(ggml_row_size(type, n_per_row) * rows);
    std::vector<float> imatrix(static_cast<size_t>(n_per_row), 1.0f);
    if (type == GGML_TYPE_F32) {
        std::memcpy(q.data(), x.data(), q.size());
    } else {
        ggml_quantize_chunk(type, x.data(), q.data(), 0, rows, n_per_row,
                            ggml_quantize_requires_imatrix(type) ? imatrix.data() : nullptr);
    }
    std::vector<float> a(x.size()), b(x.size());
    ref::dequantize(GetParam(), q.data(), a.data(), static_cast<int64_t>(x.size()));
    if (type == GGML_TYPE_F32) {
        b = x;
    } else {
        ggml_get_type_traits(type)->to_float(q.data(), b.data(), static_cast<int64_t>(x.size()));
    }
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i], b[i]) << ggml_type_name(type) << " value " << i;
    }
    // And the reference is not trivially equal to the input: it really decoded the blocks.
    EXPECT_EQ(ref::block_bytes(GetParam()) * (static_cast<int64_t>(x.size()) / ref::block_values(GetParam())),
              static_cast<int64_t>(q.size()));
}

INSTANTIATE_TEST_SUITE_P(Verify, RefFormat,
                         ::testing::Values(GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                           GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K,
                                           GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
                                           GGML_TYPE_MXFP4, GGML_TYPE_TQ1_0, GGML_TYPE_TQ2_0, GGML_TYPE_F16,
                                           GGML_TYPE_BF16, GGML_TYPE_F32));

// The weight type's activation format is the one ggml's CPU dot product asks for.
TEST_P(RefFormat, ActivationFormatIsTheBackendsVecDotType) {
    const auto type = static_cast<ggml_type>(GetParam());
    EXPECT_EQ(ref::activation_type(GetParam()), static_cast<int>(ggml_get_type_traits_cpu(type)->vec_dot_type))
        << ggml_type_name(type);
}

namespace {

// Activations at several magnitudes, with rounding ties: a block whose largest value is 127
// has the multiplier 1 in every definition, so its .5 values are ties (round half to even and
// half away from zero disagree on them).
std::vector<float> activation_inputs() {
    std::mt19937 rng(5);
    std::vector<float> x;
    for (float scale : {1e-4f, 0.05f, 1.0f, 3.0f, 250.0f, 1e4f}) {
        std::normal_distribution<float> dist(0.0f, scale);
        for (int i = 0; i < 1024; ++i) {
            x.push_back(dist(rng));
        }
    }
    for (int i = 0; i < 256; ++i) {
        x.push_back(i % 32 == 0 ? 127.0f : static_cast<float>(i % 7) - 3.5f);  // ties
    }
    x.insert(x.end(), 256, 0.0f);    // an all-zero block
    for (int i = 0; i < 256; ++i) {  // widely spread magnitudes within one block
        x.push_back(std::ldexp(static_cast<float>(i % 5) - 2.25f, i % 20 - 10));
    }
    return x;
}

// Values of activation bytes. Q8_1 and Q8_K have no ggml dequantizer: d (fp16 or float) times
// the int8 codes that follow it (Q8_1: after d and s).
std::vector<float> decode_activation(ggml_type t, const std::vector<uint8_t> & q, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    if (t == GGML_TYPE_F32) {
        std::memcpy(out.data(), q.data(), q.size());
        return out;
    }
    if (t != GGML_TYPE_Q8_1 && t != GGML_TYPE_Q8_K) {
        ggml_get_type_traits(t)->to_float(q.data(), out.data(), n);
        return out;
    }
    const int64_t block = t == GGML_TYPE_Q8_1 ? 32 : 256;
    const size_t bytes = ggml_type_size(t), codes = 4;  // Q8_1: fp16 d and s; Q8_K: float d
    for (int64_t b = 0; b < n / block; ++b) {
        const uint8_t * p = q.data() + static_cast<size_t>(b) * bytes;
        float d = 0.0f;
        if (t == GGML_TYPE_Q8_1) {
            ggml_fp16_t h;
            std::memcpy(&h, p, 2);
            d = ggml_fp16_to_fp32(h);
        } else {
            std::memcpy(&d, p, 4);
        }
        for (int64_t j = 0; j < block; ++j) {
            out[static_cast<size_t>(b * block + j)] = d * static_cast<float>(static_cast<int8_t>(p[codes + j]));
        }
    }
    return out;
}

}  // namespace

// The reference activation quantizers reproduce the CPU backend's own (what MUL_MAT(_ID) runs
// before its dot products) byte for byte: codes, scales, Q8_1 sums and Q8_K group sums.
TEST(RefFormat, ActivationQuantizationMatchesTheCpuBackend) {
    ggml_cpu_init();
    const std::vector<float> x = activation_inputs();
    const auto n = static_cast<int64_t>(x.size());
    for (ggml_type t : {GGML_TYPE_Q8_0, GGML_TYPE_Q8_1, GGML_TYPE_Q8_K, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_F32}) {
        std::vector<uint8_t> backend(ggml_row_size(t, n), 0);  // zeroed: Q8_K leaves a zero block's sums unwritten
        ggml_get_type_traits_cpu(t)->from_float(x.data(), backend.data(), n);
        const ref::QuantizedActivation r = ref::quantize_activation(t, x.data(), n, cpu_q8_rounding());
        ASSERT_EQ(r.bytes.size(), backend.size()) << ggml_type_name(t);
        for (size_t i = 0; i < backend.size(); ++i) {
            ASSERT_EQ(r.bytes[i], backend[i]) << ggml_type_name(t) << " byte " << i;
        }
        // And the values the reference multiplies with are the ones those bytes encode.
        const std::vector<float> decoded = decode_activation(t, backend, n);
        for (size_t i = 0; i < x.size(); ++i) {
            ASSERT_EQ(static_cast<float>(r.values[i]), decoded[i]) << ggml_type_name(t) << " value " << i;
        }
    }
}

// The two definitions really differ on these inputs, so the test above can tell them apart.
TEST(RefFormat, Q8RoundingDefinitionsDiffer) {
    const std::vector<float> x = activation_inputs();
    const auto n = static_cast<int64_t>(x.size());
    ref::Q8Rounding scalar, simd;
    simd.scale_127_over_amax = simd.half_to_even = true;
    for (int t : {ref::Q8_0, ref::Q8_1}) {
        EXPECT_NE(ref::quantize_activation(t, x.data(), n, scalar).bytes,
                  ref::quantize_activation(t, x.data(), n, simd).bytes);
    }
}

namespace {

// ggml's CPU result of one activation op on gate/up rows.
std::vector<float> ggml_activation(const ref::ExpertRecipe & r, const std::vector<float> & g,
                                   const std::vector<float> & u) {
    const size_t mem = 8 * ggml_tensor_overhead() + ggml_graph_overhead() + 4 * g.size() * 4 + 1024;
    ggml_init_params ip{mem, nullptr, false};
    ggml_context * ctx = ggml_init(ip);
    const auto n = static_cast<int64_t>(g.size());
    ggml_tensor * gt = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_tensor * ut = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    std::memcpy(gt->data, g.data(), g.size() * 4);
    std::memcpy(ut->data, u.data(), u.size() * 4);
    ggml_tensor * h = nullptr;
    switch (r.op) {  // as build_moe_ffn builds them
        case ref::FfnOp::SwiGLU: h = ggml_swiglu_split(ctx, gt, ut); break;
        case ref::FfnOp::SwiGLUOai: h = ggml_swiglu_oai(ctx, gt, ut, r.alpha, r.limit); break;
        case ref::FfnOp::GeGLU: h = ggml_geglu_split(ctx, gt, ut); break;
        case ref::FfnOp::ReGLU: h = ggml_reglu_split(ctx, gt, ut); break;
        case ref::FfnOp::SiLU: h = ggml_silu(ctx, ut); break;
        case ref::FfnOp::GELU: h = ggml_gelu(ctx, ut); break;
        case ref::FfnOp::ReLU: h = ggml_relu(ctx, ut); break;
        case ref::FfnOp::ReLUSqr: h = ggml_sqr(ctx, ggml_relu(ctx, ut)); break;
    }
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, h);
    ggml_graph_compute_with_ctx(ctx, gf, 1);
    std::vector<float> out(g.size());
    std::memcpy(out.data(), h->data, out.size() * 4);
    ggml_free(ctx);
    return out;
}

}  // namespace

class RefActivation : public ::testing::TestWithParam<ref::FfnOp> {};

// Every activation build_moe_ffn puts between expert matmuls, reference (double) vs ggml-cpu.
TEST_P(RefActivation, MatchesGgml) {
    ggml_cpu_init();
    ref::ExpertRecipe r;
    r.op = GetParam();
    r.alpha = 1.702f;
    r.limit = 7.0f;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-12.0f, 12.0f);  // past the clamp and the GELU table's range
    std::vector<float> g(4096), u(4096);
    for (size_t i = 0; i < g.size(); ++i) {
        g[i] = dist(rng);
        u[i] = dist(rng);
    }
    const std::vector<float> got = ggml_activation(r, g, u);
    const bool fp16_table = r.op == ref::FfnOp::GeGLU || r.op == ref::FfnOp::GELU;
    for (size_t i = 0; i < g.size(); ++i) {
        const double want = ref::activation(r, g[i], u[i]);
        // float vs double arithmetic; the GELU table's entries are fp16 (one ulp: 2^-10 relative).
        const double scale = fp16_table && ref::is_gated(r.op) ? std::fabs(u[i]) : 1.0;
        const double tol = (fp16_table ? std::ldexp(1.0, -10) : 1e-5) * (std::fabs(want) + scale) + 1e-6;
        ASSERT_NEAR(got[i], want, tol) << ref::op_name(r.op) << " gate " << g[i] << " up " << u[i];
    }
}

INSTANTIATE_TEST_SUITE_P(Verify, RefActivation,
                         ::testing::Values(ref::FfnOp::SwiGLU, ref::FfnOp::SwiGLUOai, ref::FfnOp::GeGLU,
                                           ref::FfnOp::ReGLU, ref::FfnOp::SiLU, ref::FfnOp::GELU, ref::FfnOp::ReLU,
                                           ref::FfnOp::ReLUSqr),
                         [](const ::testing::TestParamInfo<ref::FfnOp> & p) { return ref::op_name(p.param); });

class VerifyAll : public ::testing::TestWithParam<std::string> {};

TEST_P(VerifyAll, PassesOnEveryArchitecture) {
    if (!sampled_under_sanitizer(GetParam(), {"qwen3moe"})) {
        GTEST_SKIP() << "sampled under the sanitizer: the regular build runs " << GetParam();
    }
    const std::string model = synth_model("tiny-" + GetParam(), tiny(GetParam()));
    const std::string dir = temp_dir() + "/verify-" + GetParam();
    // Stock's default layout (the presets' Q4_K and MXFP4 experts repacked) on every
    // architecture; -nr on one.
    std::vector<std::string> layouts = {""};
    if (GetParam() == "qwen3moe") {
        layouts.push_back("-nr");
    }
    for (const std::string & layout : layouts) {
        std::vector<std::string> args = {"verify",       "all",        "-m", model, "--fast",
                                         "--report-dir", dir + layout, "-n", "32"};
        if (!layout.empty()) {
            args.push_back(layout);
        }
        const CommandResult r = run_epq(args);
        EXPECT_EQ(r.exit_code, 0) << layout << r.out << r.err;
        const auto bytes = read_file(dir + layout + "/all.json");
        const auto summary = nlohmann::json::parse(std::string(bytes.begin(), bytes.end()));
        ASSERT_EQ(summary["checks"].size(), 5u);
        for (const auto & c : summary["checks"]) {
            EXPECT_TRUE(c["pass"].get<bool>()) << layout << c.dump();
        }
        const auto mt = read_file(dir + layout + "/multitoken.md");
        const std::string mts(mt.begin(), mt.end());
        EXPECT_NE(mts.find("Aggregate output max abs: 0.0"), std::string::npos);
        EXPECT_NE(mts.find(layout.empty() ? "weights repacked" : "no weight repacking (-nr)"), std::string::npos)
            << mts;
    }
}

INSTANTIATE_TEST_SUITE_P(Verify, VerifyAll, ::testing::Values("qwen35moe", "qwen3moe", "olmoe", "gpt-oss", "deepseek2"),
                         [](const auto & p) { return p.param == "gpt-oss" ? std::string("gpt_oss") : p.param; });

// gpt-oss experts (biases on gate, up and down; the clamped SwiGLU): the layer check recomputes
// them from the graph's own nodes, the kernel check runs them through an arena slot, and both
// agree with the scalar reference.
TEST(VerifyExperts, GptOssLayerAndKernelAreRecomputed) {
    const std::string model = synth_model("tiny-gpt-oss", tiny("gpt-oss", "mxfp4_moe"));
    const std::string dir = temp_dir() + "/verify-gpt-oss";
    const CommandResult layer = run_epq({"verify", "layer", "-m", model, "--fast", "--report-dir", dir});
    EXPECT_EQ(layer.exit_code, 0) << layer.out << layer.err;
    EXPECT_NE(layer.out.find("**Verdict:** PASS"), std::string::npos) << layer.out;
    EXPECT_NE(layer.out.find("swiglu_oai(alpha 1.702, limit 7)"), std::string::npos) << layer.out;
    // The kernel check runs the arena side with the same biases and clamped SwiGLU.
    const CommandResult kernel = run_epq({"verify", "kernel", "-m", model, "--report-dir", dir});
    EXPECT_EQ(kernel.exit_code, 0) << kernel.out << kernel.err;
    EXPECT_NE(kernel.out.find("**Verdict:** PASS"), std::string::npos) << kernel.out;
    EXPECT_EQ(kernel.out.find("NOT CHECKED ("), std::string::npos) << kernel.out;
}

// A weight format the reference cannot dequantize: kernel and layer are NOT CHECKED with the
// reason, `all` finishes, shows it and exits 0; the end-to-end checks still pass.
TEST(VerifyExperts, UnsupportedTypeIsNotCheckedNotFailed) {
    const std::string model = synth_model("tiny-qwen3moe-iq3_s", tiny("qwen3moe", "iq3_s"));
    const std::string dir = temp_dir() + "/verify-iq3_s";
    const CommandResult r = run_epq({"verify", "all", "-m", model, "--fast", "--report-dir", dir, "-n", "16"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto bytes = read_file(dir + "/all.json");
    const auto summary = nlohmann::json::parse(std::string(bytes.begin(), bytes.end()));
    ASSERT_EQ(summary["checks"].size(), 5u);
    for (const auto & c : summary["checks"]) {
        const std::string check = c["check"], status = c["status"];
        EXPECT_EQ(status, check == "kernel" || check == "layer" ? "NOT CHECKED" : "PASS") << c.dump();
        if (status == "NOT CHECKED") {
            EXPECT_NE(c["summary"].get<std::string>().find("no scalar reference for iq3_s"), std::string::npos)
                << c.dump();
        }
    }
    EXPECT_NE(r.out.find("**Verdict:** NOT CHECKED"), std::string::npos) << r.out;
}

class VerifyFault : public ::testing::TestWithParam<std::string> {};

TEST_P(VerifyFault, EveryCheckFailsWithAPlantedFault) {
    const std::string model = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    for (const std::string layout : {"", "-nr"}) {  // repacked experts and the file's layout
        // Under ASan each fault runs in one layout, the two faults between them in both.
        if (kSanitized && (layout == "-nr") != (GetParam() == "wrong-slot")) {
            continue;
        }
        for (const std::string check : {"kernel", "layer", "multitoken", "generate", "determinism"}) {
            const std::string dir = temp_dir() + "/fault-" + GetParam() + "-" + check + layout;
            std::vector<std::string> args = {"verify", check, "-m", model, "--fast", "--report-dir", dir, "-n", "16"};
            if (!layout.empty()) {
                args.push_back(layout);
            }
            const CommandResult r = run_epq_with_faults({"EPQ_FAULT=" + GetParam(), "EPQ_FAULT_AFTER=1"}, args);
            EXPECT_EQ(r.exit_code, 1) << GetParam() << layout << " not caught by " << check << ":\n" << r.out << r.err;
            EXPECT_NE(r.out.find("**Verdict:** FAIL"), std::string::npos) << check << layout << ":\n" << r.out << r.err;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Verify, VerifyFault, ::testing::Values("corrupt-slot", "wrong-slot"));
