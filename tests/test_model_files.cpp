// The files people download. Models split into several files, as big models are published
// (llama.cpp's gguf-split format): written by epq synth and by stock llama-gguf-split, opened
// from any shard, every shard's experts indexed and paged, logits identical to stock llama.cpp
// on the split files, and a missing or foreign shard refused with one clear error before
// anything loads. And what else real files carry: an alignment other than 32, expert types
// mixed across and within layers (dynamic quants), next-token-prediction layers llama.cpp
// skips, and the family's real chat template.
#include "serve_process.h"
#include "test_util.h"

#include "gguf/expert_index.h"
#include "synth/arch_fixture.h"
#include "synth/synthesizer.h"
#include "util/byte_size.h"

#include "gguf.h"
#include "llama.h"

#include <cpp-httplib/httplib.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
    for (const std::string mode : {"--repack", "-nr"}) {
        auto with_mode = [&](std::vector<std::string> a) {
            a.push_back(mode);
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
                                         "512", "--no-pager", "-nr", "--logits-out", logits});
    ASSERT_EQ(stock.exit_code, 0) << stock.err;
    // Capped, the arena holds part of the experts: the file's layout, stock -nr's.
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

// ---- what else real files carry ------------------------------------------------------------

namespace {

struct FileCase {
    std::string name;
    std::string model;
};

std::string model_for(const std::string & name) {
    if (name == "alignment_4096" || name == "alignment_64") {
        SynthConfig cfg = tiny("qwen3moe");
        cfg.alignment = name == "alignment_64" ? 64 : 4096;
        return synth_model("tiny-qwen3moe-" + name, cfg);
    }
    if (name == "dynamic_quant") {
        // As dynamic quants mix them: four expert types, gate, up and down of one layer each in
        // another, and down differing between the first and second half of the layers.
        SynthConfig cfg = tiny("qwen3moe");
        cfg.quant.choose("ffn_gate_exps", parse_ggml_type("iq2_xxs"));
        cfg.quant.choose("ffn_up_exps", parse_ggml_type("q3_k"));
        cfg.quant.choose("ffn_down_exps", parse_ggml_type("q5_k"));
        cfg.quant.choose("ffn_down_exps_alt", parse_ggml_type("q8_0"));
        return synth_model("tiny-qwen3moe-dynamic-quant", cfg);
    }
    // mtp_glm4moe, mtp_deepseek2: fixtures shaped by llama.cpp's loader with one MTP layer.
    const std::string arch = name.substr(4);
    const std::string path = temp_dir() + "/mtp-" + arch + ".gguf";
    if (access(path.c_str(), R_OK) != 0) {
        ArchFixtureOptions o;
        o.n_nextn = 1;
        write_arch_fixture(arch, path, o);
    }
    return path;
}

}  // namespace

class DownloadedFile : public ::testing::TestWithParam<std::string> {};

// The exactness gate on each kind of file: paged with an arena that evicts constantly, every
// step's logits equal stock llama.cpp's on the same file, in both weight layouts.
TEST_P(DownloadedFile, PagedLogitsMatchStock) {
    const std::string model = model_for(GetParam());
    const GgufFile file = GgufFile::open(model);
    const ExpertIndex idx = ExpertIndex::build(file);
    if (GetParam() == "dynamic_quant") {
        std::set<ggml_type> types;
        for (const auto & l : idx.layers) {
            std::set<ggml_type> in_layer;
            for (const auto & t : l.tensors) {
                types.insert(t.type);
                in_layer.insert(t.type);
            }
            EXPECT_EQ(in_layer.size(), 3u) << "layer " << l.layer << ": gate, up and down not in three types";
        }
        EXPECT_EQ(types.size(), 4u);
    }
    if (GetParam().rfind("alignment", 0) == 0) {
        const uint64_t align = GetParam() == "alignment_64" ? 64 : 4096;
        EXPECT_EQ(file.get_int("general.alignment").value_or(0), static_cast<int64_t>(align));
        for (const auto & t : file.tensors()) {
            EXPECT_EQ((t.file_offset - file.data_offset()) % align, 0u) << t.name;
        }
    }
    for (const std::string mode : {"--repack", "-nr"}) {
        auto with_mode = [&](std::vector<std::string> a) {
            a.push_back(mode);
            return a;
        };
        const std::string tag = "file-" + GetParam() + mode;
        const LoggedRun stock = run_logged(model, kPrompt, "24", with_mode({"--no-pager"}), tag + "-stock");
        ASSERT_EQ(stock.result.exit_code, 0) << stock.result.err;
        ASSERT_FALSE(stock.logits.empty());
        const LoggedRun paged = run_logged(model, kPrompt, "24",
                                           with_mode({"--arena", std::to_string(idx.min_arena_bytes)}), tag + "-paged");
        ASSERT_EQ(paged.result.exit_code, 0) << paged.result.err;
        EXPECT_TRUE(paged.logits == stock.logits) << GetParam() << mode << ": paged logits differ from stock";
        EXPECT_GT(paged.stats["bytes_read"].get<uint64_t>(), 0u);
        expect_all_experts_paged(paged.stats, idx);
    }
}

INSTANTIATE_TEST_SUITE_P(Files, DownloadedFile,
                         ::testing::Values("alignment_4096", "alignment_64", "dynamic_quant", "mtp_glm4moe",
                                           "mtp_deepseek2"),
                         [](const auto & p) { return p.param; });

// The MTP layers llama.cpp skips are neither indexed, read nor budgeted: not in the pager's
// buffer, not in the dense bytes, not prefetched.
TEST(DownloadedFileMtp, LayersLlamaCppSkipsAreNeitherPagedNorBudgeted) {
    const std::string model = model_for("mtp_glm4moe");
    const GgufFile file = GgufFile::open(model);
    const ExpertIndex idx = ExpertIndex::build(file);
    ASSERT_EQ(idx.n_mtp_layers, 1u);
    const int mtp = static_cast<int>(idx.n_layer) - 1;
    EXPECT_EQ(idx.layer(mtp), nullptr) << "the MTP layer's experts are indexed";
    EXPECT_NE(file.find_tensor("blk." + std::to_string(mtp) + ".ffn_up_exps.weight"), nullptr)
        << "the fixture has no MTP experts: the test would not see them";
    uint64_t all = 0;
    for (const auto & t : file.tensors()) {
        all += t.nbytes;
    }
    EXPECT_GT(idx.unused_bytes, 0u);
    EXPECT_EQ(idx.dense_bytes + idx.expert_bytes + idx.unused_bytes, all);
    // With MTP drafting, llama.cpp loads them: then they count as any layer.
    const ExpertIndex with_mtp = ExpertIndex::build(file, true);
    EXPECT_NE(with_mtp.layer(mtp), nullptr);
    EXPECT_EQ(with_mtp.unused_bytes, 0u);
    const CommandResult r = run_epq({"inspect", model});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("mtp layers:"), std::string::npos) << r.out;
}

// With MTP drafting on, llama.cpp loads those layers and drafts with them: epq serve then pages
// them as any layer, and its answers (drafts included) equal stock llama-server's.
TEST(DownloadedFileMtp, MtpDraftingPagesThemAndAnswersAsStock) {
    const std::string model = model_for("mtp_deepseek2");
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const int mtp = static_cast<int>(idx.n_layer) - 1;
    const nlohmann::json body = {{"prompt", kPrompt}, {"n_predict", 24}, {"temperature", 0}, {"n_probs", 2}};
    nlohmann::json answers[2];
    for (const Server which : {Server::epq, Server::stock}) {
        std::vector<std::string> flags = {"-c", "512", "-np", "1", "--spec-type", "draft-mtp", "--repack"};
        if (which == Server::epq) {
            flags.insert(flags.end(), {"--arena", std::to_string(idx.min_arena_bytes * 2)});
        }
        ServeProcess s(model, flags, which);
        httplib::Client c("127.0.0.1", s.port());
        c.set_read_timeout(300, 0);
        auto r = c.Post("/completion", body.dump(), "application/json");
        ASSERT_TRUE(r) << s.log();
        ASSERT_EQ(r->status, 200) << r->body;
        nlohmann::json j = nlohmann::json::parse(r->body);
        EXPECT_GT(j["timings"]["draft_n"].get<int>(), 0) << "no MTP drafts: the test would not see the layers used";
        answers[which == Server::epq ? 0 : 1] = {{"content", j["content"]},
                                                 {"probs", j["completion_probabilities"]},
                                                 {"draft_n", j["timings"]["draft_n"]},
                                                 {"draft_n_accepted", j["timings"]["draft_n_accepted"]}};
        if (which == Server::epq) {
            auto st = c.Get("/epq/stats");
            ASSERT_TRUE(st);
            const auto layers = nlohmann::json::parse(st->body)["view"]["layers"];
            EXPECT_NE(std::find(layers.begin(), layers.end(), mtp), layers.end())
                << "the MTP layer's experts are not paged: " << layers.dump();
        }
        EXPECT_EQ(s.stop(), 0) << s.log();
    }
    EXPECT_EQ(answers[0], answers[1]);
}

// Every synth preset of a family whose real template the pinned tree ships carries it, so chat,
// tools and reasoning see what a real file gives.
TEST(DownloadedFileTemplate, PresetsCarryTheirFamilysChatTemplate) {
    const std::map<std::string, std::string> want = {
        {"tiny-qwen3moe", "Qwen-Qwen3-0.6B.jinja"},
        {"tiny-qwen35moe", "Qwen3.5-4B.jinja"},
        {"tiny-gpt-oss", "openai-gpt-oss-120b.jinja"},
        {"tiny-deepseek2", "deepseek-ai-DeepSeek-V3.1.jinja"},
    };
    for (const auto & [preset, file] : want) {
        const std::string arch = preset.substr(5);
        const GgufFile f = GgufFile::open(synth_model(preset, tiny(arch)));
        std::ifstream in(std::string(EPQ_LLAMA_SOURCE_DIR) + "/models/templates/" + file);
        ASSERT_TRUE(in) << file;
        std::ostringstream text;
        text << in.rdbuf();
        EXPECT_EQ(f.get_string("tokenizer.chat_template").value_or(""), text.str()) << preset;
    }
    // And the server renders chats with it: gpt-oss's harmony format, not the Llama 3 format of
    // the vocabulary the preset borrows.
    ServeProcess s(synth_model("tiny-gpt-oss", tiny("gpt-oss")), {"-c", "512", "-np", "1"});
    httplib::Client c("127.0.0.1", s.port());
    const nlohmann::json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
    auto r = c.Post("/apply-template", chat.dump(), "application/json");
    ASSERT_TRUE(r) << s.log();
    const std::string prompt = nlohmann::json::parse(r->body)["prompt"].get<std::string>();
    EXPECT_NE(prompt.find("<|start|>user<|message|>Hi<|end|>"), std::string::npos) << prompt;
    EXPECT_NE(prompt.find("# Valid channels: analysis, commentary, final."), std::string::npos) << prompt;
    EXPECT_EQ(s.stop(), 0) << s.log();
}

// ---- the 1 TB class ------------------------------------------------------------------------

namespace {

struct MeasuredRun {
    int exit_code = -1;
    std::string out;
    long peak_rss_kib = 0;
};

// Runs epq with stdout to a file and returns the child's own peak resident set (wait4's rusage:
// this one process, not every child the test process has had).
MeasuredRun run_epq_measured(const std::vector<std::string> & args, const std::string & out_path) {
    std::vector<std::string> argv_s{EPQ_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (auto & a : argv_s) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    MeasuredRun r;
    const pid_t pid = fork();
    if (pid == 0) {
        const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0) {
            _exit(126);
        }
        execv(argv[0], argv.data());
        _exit(127);
    }
    int status = 0;
    rusage ru{};
    if (pid < 0 || wait4(pid, &status, 0, &ru) != pid) {
        return r;
    }
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.peak_rss_kib = ru.ru_maxrss;
    std::ifstream in(out_path);
    std::ostringstream text;
    text << in.rdbuf();
    r.out = text.str();
    return r;
}

}  // namespace

// Kimi-K2's shape (61 layers, 384 experts top-8, ~580 GiB), published split as such models are,
// written header-only: the data is a hole, so the test needs no disk for it. epq inspect indexes
// every shard and plans a 64 GiB arena from the headers alone, in memory proportional to the
// index; the file is refused for computing with one clear error.
TEST(DownloadedFileScale, TerabyteClassSplitHeaderPlansFromTheIndexAlone) {
    SynthConfig cfg = make_preset("kimi-k2");
    cfg.split_max_bytes = 50ull << 30;
    SynthOptions opts;
    opts.progress = false;
    opts.header_only = true;
    const std::string dir = temp_dir() + "/kimi-k2-header";
    std::filesystem::create_directories(dir);
    const std::vector<std::string> shards = synthesize(cfg, dir + "/kimi-k2.gguf", opts).files;
    ASSERT_GE(shards.size(), 10u);
    uint64_t apparent = 0, allocated = 0;
    for (const auto & s : shards) {
        struct stat st {};
        ASSERT_EQ(stat(s.c_str(), &st), 0) << s;
        apparent += static_cast<uint64_t>(st.st_size);
        allocated += static_cast<uint64_t>(st.st_blocks) * 512;
    }
    EXPECT_GT(apparent, 500ull << 30);
    EXPECT_LT(allocated, 256ull << 20) << "the header-only shards take real disk space";

    // From a shard in the middle, as a user may name one.
    const MeasuredRun r = run_epq_measured({"inspect", shards[4], "--arena", "64G", "--json"}, dir + "/inspect.json");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["n_expert"], 384);
    EXPECT_EQ(j["n_expert_used"], 8);
    EXPECT_EQ(j["layers"].size(), 60u);  // the first layer is dense
    EXPECT_EQ(j["files"].size(), shards.size());
    EXPECT_GT(j["expert_bytes"].get<uint64_t>(), 500ull << 30);
    const auto & plan = j["arena_plan"];
    EXPECT_LE(plan["bytes"].get<uint64_t>(), 64ull << 30);
    EXPECT_GT(plan["bytes"].get<uint64_t>(), 63ull << 30);
    EXPECT_FALSE(plan["holds_everything"].get<bool>());
    uint64_t slots = 0;
    for (const auto & pool : plan["pools"]) {
        slots += pool["slots"].get<uint64_t>() * pool["slot_bytes"].get<uint64_t>();
    }
    EXPECT_EQ(slots, plan["bytes"].get<uint64_t>());
    if (!kSanitized) {
        // The index of 23,040 experts is a few MiB; the file is 580 GiB.
        EXPECT_LT(r.peak_rss_kib, 128 * 1024) << "epq inspect's peak RSS grows with the file, not the index";
    }
    std::cout << "inspect of " << format_bytes(apparent) << " in " << shards.size()
              << " shards: " << j["seconds"].get<double>() << " s, peak RSS " << r.peak_rss_kib / 1024 << " MiB\n";

    const CommandResult run = run_epq({"run", "-m", shards[0], "-p", "Hi", "-n", "1"});
    EXPECT_NE(run.exit_code, 0);
    EXPECT_NE(run.err.find("--header-only"), std::string::npos) << run.err;
}
