// epq verify: the independent reference agrees with ggml's formats, every check passes on
// each architecture, and every check fails when a fault is planted in the paging path.
#include "test_util.h"

#include "verify/ref_quant.h"

#include "ggml.h"

#include <cmath>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <random>

using namespace epq;
using namespace epq::test;

// ggml's scalar reference quantizers (ggml-quants.h is internal; these are exported C symbols).
extern "C" {
void quantize_row_q8_0_ref(const float * x, void * y, int64_t k);
void quantize_row_q8_K_ref(const float * x, void * y, int64_t k);
}

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
                                           GGML_TYPE_MXFP4, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_F32));

TEST(RefFormat, ActivationQuantizationMatchesGgmlReference) {
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    std::vector<float> x(1024);
    for (auto & v : x) {
        v = dist(rng);
    }
    for (ggml_type t : {GGML_TYPE_Q8_0, GGML_TYPE_Q8_K}) {
        std::vector<uint8_t> q(ggml_row_size(t, 1024));
        (t == GGML_TYPE_Q8_0 ? quantize_row_q8_0_ref : quantize_row_q8_K_ref)(x.data(), q.data(), 1024);
        std::vector<float> g(1024);
        if (t == GGML_TYPE_Q8_K) {
            // Q8_K has no public dequantizer: decode d (float) and qs (int8) per 256 block.
            for (int b = 0; b < 4; ++b) {
                float d;
                std::memcpy(&d, q.data() + b * 292, 4);
                for (int j = 0; j < 256; ++j) {
                    g[b * 256 + j] = d * static_cast<int8_t>(q[b * 292 + 4 + j]);
                }
            }
        } else {
            ggml_get_type_traits(t)->to_float(q.data(), g.data(), 1024);
        }
        const auto r = ref::quantize_activation(t == GGML_TYPE_Q8_0 ? ref::Q8_0 : ref::Q8_K, x.data(), 1024);
        for (size_t i = 0; i < x.size(); ++i) {
            ASSERT_EQ(static_cast<float>(r[i]), g[i]) << ggml_type_name(t) << " value " << i;
        }
    }
}

class VerifyAll : public ::testing::TestWithParam<std::string> {};

TEST_P(VerifyAll, PassesOnEveryArchitecture) {
    const std::string model = synth_model("tiny-" + GetParam(), tiny(GetParam()));
    const std::string dir = temp_dir() + "/verify-" + GetParam();
    const CommandResult r = run_epq({"verify", "all", "-m", model, "--fast", "--report-dir", dir, "-n", "32"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto bytes = read_file(dir + "/all.json");
    const auto summary = nlohmann::json::parse(std::string(bytes.begin(), bytes.end()));
    ASSERT_EQ(summary["checks"].size(), 5u);
    for (const auto & c : summary["checks"]) {
        EXPECT_TRUE(c["pass"].get<bool>()) << c.dump();
    }
    const auto mt = read_file(dir + "/multitoken.md");
    EXPECT_NE(std::string(mt.begin(), mt.end()).find("Aggregate output max abs: 0.0"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Verify, VerifyAll, ::testing::Values("qwen35moe", "qwen3moe", "olmoe"));

class VerifyFault : public ::testing::TestWithParam<std::string> {};

TEST_P(VerifyFault, EveryCheckFailsWithAPlantedFault) {
    const std::string model = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    for (const std::string check : {"kernel", "layer", "multitoken", "generate", "determinism"}) {
        const std::string dir = temp_dir() + "/fault-" + GetParam() + "-" + check;
        setenv("EPQ_FAULT", GetParam().c_str(), 1);
        setenv("EPQ_FAULT_AFTER", "1", 1);
        const CommandResult r = run_epq({"verify", check, "-m", model, "--fast", "--report-dir", dir, "-n", "16"});
        unsetenv("EPQ_FAULT");
        unsetenv("EPQ_FAULT_AFTER");
        EXPECT_EQ(r.exit_code, 1) << GetParam() << " not caught by " << check << ":\n" << r.out << r.err;
        EXPECT_NE(r.out.find("**Verdict:** FAIL"), std::string::npos) << check << ":\n" << r.out << r.err;
    }
}

INSTANTIATE_TEST_SUITE_P(Verify, VerifyFault, ::testing::Values("corrupt-slot", "wrong-slot"));
