// Memory within the budget: --arena auto sets aside everything a paged run holds besides the
// arena (the pager's scratch included, checked against what the pager really held), an arena
// that cannot fit is refused before anything is allocated, and capped runs at batch sizes up
// to 2048 finish or are refused up front, never OOM-killed.
#include "test_util.h"

#include "backend/pager.h"
#include "engine/memory_budget.h"
#include "gguf/expert_index.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace epq;
using namespace epq::test;

namespace {

constexpr uint64_t MiB = 1ull << 20;

std::string message_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const Error & e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(MemoryBudget, AutoArenaSubtractsEveryNeedAndTheHeadroom) {
    MemoryAvailable mem{4096 * MiB, "test"};
    const MemoryNeeds needs{1024 * MiB, 256 * MiB, 300 * MiB, 150 * MiB};
    const ArenaSizing s = auto_arena(mem, needs, 8 * MiB);
    // By hand: 4096 - 1024 - 256 - 300 - 150, less a sixteenth of 4096 as headroom.
    EXPECT_EQ(s.arena_bytes, (4096 - 1024 - 256 - 300 - 150 - 256) * MiB);
    EXPECT_NE(s.reasoning.find("pager scratch 150.00 MiB"), std::string::npos) << s.reasoning;
    EXPECT_NE(s.reasoning.find("headroom 256.00 MiB"), std::string::npos) << s.reasoning;

    mem.bytes = 1800 * MiB;  // 1730 MiB of needs, 112 MiB headroom: nothing left
    const std::string why = message_of([&] { auto_arena(mem, needs, 8 * MiB); });
    EXPECT_NE(why.find("not enough memory for the arena"), std::string::npos) << why;
    EXPECT_NE(why.find("lower -c or -b"), std::string::npos) << why;
}

TEST(MemoryBudget, AnExplicitArenaThatCannotFitIsRefusedWithTheNumbers) {
    const MemoryAvailable mem{4096 * MiB, "test"};
    const MemoryNeeds needs{1024 * MiB, 256 * MiB, 300 * MiB, 150 * MiB};
    EXPECT_NO_THROW(check_arena_fits(mem, needs, 2366 * MiB, "--arena X"));  // exactly what is left
    const std::string why = message_of([&] { check_arena_fits(mem, needs, 2367 * MiB, "--arena 2367M"); });
    EXPECT_NE(why.find("--arena 2367M (2.31 GiB) does not fit"), std::string::npos) << why;
    EXPECT_NE(why.find("leaves 2.31 GiB for experts"), std::string::npos) << why;
    EXPECT_NE(message_of([&] { check_arena_fits(mem, needs, UINT64_MAX, "--arena huge"); }), "");
}

class PagerScratch : public ::testing::TestWithParam<std::string> {};

TEST_P(PagerScratch, StaysWithinWhatAutoSetsAsideAtEveryBatchSize) {
    const std::string model = synth_model("tiny-" + GetParam(), tiny(GetParam()));
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const std::string text = std::string(EPQ_SOURCE_DIR) + "/data/text/tale-of-two-cities-ch1.txt";
    // Every expert resident: a layer's selected experts are all ready at once and computed as one
    // group, the pager's largest scratch.
    uint64_t previous = 0;
    for (const uint32_t b : {1u, 16u, 256u, 1024u}) {
        const std::string stats = temp_dir() + "/scratch-" + GetParam() + "-" + std::to_string(b) + ".json";
        const CommandResult r =
            run_epq({"run", "-m", model, "--replay", text, "--replay-prompt", std::to_string(b), "-b",
                     std::to_string(b), "-n", "4", "-t", "2", "--arena", "64M", "--stats-json", stats});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const auto bytes = read_file(stats);
        const uint64_t held =
            nlohmann::json::parse(std::string(bytes.begin(), bytes.end()))["pager_scratch_bytes"].get<uint64_t>();
        const uint64_t bound = Pager::scratch_bound(idx, b);
        EXPECT_GT(held, previous) << "batch " << b << ": the scratch did not grow with the batch";
        EXPECT_LE(held, bound) << "batch " << b << ": the pager held " << held << " B besides the arena, "
                               << "more than the " << bound << " B --arena auto sets aside";
        previous = held;
        std::printf("batch %u: held %llu B, bound %llu B\n", b, static_cast<unsigned long long>(held),
                    static_cast<unsigned long long>(bound));
    }
}

INSTANTIATE_TEST_SUITE_P(Memory, PagerScratch, ::testing::Values("qwen3moe", "gpt-oss", "deepseek2", "qwen35moe"),
                         [](const auto & p) { return p.param == "gpt-oss" ? std::string("gpt_oss") : p.param; });

// Under a sanitizer, the runtime and its shadow memory take more than these caps allow: they are
// not epq's, so the caps are checked in the regular build only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SKIP_UNDER_SANITIZERS() GTEST_SKIP() << "memory caps measure the sanitizer's runtime here"
#else
#define SKIP_UNDER_SANITIZERS() (void)0
#endif

TEST(MemoryCap, AnArenaThatCannotFitIsRefusedBeforeAnythingIsTouched) {
    SKIP_UNDER_SANITIZERS();
    const std::string model = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    const std::string memcap = std::string(EPQ_SOURCE_DIR) + "/scripts/memcap.sh";
    // 64 MiB cannot hold the tiny model's 52 MiB of dense weights, its KV cache and an arena.
    for (const std::string arena : {"14M", "auto"}) {
        const CommandResult r =
            run_command({memcap, "64M", "--", EPQ_BINARY, "run", "-m", model, "-p", "hi", "-n", "4", "--arena", arena});
        if (r.exit_code == 77) {
            GTEST_SKIP() << "no memory cgroup here: " << r.err;
        }
        EXPECT_EQ(r.exit_code, 1) << r.err;
        EXPECT_NE(r.err.find(arena == "auto" ? "not enough memory for the arena" : "does not fit"), std::string::npos)
            << r.err;
        EXPECT_NE(r.err.find("OOM-killed: no"), std::string::npos) << r.err;
        EXPECT_EQ(r.err.find("llama.cpp"), std::string::npos) << "the model was loaded before the refusal:\n" << r.err;
    }
}

TEST(MemoryCap, ShortSweepOfCapsAndBatchSizesNeverOomKills) {
    SKIP_UNDER_SANITIZERS();
    const std::string model = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    const CommandResult r =
        run_command({"env", std::string("EPQ=") + EPQ_BINARY, std::string(EPQ_SOURCE_DIR) + "/scripts/memsweep.sh",
                     "-m", model, "--caps", "64M,192M,320M,1G", "--batches", "1,64,512,2048", "-c", "2560"});
    if (r.exit_code == 77) {
        GTEST_SKIP() << "no memory cgroup here: " << r.err;
    }
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("memsweep: 16 runs: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(", 0 failed"), std::string::npos) << r.out;
    // The generous cap runs every batch size.
    size_t ok_at_1g = 0;
    for (size_t at = r.out.find("\n1G "); at != std::string::npos; at = r.out.find("\n1G ", at + 1)) {
        ok_at_1g += r.out.compare(at + 17, 2, "ok") == 0;
    }
    EXPECT_EQ(ok_at_1g, 4u) << r.out;
}
