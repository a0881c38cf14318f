// Synthetic models are real models to stock llama.cpp: every tiny preset of every architecture
// loads in libllama, in the file's layout and repacked, and gives finite, varied logits for real
// text. (Experts in every quantization llama-quantize writes: SynthExpertType in test_synth.cpp.)
#include "test_util.h"

#include "engine/llama_log.h"
#include "engine/llama_session.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace epq;
using namespace epq::test;

namespace {

const char * kText =
    "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times.";

void expect_finite_varied_logits(const std::string & path, bool repack = false) {
    set_llama_verbosity(false);
    SessionOptions so;
    so.n_ctx = 256;
    so.use_extra_bufts = repack;
    LlamaSession s(path, so);
    const auto tokens = s.tokenize(kText, true);
    ASSERT_GT(tokens.size(), 10u);
    ASSERT_LT(tokens.size(), 40u) << "a real BPE tokenizer merges characters into words";
    s.decode(tokens);
    llama_token next = 0;
    for (int step = 0; step < 4; ++step) {
        const float * logits = s.logits();
        ASSERT_NE(logits, nullptr);
        float lo = INFINITY, hi = -INFINITY;
        for (int32_t i = 0; i < s.n_vocab(); ++i) {
            ASSERT_TRUE(std::isfinite(logits[i])) << path << " logit " << i << " at step " << step;
            if (logits[i] > hi) {
                hi = logits[i];
                next = i;
            }
            lo = std::min(lo, logits[i]);
        }
        EXPECT_GT(hi - lo, 1e-3f) << path << ": logits are all the same";
        s.decode({next});
    }
}

}  // namespace

class EveryArch : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryArch, MixedPresetLoadsAndGivesFiniteLogits) {
    expect_finite_varied_logits(synth_model("tiny-" + GetParam(), tiny(GetParam())));
}

TEST_P(EveryArch, LoadsWithWeightRepackingToo) {
    expect_finite_varied_logits(synth_model("tiny-" + GetParam(), tiny(GetParam())), /*repack=*/true);
}

INSTANTIATE_TEST_SUITE_P(Synth, EveryArch, ::testing::Values("qwen35moe", "qwen3moe", "olmoe"));
