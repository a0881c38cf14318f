// Exactness gates across what users run: every MoE architecture of the pinned llama.cpp (tiny
// models shaped by llama.cpp's own loader) and every expert quant type, paged vs stock
// llama.cpp on the same file, logits compared byte for byte.
#include "gate_model.h"
#include "test_util.h"

#include "backend/expert_repack.h"
#include "backend/kernel_paths.h"
#include "gguf/expert_index.h"
#include "synth/arch_fixture.h"
#include "synth/synth_config.h"

#include "ggml-cpu.h"

#include <cctype>
#include <map>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace epq;
using namespace epq::test;

namespace {

// A prompt of `n` bytes of English (the fixtures' test tokenizer makes a token of a few bytes).
std::vector<std::string> fixture_archs() {
    std::vector<std::string> out;
    for (const auto & a : moe_architectures()) {
        if (a != "step35") {  // llama.cpp cannot save it (see write_arch_fixture)
            out.push_back(a);
        }
    }
    return out;
}

// Every type llama-quantize can give expert tensors, by the name `--quant` takes.
std::vector<std::string> type_names() {
    std::vector<std::string> out;
    for (const ggml_type t : expert_quant_types()) {
        out.push_back(ggml_type_name(t));
    }
    return out;
}

std::string safe_name(std::string s) {
    for (char & c : s) {
        c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    }
    return s;
}

}  // namespace

// Every MoE architecture: the paged run at the minimum arena (constant eviction, prompt batches
// that select every expert) gives stock's logits byte for byte, both in this process (models
// loaded once, see gate_model.h); a model whose layers turn out to have no routed experts runs
// through stock with a one-line notice (the epq binary, which prints it).
class ArchGate : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchGate, PagedAtTheMinimumArenaMatchesStock) {
    if (!sampled_under_sanitizer(GetParam(), {"qwen35moe", "deepseek4", "gpt-oss", "llama4", "arctic", "paddleocr"})) {
        GTEST_SKIP() << "sampled under the sanitizer: the regular build runs " << GetParam();
    }
    const std::string arch = GetParam();
    const std::string model = temp_dir() + "/arch-" + safe_name(arch) + ".gguf";
    write_arch_fixture(arch, model, ArchFixtureOptions{});
    const GgufFile file = GgufFile::open(model);
    const std::string prompt = prompt_of(400);

    if (!has_routed_experts(file)) {
        const LoggedRun stock = run_logged(model, prompt, "8", {"--no-pager", "-b", "32"}, arch + "-stock");
        ASSERT_EQ(stock.result.exit_code, 0) << stock.result.err;
        const LoggedRun plain = run_logged(model, prompt, "8", {"-b", "32"}, arch + "-dense");
        ASSERT_EQ(plain.result.exit_code, 0) << plain.result.err;
        EXPECT_NE(plain.result.err.find("nothing to page"), std::string::npos) << plain.result.err;
        EXPECT_TRUE(plain.logits == stock.logits);
        return;
    }
    GateRun stock;
    {
        GateModel m(model, GateConfig{});
        stock = m.run(prompt, 8, 32);
    }
    ASSERT_GE(stock.logits.size(), 8u * 128u * sizeof(float));
    const ExpertIndex idx = ExpertIndex::build(file);
    GateConfig pc;
    pc.paged = true;
    pc.arena = idx.min_arena_bytes;
    GateModel m(model, pc);
    const GateRun paged = m.run(prompt, 8, 32);
    EXPECT_TRUE(paged.logits == stock.logits) << arch << ": paged logits differ from stock";
    // refact's loader accepts expert tensors but its graph has a dense FFN only: nothing to read.
    if (arch != "refact") {
        EXPECT_GT(paged.after.bytes_read, 0u) << arch << ": nothing was paged";
    }
    // More distinct experts read than the arena's slots means some were given up.
    if (paged.after.misses > idx.n_expert_used) {
        EXPECT_GT(paged.after.evictions, 0u) << arch << ": the minimum arena never evicted";
    }
}

INSTANTIATE_TEST_SUITE_P(Exactness, ArchGate, ::testing::ValuesIn(fixture_archs()),
                         [](const auto & p) { return safe_name(p.param); });

// Every expert quant type through the pager: prompt batches of 8, 32, 64 and 512 tokens (the
// per-expert row counts where ggml switches kernels) then decode, at the minimum arena and at
// one that holds every expert, in both weight layouts where ggml repacks the type. In this
// process: one model load per layout and arena, a fresh context per batch size (gate_model.h).
class TypeGate : public ::testing::TestWithParam<std::string> {};

TEST_P(TypeGate, EveryBatchSizeAndArenaMatchesStock) {
    if (!sampled_under_sanitizer(GetParam(), {"q4_K", "iq4_xs", "iq2_xxs", "mxfp4", "q4_1", "f16"})) {
        GTEST_SKIP() << "sampled under the sanitizer: the regular build runs " << GetParam();
    }
    const std::string type = GetParam();
    SynthConfig cfg = tiny("qwen3moe", type);
    cfg.shape.n_layer = 2;
    const std::string model = synth_model("type-" + type, cfg);
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const std::string prompt = prompt_of(1400);  // ~300 tokens of the qwen2 tokenizer
#if defined(__SANITIZE_ADDRESS__)
    // Under AddressSanitizer (about 5x slower) one batch size that crosses the kernel thresholds;
    // the regular build runs them all.
    const std::vector<uint32_t> batches = {64};
#else
    const std::vector<uint32_t> batches = {8, 32, 64, 512};
#endif
    // Where stock's default flags repack this type on this CPU, both layouts: repacked experts
    // against stock's default, and -nr against stock -nr. Elsewhere the two are the same run.
    const auto & t0 = idx.layers.front().tensors.front();
    const bool repacked = stock_repacks_weight(t0.type, t0.ne[0], t0.ne[1], t0.ne[2]);
    std::vector<bool> layouts = {true};
    if (repacked) {
        layouts.push_back(false);
    }
    for (const bool repack : layouts) {
        const std::string mode = repack ? "" : " -nr";
        // The file's layout runs the kernels every other type's gate runs: two sizes suffice.
        auto in_layout = [&](uint32_t b) { return repack || b == 8 || b == 512; };
        std::map<uint32_t, GateRun> stock;
        {
            GateConfig sc;
            sc.repack = repack;
            GateModel m(model, sc);
            for (const uint32_t b : batches) {
                if (in_layout(b)) {
                    stock[b] = m.run(prompt, 4, b);
                    ASSERT_GE(stock[b].n_prompt, 200) << type << ": the prompt is too short to cross the thresholds";
                    ASSERT_EQ(stock[b].n_generated, 4) << type << ": stock stopped early";
                }
            }
        }
        for (const uint64_t arena : {idx.min_arena_bytes, 2 * idx.expert_bytes}) {
            GateConfig pc;
            pc.paged = true;
            pc.arena = arena;
            pc.repack = repack;
            GateModel m(model, pc);
            for (const uint32_t b : batches) {
                if (!in_layout(b) || (arena != idx.min_arena_bytes && b != 8 && b != 512)) {
                    continue;
                }
                const GateRun paged = m.run(prompt, 4, b);
                EXPECT_TRUE(paged.logits == stock[b].logits) << type << ": batch " << b << ", arena " << arena << " B"
                                                             << mode << ": paged logits differ from stock";
                EXPECT_EQ(paged.after.repacked_matrices > 0, repacked && repack) << type << mode;
                if (arena != idx.min_arena_bytes) {
                    // Every expert in its home slot: once a layer's selected experts are all
                    // resident, it runs stock's own nodes over the slots.
                    EXPECT_GT(paged.after.whole_layer_chains, 0u) << type << ": batch " << b << mode;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Exactness, TypeGate, ::testing::ValuesIn(type_names()),
                         [](const auto & p) { return safe_name(p.param); });

// The same gate end to end through the epq binary for one repacked and one plain type: flags,
// the lazy mapping of the file and the statistics as a user meets them (the in-process gates
// above share everything below the command line with it).
class TypeGateProcess : public ::testing::TestWithParam<std::string> {};

TEST_P(TypeGateProcess, EpqRunMatchesStockRun) {
    const std::string type = GetParam();
    SynthConfig cfg = tiny("qwen3moe", type);
    cfg.shape.n_layer = 2;
    const std::string model = synth_model("type-" + type, cfg);
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const std::string prompt = prompt_of(1400);
    for (const std::string b : {"8", "512"}) {
        // The default layout at the minimum arena is the file's: stock -nr is the configuration.
        const LoggedRun stock = run_logged(model, prompt, "4", {"--no-pager", "-nr", "-b", b}, type + "-stock-b" + b);
        ASSERT_EQ(stock.result.exit_code, 0) << stock.result.err;
        ASSERT_GE(stock.stats["prompt_tokens"].get<uint64_t>(), 200u);
        const LoggedRun paged = run_logged(
            model, prompt, "4", {"-b", b, "--arena", std::to_string(idx.min_arena_bytes)}, type + "-paged-b" + b);
        ASSERT_EQ(paged.result.exit_code, 0) << paged.result.err;
        EXPECT_TRUE(paged.logits == stock.logits) << type << ": batch " << b << ": paged logits differ from stock -nr";
        EXPECT_FALSE(paged.stats["weights_repacked"].get<bool>());
        EXPECT_GT(paged.stats["bytes_read"].get<uint64_t>(), 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(Exactness, TypeGateProcess, ::testing::Values("q4_K", "q6_K"),
                         [](const auto & p) { return safe_name(p.param); });

// The per-expert kernel choice is ggml's own: on AVX2 the IQ panel gemm takes IQ4_XS experts
// with at least its minimum rows, never a K-quant, and never a weight whose rows do not fill
// its 8-row panels. (What it changes in the result is what TypeGate checks.)
TEST(KernelPaths, FollowsGgmlsPanelChoice) {
    if (!ggml_cpu_has_avx2()) {
        GTEST_SKIP() << "no AVX2: ggml has no IQ panel path on this CPU";
    }
    EXPECT_TRUE(expert_takes_special_kernel(GGML_TYPE_IQ4_XS, 256, 256, 64));
    EXPECT_FALSE(expert_takes_special_kernel(GGML_TYPE_IQ4_XS, 256, 256, 1));
    EXPECT_FALSE(expert_takes_special_kernel(GGML_TYPE_IQ4_XS, 256, 252, 64));
    EXPECT_FALSE(expert_takes_special_kernel(GGML_TYPE_Q4_K, 256, 256, 64));
    EXPECT_FALSE(expert_takes_special_kernel(GGML_TYPE_F32, 256, 256, 64));
}
