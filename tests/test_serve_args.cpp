// epq serve's own flags, taken out before llama.cpp's parser sees the rest, and what the arena
// leaves to the server (serve_budget.h), on synthetic models of a plain, a hybrid and a
// sliding-window architecture.
#include "server/serve_args.h"
#include "server/serve_budget.h"
#include "test_util.h"
#include "util/error.h"

#include <gtest/gtest.h>

using namespace epq;
using namespace epq::server;

TEST(ServeArgs, PagerFlagsComeOutTheRestStaysInOrder) {
    const SplitArgs s = split_serve_args({"-m", "x.gguf", "--arena", "2G", "--jinja", "--read-threads=3", "-c", "512",
                                          "--preload", "--temp", "0", "--policy", "lru", "--no-pager"});
    EXPECT_EQ(s.pager.arena, "2G");
    EXPECT_EQ(s.pager.read_threads, 3);
    EXPECT_TRUE(s.pager.preload);
    EXPECT_TRUE(s.pager.no_pager);
    EXPECT_EQ(s.pager.policy, "lru");
    EXPECT_EQ(s.llama, (std::vector<std::string>{"-m", "x.gguf", "--jinja", "-c", "512", "--temp", "0"}));
    EXPECT_FALSE(s.help);
    EXPECT_TRUE(split_serve_args({"--help"}).help);
    EXPECT_EQ(split_serve_args({"--help"}).llama, std::vector<std::string>{"--help"});
}

TEST(ServeArgs, BadPagerFlagsSayWhich) {
    EXPECT_THROW(split_serve_args({"-m", "x", "--arena"}), Error);
    EXPECT_THROW(split_serve_args({"--read-threads", "0"}), Error);
    EXPECT_THROW(split_serve_args({"--read-threads", "many"}), Error);
    EXPECT_THROW(split_serve_args({"--preload=yes"}), Error);
    EXPECT_THROW(split_serve_args({"--decode-streams", "0"}), Error);
    EXPECT_THROW(split_serve_args({"--decode-streams", "some"}), Error);
    EXPECT_EQ(split_serve_args({"--decode-streams", "3"}).pager.decode_streams, 3);
    EXPECT_EQ(split_serve_args({"--decode-streams=auto"}).pager.decode_streams, 0);
    EXPECT_EQ(split_serve_args({"--decode-streams", "all"}).pager.decode_streams, kAllDecodeStreams);
    try {
        split_serve_args({"--policy"});
        FAIL();
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("--policy"), std::string::npos);
    }
}

TEST(ServeArgs, RouterChildrenGetTheSameFlags) {
    const std::vector<std::string> args = {"--models-dir", "d", "--arena", "1 G", "--preload", "--port", "0"};
    const std::vector<std::string> pager = pager_args_of(args);
    EXPECT_EQ(pager, (std::vector<std::string>{"--arena", "1 G", "--preload"}));
    const std::string env = encode_pager_flags(pager);
    EXPECT_EQ(decode_pager_flags(env.c_str()), pager);
    EXPECT_TRUE(decode_pager_flags(nullptr).empty());
    EXPECT_TRUE(decode_pager_flags("").empty());
}

TEST(ServeBudget, DefaultsThatDoNotFitAreLoweredAndSaid) {
    const std::string path = test::synth_model("tiny-qwen3moe", test::tiny("qwen3moe"));
    const GgufFile f = GgufFile::open(path);
    ServeMemoryRequest req;
    req.n_ctx = 1024;
    req.n_parallel = 4;
    // 1 GiB available: a thirty-second for the prompt cache is 32 MiB, below the default 8192.
    ServeMemoryPlan p = plan_serve_memory(f, req, 1ull << 30);
    EXPECT_EQ(p.cache_ram_mib, 32);
    ASSERT_FALSE(p.notes.empty());
    EXPECT_NE(p.notes[0].find("--cache-ram lowered from 8192 to 32"), std::string::npos) << p.notes[0];
    ASSERT_FALSE(p.needs.empty());
    EXPECT_EQ(p.needs[0].second, 32ull << 20);
    // A value the user gave is kept and counted.
    req.cache_ram_given = true;
    req.cache_ram_mib = 8192;
    p = plan_serve_memory(f, req, 1ull << 30);
    EXPECT_EQ(p.cache_ram_mib, 8192);
    EXPECT_TRUE(p.notes.empty());
    EXPECT_EQ(p.needs.at(0).second, 8192ull << 20);
    // Attention only, no sliding window: no checkpoints to count.
    EXPECT_EQ(checkpoint_bytes(f), 0u);
}

TEST(ServeBudget, ContextZeroIsTheModelsUnlessItsKvCacheWouldCrowdTheMemory) {
    const std::string path = test::synth_model("tiny-qwen3moe", test::tiny("qwen3moe"));
    const GgufFile f = GgufFile::open(path);
    const int64_t train = f.get_int(f.architecture() + ".context_length").value_or(0);
    ASSERT_GT(train, 0);
    ServeMemoryRequest req;
    req.n_ctx = 0;
    EXPECT_EQ(plan_serve_memory(f, req, 64ull << 30).n_ctx, train);
}

TEST(ServeBudget, HybridModelsCheckpointTheirRecurrentState) {
    const std::string path = test::synth_model("tiny-qwen35moe", test::tiny("qwen35moe"));
    const GgufFile f = GgufFile::open(path);
    const uint64_t per = checkpoint_bytes(f);
    ASSERT_GT(per, 0u);
    ServeMemoryRequest req;
    req.n_ctx = 1024;
    req.n_parallel = 2;
    // Room for exactly 3 checkpoints per slot in a sixteenth of the memory.
    const uint64_t avail = per * 2 * 3 * 16 + 15;
    const ServeMemoryPlan p = plan_serve_memory(f, req, avail);
    EXPECT_EQ(p.n_ctx_checkpoints, 3);
    bool counted = false;
    for (const auto & [name, bytes] : p.needs) {
        if (name.find("checkpoints") != std::string::npos) {
            counted = true;
            EXPECT_EQ(bytes, per * 2 * 3);
        }
    }
    EXPECT_TRUE(counted);
}

TEST(ServeBudget, MissingDraftModelIsAClearError) {
    const std::string path = test::synth_model("tiny-qwen3moe", test::tiny("qwen3moe"));
    const GgufFile f = GgufFile::open(path);
    ServeMemoryRequest req;
    req.n_ctx = 512;
    req.draft_path = test::temp_dir() + "/no-such-draft.gguf";
    try {
        plan_serve_memory(f, req, 8ull << 30);
        FAIL();
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("draft model"), std::string::npos) << e.what();
    }
}
