// Clients no one here wrote, against epq serve (tests/clients, installed from its lockfile by
// scripts/test.sh's "test tools" stage): the openai package (also retrying while the model
// loads), @anthropic-ai/sdk, the Vercel AI SDK, a load test through the openai package, and
// llama.cpp's web UI inside the pager page in a headless browser. Where answers are compared,
// the same script runs against stock llama-server on the same file with the same flags and
// must get the same answers (text, tool calls, finish reasons, token counts: not ids or times).
#include "serve_process.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace epq;
using namespace epq::test;

namespace {

std::string model() {
    return synth_model("tiny-qwen3moe", tiny("qwen3moe"));
}

const std::string kClients = std::string(EPQ_SOURCE_DIR) + "/tests/clients";

// The npm package a script needs, as `npm ci` installs it from the lockfile.
::testing::AssertionResult installed(const std::string & package) {
    if (access((kClients + "/node_modules/" + package + "/package.json").c_str(), R_OK) == 0) {
        return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << package << " is not installed: run (cd tests/clients && npm ci)";
}

// `node tests/clients/SCRIPT ARGS...`, bounded (a hung client must not hold the test until
// ctest's own timeout), its output printed: what it compared and counted.
CommandResult node(const std::string & script, const std::vector<std::string> & args,
                   const std::vector<std::string> & env = {}) {
    std::vector<std::string> cmd = {"env"};
    cmd.insert(cmd.end(), env.begin(), env.end());
    cmd.insert(cmd.end(), {"timeout", "300", "node", kClients + "/" + script});
    cmd.insert(cmd.end(), args.begin(), args.end());
    const CommandResult r = run_command(cmd);
    std::printf("%s", r.out.c_str());
    return r;
}

// Both servers' flags where tools matter: Qwen3's real chat template, which has them.
std::vector<std::string> with_tools(std::vector<std::string> flags) {
    flags.insert(flags.end(), {"--chat-template-file", llama_template("Qwen-Qwen3-0.6B.jinja")});
    return flags;
}

// epq's own flags on top: an arena of a third of the experts, so that requests read experts, with
// the weights held as stock's default flags hold them (the arena would choose the file's layout).
std::vector<std::string> with_arena(std::vector<std::string> flags) {
    flags.insert(flags.end(), {"--arena", "6M", "--repack"});
    return flags;
}

}  // namespace

// The openai package: chat streamed and not, tools (required and auto), json_schema, the
// Responses API streamed and not, legacy completions, the prompt cache, typed errors, an abort
// that frees its slot; the same answers as stock.
TEST(ServeClients, OpenAI) {
    ASSERT_TRUE(installed("openai"));
    const auto flags = with_tools({"-np", "2", "-c", "4096"});
    ServeProcess paged(model(), with_arena(flags));
    ServeProcess stock(model(), flags, Server::stock);
    const auto r = node("openai_client.mjs", {paged.url(), stock.url()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(paged.stop(), 0) << paged.log();
}

// The openai package's own retry: llama-server answers 503 while its model loads, and a client
// that asks then is served once it is ready. The script starts the server itself, to be there
// before the model is; stock behaves the same.
TEST(ServeClients, OpenAIRetriesWhileTheModelLoads) {
    ASSERT_TRUE(installed("openai"));
    const std::vector<std::string> flags = {"-m", model(), "--host", "127.0.0.1", "-t", "2", "-np", "1", "-c", "1024"};
    std::vector<std::string> ours = {EPQ_BINARY, "serve"};
    ours.insert(ours.end(), flags.begin(), flags.end());
    const auto r = node("openai_retry.mjs", ours);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::vector<std::string> stock = {EPQ_LLAMA_SERVER_BINARY};
    stock.insert(stock.end(), flags.begin(), flags.end());
    const auto s = node("openai_retry.mjs", stock);
    EXPECT_EQ(s.exit_code, 0) << "stock llama-server: " << s.out << s.err;
}

// @anthropic-ai/sdk on the Messages API: a message, the SDK's stream helper and raw events, a
// tool it must use, a token count; the same answers as stock.
TEST(ServeClients, Anthropic) {
    ASSERT_TRUE(installed("@anthropic-ai/sdk"));
    const auto flags = with_tools({"-np", "2", "-c", "4096"});
    ServeProcess paged(model(), with_arena(flags));
    ServeProcess stock(model(), flags, Server::stock);
    const auto r = node("anthropic.mjs", {paged.url(), stock.url()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(paged.stop(), 0) << paged.log();
}

// The Vercel AI SDK through @ai-sdk/openai-compatible: generateText with a required tool call,
// the same through streamText, a conversation holding a call and its result, a streamed story;
// the same answers as stock.
TEST(ServeClients, VercelAI) {
    ASSERT_TRUE(installed("ai"));
    ASSERT_TRUE(installed("@ai-sdk/openai-compatible"));
    const auto flags = with_tools({"-np", "2", "-c", "4096"});
    ServeProcess paged(model(), with_arena(flags));
    ServeProcess stock(model(), flags, Server::stock);
    const auto r = node("vercel_ai.mjs", {paged.url(), stock.url()});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(paged.stop(), 0) << paged.log();
}

// A short run of the loopback load test (scripts/serve_load.sh runs the long one): 16 clients
// for 10 s with mixed routes, prompt lengths, streams and aborts; every request accounted for,
// the server's counters agree, nothing is left in it, and it exits cleanly.
TEST(ServeClients, LoadTestAccountsForEveryRequest) {
    ASSERT_TRUE(installed("openai"));
    ServeProcess paged(model(), with_arena({"-np", "4", "-c", "8192", "--metrics"}));
    const auto r = node("load.mjs", {paged.url(), "10", "16"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(paged.stop(), 0) << paged.log();
}

// The pager page in a real browser (Debian's chromium, driven headless by puppeteer-core):
// llama.cpp's web UI in its frame streams a reply and stops another, while the pager panel
// follows the server's counters; stock's own UI shows the same reply.
TEST(ServeClients, PagerPageAndLlamaCppsWebUiInAHeadlessBrowser) {
    const std::string chromium = "/usr/bin/chromium";
    if (access(chromium.c_str(), X_OK) != 0) {
        GTEST_SKIP() << "chromium is not installed, so the page was not tried in a browser: "
                        "apt-get install chromium (scripts/test.sh installs it when run as root)";
    }
    ASSERT_TRUE(installed("puppeteer-core"));
    const std::vector<std::string> flags = {"-np", "1", "-c", "4096"};
    ServeProcess paged(model(), with_arena(flags));
    ServeProcess stock(model(), flags, Server::stock);
    // EPQ_PAGE_SHOTS=DIR keeps the screenshots there, to look at them.
    const char * keep = std::getenv("EPQ_PAGE_SHOTS");
    const std::string shots = keep && *keep ? keep : temp_dir() + "/page-shots";
    ASSERT_EQ(run_command({"mkdir", "-p", shots}).exit_code, 0);
    const auto r = node("page.mjs", {paged.url(), stock.url()}, {"CHROMIUM=" + chromium, "PAGE_SHOTS=" + shots});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(paged.stop(), 0) << paged.log();
}
