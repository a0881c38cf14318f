// The soak in short: scripts/soak.sh runs one continuous greedy text as a chain of processes, each
// with another arena size, eviction policy, prefetch mode, thread count and expert layout, and
// requires every step's logits to equal stock llama.cpp's on the same prompt. The long run (2000
// steps, the script's default) is run by hand; here 8 segments cover every setting at least once.
#include "test_util.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace epq;
using namespace epq::test;

namespace {

const std::string kScript = std::string(EPQ_SOURCE_DIR) + "/scripts/soak.sh";

int count_lines_with(const std::string & text, const std::string & needle) {
    std::istringstream in(text);
    int n = 0;
    for (std::string line; std::getline(in, line);) {
        n += line.find(needle) != std::string::npos ? 1 : 0;
    }
    return n;
}

}  // namespace

TEST(Soak, ShortRunWithChangingSettingsMatchesStockEveryStep) {
    const std::string model = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    // Eight segments: the script's schedule gives each arena size, policy, prefetch mode, thread
    // count and layout at least once in them. Shorter segments under the sanitizers, which are slow.
    const std::string steps = kSanitized ? "64" : "96", segment = kSanitized ? "8" : "12";
    const CommandResult r = run_command({"env", "TMPDIR=" + temp_dir(), std::string("EPQ=") + EPQ_BINARY, kScript, "-m",
                                         model, "--steps", steps, "--segment", segment});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("soak: " + steps + " steps in 8 segments, every step's logits identical to stock"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(count_lines_with(r.out, "): identical"), 8) << r.out;
    for (const char * setting :
         {"arena min,", "arena half,", "arena auto,", "--policy forecast", "--policy lfu", "--policy lru",
          "--policy 2q", "--prefetch off", "--prefetch on", "--prefetch auto", "-t 1,", "-t 2,", "repacked;", "-nr;"}) {
        EXPECT_GE(count_lines_with(r.out, setting), 1) << "no segment ran with " << setting << ":\n" << r.out;
    }
    // The segments at the minimum arena must have evicted, or they tested nothing more than the others.
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
        if (line.find("arena min,") != std::string::npos) {
            EXPECT_EQ(line.find(" 0 evictions"), std::string::npos) << line;
        }
    }
}

// The soak catches a wrong expert in the arena: epq-faults corrupts one that lands there. (The
// script keeps a failed run's files: under the test's temporary directory, removed at exit.)
TEST(Soak, StopsAtAPlantedFault) {
    const std::string model = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    const CommandResult r =
        run_command({"env", "TMPDIR=" + temp_dir(), std::string("EPQ=") + EPQ_FAULTS_BINARY, "EPQ_FAULT=corrupt-slot",
                     "EPQ_FAULT_AFTER=100", kScript, "-m", model, "--steps", "16", "--segment", "8"});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("LOGITS DIFFER"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("soak: MISMATCH at step "), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("every step's logits identical"), std::string::npos) << r.out;
}
