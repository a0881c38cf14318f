// The epq command: help, exit codes, stdout carrying only what it should.
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace epq;
using namespace epq::test;

TEST(Cli, HelpForEverySubcommand) {
    const CommandResult top = run_epq({"--help"});
    EXPECT_EQ(top.exit_code, 0);
    for (const std::string sub : {"run", "demo", "synth", "inspect"}) {
        EXPECT_NE(top.out.find(sub), std::string::npos) << sub;
        const CommandResult r = run_epq({sub, "--help"});
        EXPECT_EQ(r.exit_code, 0) << sub;
        EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub << ": " << r.out;
    }
    const CommandResult run_help = run_epq({"run", "--help"});
    for (const std::string flag :
         {"-m", "-p", "-n", "-t", "-c", "--temp", "--top-k", "--top-p", "--seed", "--no-pager"}) {
        EXPECT_NE(run_help.out.find(flag), std::string::npos) << flag;
    }
}

TEST(Cli, UsageErrorsExitNonZero) {
    EXPECT_NE(run_epq({}).exit_code, 0);
    EXPECT_NE(run_epq({"frobnicate"}).exit_code, 0);
    EXPECT_NE(run_epq({"inspect"}).exit_code, 0);
    EXPECT_NE(run_epq({"synth", "--preset", "tiny-olmoe"}).exit_code, 0);  // no -o
    const CommandResult bad_preset = run_epq({"synth", "--preset", "huge", "-o", temp_dir() + "/x.gguf"});
    EXPECT_EQ(bad_preset.exit_code, 1);
    EXPECT_NE(bad_preset.err.find("unknown preset 'huge'; choose one of: tiny-qwen35moe"), std::string::npos)
        << bad_preset.err;
    const CommandResult bad_type =
        run_epq({"synth", "--preset", "tiny-olmoe", "--type", "experts=q9_x", "-o", temp_dir() + "/x.gguf"});
    EXPECT_EQ(bad_type.exit_code, 1);
    EXPECT_NE(bad_type.err.find("unknown tensor type 'q9_x'"), std::string::npos) << bad_type.err;
}

TEST(Cli, SynthThenInspectJson) {
    const std::string path = temp_dir() + "/cli-olmoe.gguf";
    const CommandResult s = run_epq({"synth", "--preset", "tiny-olmoe", "--experts", "24", "--experts-used", "3",
                                     "--type", "ffn_down_exps=q8_0", "-q", "-o", path});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const CommandResult r = run_epq({"inspect", "--json", path});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["architecture"], "olmoe");
    EXPECT_EQ(j["n_expert"], 24);
    EXPECT_EQ(j["n_expert_used"], 3);
    EXPECT_EQ(j["size_classes"].size(), 2u);
    EXPECT_EQ(j["layers"][0]["tensors"][2]["type"], "q8_0");
    const CommandResult text = run_epq({"inspect", path, "--layers"});
    EXPECT_EQ(text.exit_code, 0);
    EXPECT_NE(text.out.find("minimum arena"), std::string::npos);
    EXPECT_NE(text.out.find("blk.3.ffn_down_exps.weight"), std::string::npos);
}

TEST(Cli, RunPrintsOnlyTheGeneratedTextOnStdout) {
    const std::string path = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    const CommandResult a = run_epq({"run", "-m", path, "-p", "Hello there", "-n", "12", "-t", "2"});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    EXPECT_FALSE(a.out.empty());
    EXPECT_EQ(a.out.find("epq:"), std::string::npos) << "diagnostics leaked to stdout";
    EXPECT_NE(a.err.find("generated 12 tokens"), std::string::npos) << a.err;
    // Greedy is the default: a second run prints the same text.
    const CommandResult b = run_epq({"run", "-m", path, "-p", "Hello there", "-n", "12", "-t", "2"});
    EXPECT_EQ(a.out, b.out);
    // Sampling with a seed is reproducible too, and differs from greedy.
    const CommandResult s1 =
        run_epq({"run", "-m", path, "-p", "Hello there", "-n", "12", "--temp", "1.5", "--seed", "3"});
    const CommandResult s2 =
        run_epq({"run", "-m", path, "-p", "Hello there", "-n", "12", "--temp", "1.5", "--seed", "3"});
    ASSERT_EQ(s1.exit_code, 0) << s1.err;
    EXPECT_EQ(s1.out, s2.out);
    EXPECT_NE(s1.out, a.out);
}

TEST(Cli, RunRejectsBadArguments) {
    const std::string path = synth_model("tiny-qwen3moe", tiny("qwen3moe"));
    const CommandResult no_prompt = run_epq({"run", "-m", path});
    EXPECT_EQ(no_prompt.exit_code, 1);
    EXPECT_NE(no_prompt.err.find("no prompt"), std::string::npos);
    const CommandResult small_ctx = run_epq({"run", "-m", path, "-p", "hello", "-n", "100", "-c", "32"});
    EXPECT_EQ(small_ctx.exit_code, 1);
    EXPECT_NE(small_ctx.err.find("raise -c"), std::string::npos) << small_ctx.err;
}

TEST(Cli, DemoGeneratesItsModelOnceThenRuns) {
    const std::string dir = temp_dir() + "/demo";
    setenv("EPQ_DEMO_DIR", dir.c_str(), 1);
    const CommandResult first = run_epq({"demo", "-n", "6", "-t", "2"});
    ASSERT_EQ(first.exit_code, 0) << first.err;
    EXPECT_NE(first.err.find("generating the demo model"), std::string::npos) << first.err;
    EXPECT_FALSE(first.out.empty());
    const CommandResult second = run_epq({"demo", "-n", "6", "-t", "2"});
    ASSERT_EQ(second.exit_code, 0) << second.err;
    EXPECT_EQ(second.err.find("generating the demo model"), std::string::npos) << "regenerated the demo model";
    EXPECT_EQ(first.out, second.out);
    unsetenv("EPQ_DEMO_DIR");
}
