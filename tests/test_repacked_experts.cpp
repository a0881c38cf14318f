// Experts rewritten once into ggml's repacked layout (epq repack): an arena that holds part of
// the experts reads them ready-repacked, and its logits are byte-identical to stock llama.cpp
// with its default flags (which repacks at load). A file that does not fit the model or this CPU
// is refused with a message that says what to do, never read as if it did.
#include "test_util.h"

#include "backend/expert_repack.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

using namespace epq;
using namespace epq::test;

namespace {

const char * kPrompt = "It was the best of times, it was the worst of times, it was the age of wisdom";

struct Case {
    const char * name;
    const char * arch;
    const char * quant;
};

std::string min_arena(const std::string & model) {
    const GgufFile file = GgufFile::open(model);
    return std::to_string(ExpertIndex::build(file).min_arena_bytes);
}

// A model of its own in a directory of its own, so the file written beside it concerns only this
// test (synthesized models are shared between tests).
std::string own_copy(const std::string & model, const std::string & name) {
    const std::string dir = temp_dir() + "/" + name;
    EXPECT_EQ(run_command({"mkdir", "-p", dir}).exit_code, 0);
    const std::string path = dir + "/model.gguf";
    EXPECT_EQ(run_command({"cp", model, path}).exit_code, 0);
    return path;
}

CommandResult repack(const std::string & model, const std::vector<std::string> & extra = {}) {
    std::vector<std::string> args = {"repack", "-m", model};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_epq(args);
}

}  // namespace

class RepackedExpertsGate : public ::testing::TestWithParam<Case> {};

TEST_P(RepackedExpertsGate, CappedArenaReadsThemAndMatchesStockDefaultFlags) {
    const Case c = GetParam();
    const std::string model =
        own_copy(synth_model(std::string("rx-") + c.name, tiny(c.arch, c.quant)), std::string("rx-") + c.name);
    const CommandResult w = repack(model);
    ASSERT_EQ(w.exit_code, 0) << w.err;
    ASSERT_EQ(access((model + ".epq-repacked").c_str(), F_OK), 0) << w.out;

    const std::string arena = min_arena(model);
    const auto paged = run_logged(model, kPrompt, "24", {"--arena", arena}, std::string("rx-paged-") + c.name);
    const auto stock = run_logged(model, kPrompt, "24", {"--no-pager"}, std::string("rx-stock-") + c.name);
    ASSERT_EQ(paged.result.exit_code, 0) << paged.result.err;
    ASSERT_EQ(stock.result.exit_code, 0) << stock.result.err;
    EXPECT_NE(paged.result.err.find("read ready-repacked from " + model + ".epq-repacked"), std::string::npos)
        << paged.result.err;
    EXPECT_NE(paged.result.err.find("identical to stock llama.cpp with its default flags"), std::string::npos);
    EXPECT_EQ(paged.stats["weights_repacked"], true);
    EXPECT_EQ(paged.stats["repacked_experts_file"], model + ".epq-repacked");
    EXPECT_GT(paged.stats["evictions"].get<uint64_t>(), 0u) << "the arena must hold part of the experts";
    EXPECT_EQ(paged.stats["repack_seconds"].get<double>(), 0.0) << "nothing repacked after a read";
    ASSERT_FALSE(stock.logits.empty());
    EXPECT_TRUE(paged.logits == stock.logits) << c.name << ": paged logits differ from stock's default flags";

    // -nr still keeps the file's layout beside it, identical to stock -nr.
    const auto paged_nr = run_logged(model, kPrompt, "8", {"--arena", arena, "-nr"}, std::string("rx-nr-") + c.name);
    const auto stock_nr = run_logged(model, kPrompt, "8", {"--no-pager", "-nr"}, std::string("rx-snr-") + c.name);
    ASSERT_EQ(paged_nr.result.exit_code, 0) << paged_nr.result.err;
    EXPECT_EQ(paged_nr.stats["weights_repacked"], false);
    EXPECT_TRUE(paged_nr.logits == stock_nr.logits);
}

INSTANTIATE_TEST_SUITE_P(Types, RepackedExpertsGate,
                         ::testing::Values(Case{"mixed", "qwen3moe", ""}, Case{"q4_0", "qwen3moe", "q4_0"},
                                           Case{"iq4_nl", "olmoe", "iq4_nl"}, Case{"mxfp4", "gpt-oss", ""},
                                           Case{"qwen35moe", "qwen35moe", ""}),
                         [](const auto & p) { return std::string(p.param.name); });

class RepackedExpertsBadFile : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        model_ = new std::string(own_copy(synth_model("rx-mixed", tiny("qwen3moe")), "rx-bad"));
        file_ = new std::string(temp_dir() + "/rx-bad/made.epq-repacked");
        const CommandResult w = repack(*model_, {"-o", *file_});
        ASSERT_EQ(w.exit_code, 0) << w.err;
        bytes_ = new std::vector<uint8_t>(read_file(*file_));
    }
    static void TearDownTestSuite() {
        delete model_;
        delete file_;
        delete bytes_;
    }
    // A run naming `bytes` written to a file of its own: it must fail, saying `expected`.
    static void expect_refused(const std::vector<uint8_t> & bytes, const std::string & tag,
                               const std::string & expected, const std::string & model = "") {
        const std::string path = temp_dir() + "/rx-bad/" + tag + ".epq-repacked";
        write_file(path, bytes);
        const CommandResult r = run_epq({"run", "-m", model.empty() ? *model_ : model, "-p", "Hello", "-n", "2",
                                         "--arena", min_arena(*model_), "--repacked-experts", path});
        EXPECT_EQ(r.exit_code, 1) << tag;
        EXPECT_NE(r.err.find(expected), std::string::npos) << tag << ": " << r.err;
        EXPECT_NE(r.err.find("epq repack -m"), std::string::npos) << tag << ": says how to rewrite it: " << r.err;
    }
    // Where the header's JSON has `from`: replaced by `to` of the same length.
    static std::vector<uint8_t> edited(const std::string & from, const std::string & to) {
        std::vector<uint8_t> b = *bytes_;
        const std::string s(b.begin(), b.begin() + 65536);
        const size_t at = s.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        std::copy(to.begin(), to.end(), b.begin() + static_cast<std::ptrdiff_t>(at));
        return b;
    }
    static std::string * model_;
    static std::string * file_;
    static std::vector<uint8_t> * bytes_;
};
std::string * RepackedExpertsBadFile::model_ = nullptr;
std::string * RepackedExpertsBadFile::file_ = nullptr;
std::vector<uint8_t> * RepackedExpertsBadFile::bytes_ = nullptr;

TEST_F(RepackedExpertsBadFile, CutShort) {
    std::vector<uint8_t> b = *bytes_;
    b.resize(b.size() - 4096);
    expect_refused(b, "short", "cut short");
}

TEST_F(RepackedExpertsBadFile, NotOneAtAll) {
    expect_refused(std::vector<uint8_t>(8192, 'x'), "garbage", "no epq repacked-experts header");
    expect_refused(std::vector<uint8_t>(3, 0), "tiny", "shorter than its header");
}

TEST_F(RepackedExpertsBadFile, DamagedHeader) {
    expect_refused(edited("\"format\"", "\"format["), "json", "not valid JSON");
}

TEST_F(RepackedExpertsBadFile, MadeFromAnotherModel) {
    const std::string other = synth_model("rx-other", tiny("qwen3moe", "", 7));
    expect_refused(*bytes_, "other-model", "does not hold the experts this run pages", other);
}

TEST_F(RepackedExpertsBadFile, MadeOnACpuThatRepacksOtherTypes) {
    // As if made where ggml repacked another set of matrices (another CPU's features).
    expect_refused(edited("\"repacked\":[\"blk.0.", "\"repacked\":[\"blk.9."), "other-cpu",
                   "where ggml repacks other expert types");
}

TEST_F(RepackedExpertsBadFile, BytesThatAreNotThisCpusRepackOfTheModel) {
    std::vector<uint8_t> b = *bytes_;
    // The header ends within the first pages; the first slot image starts at the next boundary.
    size_t data = 0;
    for (size_t len = 0, i = 0; i < 8; ++i) {
        len |= static_cast<size_t>(b[8 + i]) << (8 * i);
        data = (16 + len + 4095) / 4096 * 4096;
    }
    for (size_t i = data; i < data + 4096 * 4; ++i) {
        b[i] ^= 0x5a;
    }
    expect_refused(b, "flipped", "as this CPU repacks the model's bytes");
}

TEST_F(RepackedExpertsBadFile, BesideTheModelItIsSkippedWithANoticeAndTheRunStaysExact) {
    const std::string model = own_copy(*model_, "rx-beside");
    std::vector<uint8_t> b = *bytes_;
    b.resize(b.size() - 4096);
    write_file(model + ".epq-repacked", b);
    const std::string arena = min_arena(model);
    const auto paged = run_logged(model, kPrompt, "8", {"--arena", arena}, "rx-beside-paged");
    const auto stock = run_logged(model, kPrompt, "8", {"--no-pager", "-nr"}, "rx-beside-stock");
    ASSERT_EQ(paged.result.exit_code, 0) << paged.result.err;
    EXPECT_NE(paged.result.err.find("not reading experts from it"), std::string::npos) << paged.result.err;
    EXPECT_EQ(paged.stats["weights_repacked"], false);
    EXPECT_TRUE(paged.logits == stock.logits);
}

TEST(RepackedExperts, ATypeGgmlNeverRepacksHasNothingToRewrite) {
    // Q8_0 experts: ggml's x86 CPU backend has no repacked layout for them in this release.
    if (stock_repacks_weight(GGML_TYPE_Q8_0, 256, 256, 32)) {
        GTEST_SKIP() << "ggml repacks Q8_0 on this CPU";
    }
    const std::string model = own_copy(synth_model("rx-q8", tiny("qwen3moe", "q8_0")), "rx-q8");
    const CommandResult r = repack(model);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("nothing to rewrite"), std::string::npos) << r.err;
    EXPECT_NE(access((model + ".epq-repacked").c_str(), F_OK), 0) << "no file left behind";
    EXPECT_NE(access((model + ".epq-repacked.part").c_str(), F_OK), 0) << "no file left behind";
}
