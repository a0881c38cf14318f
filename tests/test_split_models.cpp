// Models split into several files, as big models are published (llama.cpp's gguf-split format):
// written by epq synth and by stock llama-gguf-split, opened from any shard, every shard's
// experts indexed and paged, logits identical to stock llama.cpp on the split files, and a
// missing or foreign shard refused with one clear error before anything loads.
#include "test_util.h"

#include "gguf/expert_index.h"
#include "synth/synthesizer.h"

#include "gguf.h"
#include "llama.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

using namespace epq;
using namespace epq::test;

namespace {

const char * kPrompt = "It was the best of times, it was the worst of times, it was the age of wisdom";

// The tiny qwen3moe preset written whole and split by epq synth into files of at most 30 MiB
// (3 files: the experts of the first layers in one, the rest in another), once per process.
struct SplitPair {
    std::string single;
    std::vector<std::string> shards;
};

const SplitPair & tiny_split() {
    static const SplitPair pair = [] {
        SplitPair p;
        SynthConfig cfg = tiny("qwen3moe");
        p.single = synth_model("tiny-qwen3moe", cfg);
        cfg.split_max_bytes = 30ull << 20;
        SynthOptions opts;
        opts.progress = false;
        std::filesystem::create_directories(temp_dir() + "/split");
        p.shards = synthesize(cfg, temp_dir() + "/split/tiny.gguf", opts).files;
        return p;
    }();
    return pair;
}

std::map<std::string, uint64_t> tensor_sizes(const GgufFile & f) {
    std::map<std::string, uint64_t> out;
    for (const auto & t : f.tensors()) {
        out[t.name] = t.nbytes;
    }
    return out;
}

// llama.cpp's loader placed every expert tensor of the model in the pager's buffer type (the
// buffers it asked for: the tensors' bytes, each padded to the buffer's alignment of 64).
void expect_all_experts_paged(const nlohmann::json & stats, const ExpertIndex & idx) {
    size_t n_tensors = 0;
    for (const auto & l : idx.layers) {
        n_tensors += l.tensors.size();
    }
    const uint64_t placed = stats.value("expert_tensor_bytes", uint64_t{0});
    EXPECT_GE(placed, idx.expert_bytes) << "some experts were loaded beside the arena: " << stats.dump();
    EXPECT_LE(placed, idx.expert_bytes + 64 * n_tensors);
}

}  // namespace

TEST(SplitModel, EpqSynthWritesShardsAsLlamaCppNamesAndTagsThem) {
    const SplitPair & p = tiny_split();
    ASSERT_EQ(p.shards.size(), 3u);
    for (size_t k = 0; k < p.shards.size(); ++k) {
        // llama.cpp's own naming, from its public API.
        char want[512];
        llama_split_path(want, sizeof want, (temp_dir() + "/split/tiny").c_str(), static_cast<int>(k), 3);
        EXPECT_EQ(p.shards[k], want);
        gguf_init_params params{true, nullptr};
        gguf_context * g = gguf_init_from_file(p.shards[k].c_str(), params);
        ASSERT_NE(g, nullptr) << p.shards[k];
        EXPECT_EQ(gguf_get_val_u16(g, gguf_find_key(g, "split.no")), k);
        EXPECT_EQ(gguf_get_val_u16(g, gguf_find_key(g, "split.count")), 3);
        EXPECT_EQ(gguf_get_val_i32(g, gguf_find_key(g, "split.tensors.count")), 51);
        // The model's metadata lives in the first file only, as gguf-split writes it.
        EXPECT_EQ(gguf_find_key(g, "general.architecture") >= 0, k == 0);
        gguf_free(g);
    }
}

TEST(SplitModel, AnyShardOpensTheWholeModelAndIndexesEveryExpert) {
    const SplitPair & p = tiny_split();
    const GgufFile single = GgufFile::open(p.single);
    const ExpertIndex want = ExpertIndex::build(single);
    for (const auto & shard : p.shards) {
        const GgufFile f = GgufFile::open(shard);
        EXPECT_EQ(f.path(), p.shards.front()) << "llama.cpp loads a split model from its first file";
        EXPECT_EQ(f.shards().size(), 3u);
        EXPECT_EQ(tensor_sizes(f), tensor_sizes(single));
        const ExpertIndex idx = ExpertIndex::build(f);
        EXPECT_EQ(idx.expert_bytes, want.expert_bytes);
        EXPECT_EQ(idx.dense_bytes, want.dense_bytes);
        EXPECT_EQ(idx.layers.size(), want.layers.size());
        std::set<uint32_t> holding;
        for (const auto & l : idx.layers) {
            for (const auto & t : l.tensors) {
                holding.insert(t.shard);
                // Same bytes at the offset the index names as in the single file.
                const TensorInfo * s = single.find_tensor(t.name);
                ASSERT_NE(s, nullptr);
                EXPECT_TRUE(f.read(t.file_offset + t.expert_stride * 5, 256) ==
                            single.read(s->file_offset + s->nb[2] * 5, 256))
                    << t.name;
            }
        }
        EXPECT_GE(holding.size(), 2u) << "the experts sit in one file: the test would not see a split";
    }
    // What epq inspect reports: every file, and all expert bytes.
    const CommandResult r = run_epq({"inspect", "--json", p.shards[1]});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["expert_bytes"].get<uint64_t>(), want.expert_bytes);
    ASSERT_EQ(j["files"].size(), 3u);
    uint64_t experts = 0;
    for (const auto & f : j["files"]) {
        experts += f["expert_bytes"].get<uint64_t>();
    }
    EXPECT_EQ(experts, want.expert_bytes);
}

// Paged from every file, with an arena that evicts constantly, named by a later shard: the
// logits are stock llama.cpp's on the split files (and on the single file), both layouts.
TEST(SplitModel, PagedLogitsMatchStockOnTheSplitFiles) {
    const SplitPair & p = tiny_split();
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(p.single));
    for (const std::string mode : {"", "-nr"}) {
        auto with_mode = [&](std::vector<std::string> a) {
            if (!mode.empty()) {
                a.push_back(mode);
            }
            return a;
        };
        const LoggedRun stock =
            run_logged(p.shards.front(), kPrompt, "32", with_mode({"--no-pager"}), "split-stock" + mode);
        ASSERT_EQ(stock.result.exit_code, 0) << stock.result.err;
        const LoggedRun whole = run_logged(p.single, kPrompt, "32", with_mode({"--no-pager"}), "split-whole" + mode);
        ASSERT_EQ(whole.result.exit_code, 0) << whole.result.err;
        EXPECT_TRUE(stock.logits == whole.logits) << "stock gives other logits for the split files";
        const LoggedRun paged =
            run_logged(p.shards[2], kPrompt, "32", with_mode({"--arena", std::to_string(idx.min_arena_bytes)}),
                       "split-paged" + mode);
        ASSERT_EQ(paged.result.exit_code, 0) << paged.result.err;
        EXPECT_FALSE(stock.logits.empty());
        EXPECT_TRUE(paged.logits == stock.logits) << mode << ": paged logits differ from stock on the split files";
        EXPECT_EQ(paged.result.out, stock.result.out);
        EXPECT_TRUE(paged.stats["paged"].get<bool>());
        EXPECT_GT(paged.stats["evictions"].get<uint64_t>(), 100u);
        // Every expert of every file is paged: llama.cpp placed them all in the pager's buffer,
        // none in memory of its own beside the arena.
        expect_all_experts_paged(paged.stats, idx);
    }
}

// A model split by stock llama-gguf-split, several times larger than a memory cap its dense part
// fits under: paged from every file within the cap, logits identical to stock's.
TEST(SplitModel, StockSplitModelUnderAMemoryCap) {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "memory caps measure nothing under AddressSanitizer; the regular build runs this gate";
#endif
    SynthConfig cfg = tiny("qwen3moe");
    cfg.shape.n_layer = 14;
    cfg.shape.n_expert = 256;
    cfg.shape.n_expert_used = 8;
    cfg.shape.n_ff_exp = 512;
    const std::string model = synth_model("capped", cfg);  // the memory-cap gate's model
    const std::string dir = temp_dir() + "/stock-split";
    std::filesystem::create_directories(dir);
    const CommandResult split =
        run_command({EPQ_LLAMA_GGUF_SPLIT_BINARY, "--split", "--split-max-size", "300M", model, dir + "/capped"});
    ASSERT_EQ(split.exit_code, 0) << split.err << split.out;
    std::vector<std::string> shards;
    for (const auto & e : std::filesystem::directory_iterator(dir)) {
        shards.push_back(e.path().string());
    }
    std::sort(shards.begin(), shards.end());
    ASSERT_GE(shards.size(), 3u);
    const GgufFile f = GgufFile::open(shards.back());
    EXPECT_EQ(f.path(), shards.front());
    EXPECT_EQ(f.shards().size(), shards.size());
    const ExpertIndex idx = ExpertIndex::build(f);
    EXPECT_EQ(idx.expert_bytes, ExpertIndex::build(GgufFile::open(model)).expert_bytes);

    const std::string logits = temp_dir() + "/split-capped-stock.logits";
    const CommandResult stock = run_epq({"run", "-m", f.path(), "-p", kPrompt, "-n", "16", "-t", "2", "-b", "32", "-c",
                                         "512", "--no-pager", "--logits-out", logits});
    ASSERT_EQ(stock.exit_code, 0) << stock.err;
    const std::string memcap = std::string(EPQ_SOURCE_DIR) + "/scripts/memcap.sh";
    const std::string paged_logits = temp_dir() + "/split-capped-paged.logits";
    const std::string stats = temp_dir() + "/split-capped-stats.json";
    const CommandResult capped = run_command(
        {memcap, "320M", "--", EPQ_BINARY, "run", "-m",  shards[1],      "-p",         kPrompt,        "-n", "16",
         "-t",   "2",    "-b", "32",       "-c",  "512", "--logits-out", paged_logits, "--stats-json", stats});
    if (capped.exit_code == 77) {
        GTEST_SKIP() << "no memory cgroup here: " << capped.err;
    }
    ASSERT_EQ(capped.exit_code, 0) << capped.err;
    EXPECT_NE(capped.err.find("OOM-killed: no"), std::string::npos) << capped.err;
    EXPECT_EQ(capped.out, stock.out);
    EXPECT_TRUE(read_file(paged_logits) == read_file(logits)) << "capped run's logits differ from stock";
    const auto st = read_file(stats);
    const auto j = nlohmann::json::parse(std::string(st.begin(), st.end()));
    expect_all_experts_paged(j, idx);
}

TEST(SplitModel, MissingOrForeignShardIsOneClearErrorBeforeLoading) {
    const SplitPair & p = tiny_split();
    const std::string dir = temp_dir() + "/broken-split";
    std::filesystem::create_directories(dir);
    for (const auto & s : p.shards) {
        std::filesystem::copy_file(s, dir + "/" + std::filesystem::path(s).filename().string(),
                                   std::filesystem::copy_options::overwrite_existing);
    }
    const std::string first = dir + "/tiny-00001-of-00003.gguf";
    const std::string second = dir + "/tiny-00002-of-00003.gguf";
    std::filesystem::remove(second);
    for (const std::vector<std::string> & cmd : {std::vector<std::string>{"inspect", first},
                                                 {"run", "-m", first, "-p", "Hi", "-n", "2"},
                                                 {"serve", "-m", first, "--port", "0"}}) {
        const CommandResult r = run_epq(cmd);
        EXPECT_NE(r.exit_code, 0) << cmd[0];
        EXPECT_NE(r.err.find("shard 2 of 3"), std::string::npos) << cmd[0] << ": " << r.err;
        EXPECT_NE(r.err.find(second), std::string::npos) << cmd[0] << ": " << r.err;
        EXPECT_EQ(r.err.find("llama_model_load"), std::string::npos) << "llama.cpp was reached: " << r.err;
    }
    // A shard of another split of the same name (4 files): its metadata disagrees.
    SynthConfig cfg = tiny("qwen3moe");
    cfg.split_max_bytes = 8ull << 20;
    SynthOptions opts;
    opts.progress = false;
    const auto other = synthesize(cfg, temp_dir() + "/other-split.gguf", opts).files;
    ASSERT_GE(other.size(), 4u);
    std::filesystem::copy_file(other[1], second, std::filesystem::copy_options::overwrite_existing);
    const CommandResult r = run_epq({"inspect", first});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("does not belong"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(second), std::string::npos) << r.err;
}
