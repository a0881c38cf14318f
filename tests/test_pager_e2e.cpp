// End-to-end gates of the pager against stock llama.cpp on the same file: greedy tokens and
// every step's logits identical byte for byte, for arenas from the minimum (constant eviction)
// to one that holds every expert; a multi-turn chat; a memory-capped run of a model several
// times larger than the cap; and the bad-input cases.
#include "test_util.h"

#include "gguf/expert_index.h"
#include "verify/sample_text.h"

#include <gtest/gtest.h>
#include <map>
#include <unistd.h>
#include <nlohmann/json.hpp>

using namespace epq;
using namespace epq::test;

namespace {

const char * kPrompt = "It was the best of times, it was the worst of times, it was the age of wisdom";

using RunResult = LoggedRun;

RunResult run(const std::string & model, const std::vector<std::string> & extra, const std::string & tag,
              const std::string & prompt = kPrompt, const std::string & n_predict = "64") {
    return run_logged(model, prompt, n_predict, extra, tag);
}

}  // namespace

class PagerGate : public ::testing::TestWithParam<std::string> {};

TEST_P(PagerGate, GreedyTokensAndLogitsMatchStockForEveryArenaSize) {
    if (!sampled_under_sanitizer(GetParam(), {"qwen35moe", "gpt-oss"})) {
        GTEST_SKIP() << "sampled under the sanitizer: the regular build runs " << GetParam();
    }
    const std::string model = synth_model("tiny-" + GetParam(), tiny(GetParam()));
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const uint64_t n_vocab = static_cast<uint64_t>(GgufFile::open(model).find_tensor("token_embd.weight")->ne[1]);
    const uint64_t min = idx.min_arena_bytes;
    struct Case {
        uint64_t arena;
        bool expect_evictions;
    };
    // Both weight layouts, named: --repack (experts repacked in the arena, where ggml repacks the
    // presets' Q4_K and MXFP4 experts) against stock's default flags, and -nr against stock -nr.
    std::map<std::string, RunResult> stock;
    for (const std::string mode : {"--repack", "-nr"}) {
        const RunResult s = run(model, {"--no-pager", mode}, GetParam() + "-stock" + mode);
        ASSERT_EQ(s.result.exit_code, 0) << s.result.err;
        ASSERT_EQ(s.stats["generated_tokens"], 64) << "stock stopped early: the comparison would be short";
        ASSERT_EQ(s.logits.size(), 64 * sizeof(float) * n_vocab);
        stock[mode] = s;
    }
    if (GetParam() != "gpt-oss") {
        // Repacked Q4_K rounds differently, so the gate can tell the layouts apart (gpt-oss's
        // MXFP4 kernels happen to give the same sums in both layouts on this model).
        EXPECT_FALSE(stock["-nr"].logits == stock["--repack"].logits)
            << "repacking changed no logit: the gate could not tell";
    }
    // Without a layout flag the arena chooses: the file's layout (stock -nr) when it holds part of
    // the experts, stock's default when it holds them all.
    for (const std::string mode : {"--repack", "-nr", ""}) {
        for (const Case c : {Case{min, true}, Case{3 * min, true}, Case{idx.expert_bytes * 2, false}}) {
            if (mode.empty() && c.arena == 3 * min) {
                continue;  // the same configuration as -nr at that arena
            }
            const bool repacked = mode == "--repack" || (mode.empty() && !c.expect_evictions);
            const RunResult & want = stock[repacked ? "--repack" : "-nr"];
            const std::string tag = GetParam() + "-" + std::to_string(c.arena) + mode;
            std::vector<std::string> args = {"--arena", std::to_string(c.arena)};
            if (!mode.empty()) {
                args.push_back(mode);
            }
            const RunResult paged = run(model, args, tag);
            const std::string what = "arena " + std::to_string(c.arena) + " " + (mode.empty() ? "(default)" : mode);
            ASSERT_EQ(paged.result.exit_code, 0) << paged.result.err;
            EXPECT_EQ(paged.result.out, want.result.out) << what << ": generated text differs";
            EXPECT_TRUE(paged.logits == want.logits)
                << what << ": logits differ from " << (repacked ? "stock" : "stock -nr");
            EXPECT_TRUE(paged.stats["paged"].get<bool>());
            EXPECT_EQ(paged.stats["weights_repacked"].get<bool>(), repacked) << what;
            EXPECT_GT(paged.stats["bytes_read"].get<uint64_t>(), 0u);
            const uint64_t n_repacked = paged.stats["repacked_matrices_per_expert"].get<uint64_t>();
            if (repacked) {
                EXPECT_GT(n_repacked, 0u) << what << ": the presets' Q4_K/MXFP4 experts were not held repacked";
            } else {
                EXPECT_EQ(n_repacked, 0u) << what << ": experts repacked in the file's layout";
            }
            if (c.expect_evictions) {
                EXPECT_GT(paged.stats["evictions"].get<uint64_t>(), 100u) << "arena " << c.arena << " did not evict";
            } else {
                EXPECT_EQ(paged.stats["evictions"].get<uint64_t>(), 0u) << "an arena that fits everything evicted";
                // Every expert is read at most once when everything fits.
                EXPECT_LE(paged.stats["bytes_read"].get<uint64_t>(), idx.expert_bytes);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Pager, PagerGate, ::testing::Values("qwen35moe", "qwen3moe", "olmoe", "gpt-oss", "deepseek2"),
                         [](const auto & p) { return p.param == "gpt-oss" ? std::string("gpt_oss") : p.param; });

TEST(PagerGate, MultiTurnChatMatchesStock) {
    const std::string model = synth_model("tiny-qwen35moe", tiny("qwen35moe"));
    const std::string input = temp_dir() + "/chat-in.txt";
    const std::string lines = "Hello there\nWhat is the capital of France?\nAnd of Italy?\n";
    write_file(input, std::vector<uint8_t>(lines.begin(), lines.end()));
    auto chat = [&](const std::vector<std::string> & extra, const std::string & tag) {
        std::vector<std::string> args = {
            "chat", "-m", model, "-n", "24", "-t", "2", "--logits-out", temp_dir() + "/" + tag + ".logits"};
        args.insert(args.end(), extra.begin(), extra.end());
        CommandResult r = run_epq(args, input);
        return std::make_pair(r, read_file(temp_dir() + "/" + tag + ".logits"));
    };
    // At the minimum arena experts stay in the file's layout: stock -nr is the configuration.
    const auto stock = chat({"--no-pager", "-nr"}, "chat-stock");
    ASSERT_EQ(stock.first.exit_code, 0) << stock.first.err;
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const auto paged = chat({"--arena", std::to_string(idx.min_arena_bytes)}, "chat-paged");
    ASSERT_EQ(paged.first.exit_code, 0) << paged.first.err;
    EXPECT_EQ(std::count(stock.first.out.begin(), stock.first.out.end(), '\n') >= 3, true);
    EXPECT_EQ(paged.first.out, stock.first.out);
    EXPECT_GT(stock.second.size(), 3u * 151936u * 4u);
    EXPECT_TRUE(paged.second == stock.second) << "chat logits differ from stock";
}

TEST(PagerGate, MemoryCappedRunOfAModelSeveralTimesTheCap) {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "memory caps measure nothing under AddressSanitizer (shadow memory, quarantine); "
                    "the regular build runs this gate";
#endif
    // A model ~3x the cap; its dense part fits.
    SynthConfig cfg = tiny("qwen3moe");
    cfg.shape.n_layer = 14;
    cfg.shape.n_expert = 256;
    cfg.shape.n_expert_used = 8;
    cfg.shape.n_ff_exp = 512;
    const std::string model = synth_model("capped", cfg);
    const uint64_t cap = 320ull << 20;
    const uint64_t file_size = GgufFile::open(model).file_size();
    ASSERT_GE(file_size, cap * 5 / 2);

    const std::string logits = temp_dir() + "/capped.logits";
    const CommandResult stock = run_epq({"run", "-m", model, "-p", kPrompt, "-n", "16", "-t", "2", "-b", "32", "-c",
                                         "512", "--no-pager", "-nr", "--logits-out", logits});
    ASSERT_EQ(stock.exit_code, 0) << stock.err;

    // Under the cap the arena holds part of the experts, so the run keeps the file's layout and
    // is identical to stock -nr.
    const std::string memcap = std::string(EPQ_SOURCE_DIR) + "/scripts/memcap.sh";
    const std::string paged_logits = temp_dir() + "/capped-paged.logits";
    const std::string stats = temp_dir() + "/capped-stats.json";
    const CommandResult capped =
        run_command({memcap,  "320M",    "--",   EPQ_BINARY,     "run",        "-m",           model, "-p",
                     kPrompt, "-n",      "16",   "-t",           "2",          "-b",           "32",  "-c",
                     "512",   "--arena", "auto", "--logits-out", paged_logits, "--stats-json", stats});
    if (capped.exit_code == 77) {
        GTEST_SKIP() << "no memory cgroup here: " << capped.err;
    }
    ASSERT_EQ(capped.exit_code, 0) << capped.err;
    EXPECT_NE(capped.err.find("OOM-killed: no"), std::string::npos) << capped.err;
    EXPECT_EQ(capped.out, stock.out);
    EXPECT_TRUE(read_file(paged_logits) == read_file(logits)) << "capped run's logits differ from stock";
    // The dense weights are locked in RAM, so the cap cannot push them out of the page cache
    // (needs CAP_IPC_LOCK or a locked-memory limit above them).
    const auto st = read_file(stats);
    const nlohmann::json sj = nlohmann::json::parse(std::string(st.begin(), st.end()));
    const uint64_t locked = sj["dense_locked_bytes"];
    // What the lock is for: the decode does not wait on the disk for dense weights the cap
    // pushed out (each would come back through a major page fault). A few faults may still come
    // from the program's own pages.
    const double faults = sj["decode_major_page_faults_per_token"];
    std::printf("decode under the cap: %.1f major page faults per token\n", faults);
    if (geteuid() == 0) {
        EXPECT_LT(faults, 8.0);
        EXPECT_GE(locked, ExpertIndex::build(GgufFile::open(model)).dense_bytes);
    } else {
        std::printf("not root: %llu dense bytes locked (the locked-memory limit decides)\n",
                    static_cast<unsigned long long>(locked));
    }
}

// Expert-major prefill: a prompt batch selects far more experts than a minimum arena holds, yet
// every expert is read at most once per batch (gate, up, activation and down are all computed
// while it is in its slot), and the result is still stock's, byte for byte.
class PagerPrefill : public ::testing::TestWithParam<std::string> {};

TEST_P(PagerPrefill, EachExpertIsReadAtMostOncePerUbatch) {
    SynthConfig cfg = tiny(GetParam());
    cfg.shape.n_expert = 64;
    cfg.shape.n_ff_exp = 512;  // != n_embd, and K-quants: the shapes where a mix-up would show
    const std::string model = synth_model("prefill-" + GetParam(), cfg);
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const std::string prompt = std::string(sample_text()).substr(0, 600);
    auto go = [&](std::vector<std::string> extra, const std::string & tag) {
        extra.insert(extra.end(), {"-b", "64"});
        return run(model, extra, tag, prompt, "4");
    };
    const RunResult stock = go({"--no-pager", "-nr"}, GetParam() + "-prefill-stock");  // the minimum arena's layout
    ASSERT_EQ(stock.result.exit_code, 0) << stock.result.err;
    const RunResult paged = go({"--arena", std::to_string(idx.min_arena_bytes)}, GetParam() + "-prefill-paged");
    ASSERT_EQ(paged.result.exit_code, 0) << paged.result.err;
    EXPECT_TRUE(paged.logits == stock.logits) << "prefill at the minimum arena changed the logits";

    const uint64_t n_prompt = paged.stats["prompt_tokens"];
    const uint64_t n_ubatch = (n_prompt + 63) / 64;
    ASSERT_GE(n_prompt, 100u);
    // Each ubatch x layer can read each of its distinct experts once: at most n_expert.
    const uint64_t bound = n_ubatch * idx.layers.size() * idx.n_expert;
    const uint64_t misses = paged.stats["prefill_misses"];
    EXPECT_LE(misses, bound) << "an expert was read more than once in a prompt batch";
    // ... and the batches really did select more than the arena holds (else the bound is moot).
    EXPECT_GT(misses, bound / 3);
    EXPECT_EQ(paged.stats["rereads_within_batch"], 0);
    EXPECT_GT(paged.stats["expert_chains"], 0);
}

INSTANTIATE_TEST_SUITE_P(Pager, PagerPrefill,
                         ::testing::Values("qwen35moe", "qwen3moe", "olmoe", "gpt-oss", "deepseek2"),
                         [](const auto & p) { return p.param == "gpt-oss" ? std::string("gpt_oss") : p.param; });

TEST(PagerBadInput, ArenaBelowTheMinimumNamesIt) {
    const std::string model = synth_model("tiny-olmoe", tiny("olmoe"));
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const CommandResult r =
        run_epq({"run", "-m", model, "-p", "hi", "-n", "2", "--arena", std::to_string(idx.min_arena_bytes - 1)});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("below the minimum of"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::to_string(idx.min_arena_bytes) + " B"), std::string::npos) << r.err;
    const CommandResult bad = run_epq({"run", "-m", model, "-p", "hi", "--arena", "lots"});
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_NE(bad.err.find("--arena expects a size"), std::string::npos) << bad.err;
}

TEST(PagerBadInput, ReadErrorIsAClearErrorNotWrongTokens) {
    const std::string model = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    const CommandResult r = run_epq_with_faults({"EPQ_IO_FAULT=eio,after=40,count=0"},
                                                {"run", "-m", model, "-p", kPrompt, "-n", "32", "--arena", "600K"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("epq: error: read error on " + model), std::string::npos) << r.err;
}

TEST(PagerBadInput, ModelTruncatedWhileRunningStopsWithAClearError) {
    const std::vector<uint8_t> bytes = read_file(synth_model("tiny-qwen3moe", tiny("qwen3moe")));
    const std::string model = temp_dir() + "/to-truncate.gguf";
    write_file(model, bytes);
    const std::string out = temp_dir() + "/truncate.out";
    // The second turn starts only after the first reply appeared, and the file is cut between.
    const std::string script = "(echo Hello; " + wait_for_output(out) + "; truncate -s " +
                               std::to_string(bytes.size() / 2) + " '" + model + "'; echo Again; echo More) | '" +
                               EPQ_BINARY + "' chat -m '" + model + "' -n 16 -t 2 --arena 600K > '" + out + "'";
    const CommandResult r = run_command({"bash", "-c", script});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(r.err.find("truncated") != std::string::npos || r.err.find("modified") != std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("Bus error"), std::string::npos) << r.err;
}
