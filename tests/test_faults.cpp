// Faults: the release binary carries none and ignores their variables; every I/O fault planted
// under the expert reads ends in a retry (logits identical to stock llama.cpp) or in one clear
// error with no token that stock would not have printed; a model file rewritten under a run is
// caught even when no expert is read any more.
#include "test_util.h"

#include "util/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

using namespace epq;
using namespace epq::test;

namespace {

const char * kPrompt = "It was the best of times, it was the worst of times, it was the age of wisdom";

size_t count_of(const std::string & text, const std::string & what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++n;
    }
    return n;
}

bool contains(const std::vector<uint8_t> & bytes, const std::string & what) {
    return std::search(bytes.begin(), bytes.end(), what.begin(), what.end()) != bytes.end();
}

struct Generated {
    CommandResult result;
    std::vector<uint8_t> logits;
};

// `epq run` (or another binary) with environment assignments `env` in front.
Generated generate(const std::string & binary, const std::vector<std::string> & env, const std::string & model,
                   const std::vector<std::string> & extra, const std::string & tag) {
    const std::string logits = temp_dir() + "/" + tag + ".logits";
    std::vector<std::string> cmd = {"env"};
    cmd.insert(cmd.end(), env.begin(), env.end());
    for (const std::string & a : {binary, std::string("run"), std::string("-m"), model, std::string("-p"),
                                  std::string(kPrompt), std::string("-n"), std::string("24"), std::string("-t"),
                                  std::string("2"), std::string("--logits-out"), logits}) {
        cmd.push_back(a);
    }
    cmd.insert(cmd.end(), extra.begin(), extra.end());
    Generated g;
    g.result = run_command(cmd);
    std::remove(logits.c_str());
    g.logits = g.result.exit_code == 0 ? read_file(logits) : std::vector<uint8_t>{};
    return g;
}

const std::string & model() {
    static const std::string m = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    return m;
}

const Generated & stock() {
    static const Generated g = generate(EPQ_BINARY, {}, model(), {"--no-pager", "-nr"}, "faults-stock");
    return g;
}

}  // namespace

TEST(ReleaseBinary, CarriesNoFaultCode) {
    const std::vector<uint8_t> release = read_file(EPQ_BINARY), faulty = read_file(EPQ_FAULTS_BINARY);
    for (const std::string name : {"EPQ_FAULT", "EPQ_IO_FAULT", "corrupt-slot", "wrong-slot"}) {
        EXPECT_TRUE(contains(faulty, name)) << name << " is not in epq-faults: this check could not fail";
        EXPECT_FALSE(contains(release, name)) << name << " is in the release binary";
    }
}

TEST(ReleaseBinary, IgnoresTheFaultVariables) {
    ASSERT_EQ(stock().result.exit_code, 0) << stock().result.err;
    const std::vector<std::string> env = {"EPQ_FAULT=corrupt-slot", "EPQ_FAULT_AFTER=1", "EPQ_IO_FAULT=eio,count=0"};
    const std::vector<std::string> arena = {"--arena", "600K"};
    const Generated release = generate(EPQ_BINARY, env, model(), arena, "faults-release");
    ASSERT_EQ(release.result.exit_code, 0) << release.result.err;
    EXPECT_TRUE(release.logits == stock().logits) << "the release binary's logits differ from stock's";
    // The same variables do plant faults where they are compiled in.
    const Generated faulty = generate(EPQ_FAULTS_BINARY, env, model(), arena, "faults-planted");
    EXPECT_NE(faulty.result.exit_code, 0) << faulty.result.err;
}

struct IoCase {
    std::string spec;
    bool recovers;  // a retry makes the run succeed; else one clear error
    std::string name;
    // One read thread: consecutive read calls are one read's attempts, not several reads'.
    bool one_thread = false;
};

void PrintTo(const IoCase & c, std::ostream * os) {
    *os << c.spec;
}

class IoFaults : public ::testing::TestWithParam<IoCase> {};

TEST_P(IoFaults, EndInARetryOrOneClearErrorNeverAWrongToken) {
    const IoCase & c = GetParam();
    ASSERT_EQ(stock().result.exit_code, 0) << stock().result.err;
    // A small arena: experts are read on every token, so a fault planted anywhere is met.
    std::vector<std::string> extra = {"--arena", "600K"};
    if (c.one_thread) {
        extra.insert(extra.end(), {"--read-threads", "1"});
    }
    const Generated g = generate(EPQ_FAULTS_BINARY, {"EPQ_IO_FAULT=" + c.spec}, model(), extra, "io-" + c.name);
    const std::string & err = g.result.err;
    EXPECT_EQ(count_of(err, "epq-faults: planted 0 "), 0u) << "the fault was never met:\n" << err;
    EXPECT_EQ(count_of(err, "epq-faults: planted "), 1u) << err;
    if (c.recovers) {
        ASSERT_EQ(g.result.exit_code, 0) << err;
        EXPECT_TRUE(g.logits == stock().logits) << c.spec << ": logits differ from stock's";
        EXPECT_EQ(g.result.out, stock().result.out);
        if (c.spec.rfind("eio", 0) == 0) {
            EXPECT_NE(err.find("retrying (1 of 2)"), std::string::npos) << err;
        }
    } else {
        EXPECT_EQ(g.result.exit_code, 1) << err;
        EXPECT_EQ(count_of(err, "epq: error: "), 1u) << err;
        EXPECT_NE(err.find("epq: error: read error on " + model()), std::string::npos) << err;
        EXPECT_NE(err.find("check the disk"), std::string::npos) << err;
        // Whatever was printed before the error is what stock printed.
        EXPECT_EQ(stock().result.out.compare(0, g.result.out.size(), g.result.out), 0)
            << "printed: " << g.result.out << "\nstock: " << stock().result.out;
    }
}

INSTANTIATE_TEST_SUITE_P(Faults, IoFaults,
                         ::testing::Values(IoCase{"eio,after=30", true, "eio_once"},
                                           IoCase{"eio,after=30,count=2", true, "eio_twice"},
                                           IoCase{"eio,after=30,count=3", false, "eio_three_times", true},
                                           IoCase{"eio,after=30,count=0", false, "eio_for_good"},
                                           IoCase{"short", true, "short_reads"}, IoCase{"eintr", true, "eintr"},
                                           IoCase{"slow,count=40", true, "slow"},
                                           IoCase{"einval", true, "einval_direct"}),
                         [](const auto & p) { return p.param.name; });

TEST(ModelFile, RewrittenInPlaceWithEveryExpertResidentStopsTheRun) {
    // The arena holds every expert, so no read would notice: the check after each batch must.
    const std::vector<uint8_t> bytes = read_file(model());
    const std::string path = temp_dir() + "/to-rewrite.gguf";
    write_file(path, bytes);
    const std::string out = temp_dir() + "/rewrite.out";
    // Same size, a few bytes changed in the middle (expert data), after the first reply.
    const std::string script = "(echo Hello; " + wait_for_output(out) + "; printf 'XXXXXXXX' | " + "dd of='" + path +
                               "' bs=1 seek=" + std::to_string(bytes.size() / 2) +
                               " conv=notrunc status=none; echo Again; echo More) | '" + EPQ_BINARY + "' chat -m '" +
                               path + "' -n 16 -t 2 --arena 64M > '" + out + "'";
    const CommandResult r = run_command({"bash", "-c", script});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("was modified while running"), std::string::npos) << r.err;
    EXPECT_EQ(count_of(r.err, "epq: error: "), 1u) << r.err;
}

TEST(ModelFile, ReplacedByAnotherFileKeepsServingTheOriginal) {
    const std::vector<uint8_t> bytes = read_file(model());
    const std::string path = temp_dir() + "/to-replace.gguf", other = temp_dir() + "/other.gguf";
    write_file(path, bytes);
    write_file(other, bytes);
    const std::string out = temp_dir() + "/replace.out";
    const std::string script = "(echo Hello; " + wait_for_output(out) + "; mv '" + other + "' '" + path +
                               "'; echo Again) | '" + EPQ_BINARY + "' chat -m '" + path +
                               "' -n 8 -t 2 --arena 600K > '" + out + "'";
    const CommandResult r = run_command({"bash", "-c", script});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("was replaced or removed while running; still using the file opened at start"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
}
