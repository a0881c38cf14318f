// A model split across machines with llama.cpp's RPC backend: `--rpc HOST:PORT -ngl N` puts the
// last N layers (the output layer counts as one) on a ggml-rpc-server, where they keep their
// routed experts; the pager pages the experts of the layers left on this machine. Each case runs
// llama.cpp's own ggml-rpc-server (built from the same tree) on 127.0.0.1 and compares logits
// byte for byte with stock llama.cpp given the same server and split.
//
// The server computes on its CPU with the same kernels, so identical logits alone would not show
// that the remote layers' experts stayed remote: the cases also check that the pager holds the
// local layers' experts only (its index and the bytes llama.cpp placed in its buffer).
#include "gate_model.h"
#include "rpc_server.h"
#include "test_util.h"

#include "backend/pager_device.h"
#include "engine/llama_log.h"
#include "engine/llama_session.h"
#include "engine/model_devices.h"
#include "engine/weight_layout.h"
#include "gguf/expert_index.h"
#include "synth/arch_fixture.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <map>
#include <regex>

using namespace epq;
using namespace epq::test;

namespace {

struct RpcCase {
    std::string name;   // test name
    std::string arch;   // GGUF architecture
    std::string quant;  // "" for an arch fixture (llama.cpp's own shapes, the fixture's types)
};

void PrintTo(const RpcCase & c, std::ostream * os) {
    *os << c.name;
}

std::string model_for(const RpcCase & c) {
    if (!c.quant.empty()) {
        return synth_model("rpc-" + c.name, tiny(c.arch, c.quant));
    }
    const std::string path = temp_dir() + "/rpc-" + c.name + ".gguf";
    write_arch_fixture(c.arch, path, ArchFixtureOptions{});
    return path;
}

// The cases below compare with stock llama.cpp on the CPU beside the server. A visible GPU would
// take a share of the layers (with op offload on stock's side): GpuHybridRpc covers that split.
#define REQUIRE_NO_LOCAL_GPU()                                                                           \
    do {                                                                                                 \
        if (local_gpu_visible()) {                                                                       \
            GTEST_SKIP() << "a local GPU is visible: these cases split between the server and the CPU; " \
                         << "GpuHybridRpc covers a server beside a GPU";                                 \
        }                                                                                                \
    } while (0)

uint64_t stack_bytes(const GgufFile & file, const ExpertIndex & local) {
    uint64_t n = 0;
    for (const auto & l : local.layers) {
        for (const auto & t : l.tensors) {
            n += file.find_tensor(t.name)->nbytes;
        }
    }
    return n;
}

}  // namespace

class RpcSplit : public ::testing::TestWithParam<RpcCase> {};

// The last layers and the output layer on the server (-ngl: half the blocks and the output
// layer), at prompt batches of 8 and 64 tokens and decode; the pager at its minimum arena and at
// one that holds every local expert; weights repacked (stock's default flags) and in the file's
// layout (stock -nr).
TEST_P(RpcSplit, RemoteLayersKeepTheirExpertsAndLogitsMatchStock) {
    REQUIRE_NO_LOCAL_GPU();
    const RpcCase & c = GetParam();
    const std::string endpoint = rpc_endpoint();
    const std::string model = model_for(c);
    const GgufFile file = GgufFile::open(model);
    const ExpertIndex all = ExpertIndex::build(file);
    const int n_layer = static_cast<int>(all.n_layer);
    const int ngl = n_layer / 2 + 1;  // blocks n_layer - n_layer/2 .. n_layer - 1, and the output layer
    const std::string prompt = prompt_of(360);
    for (const bool repack : {true, false}) {
        const std::string what = c.name + ", --rpc, -ngl " + std::to_string(ngl) + (repack ? "" : ", -nr");
        std::map<uint32_t, GateRun> stock;
        {
            GateConfig sc;
            sc.n_gpu_layers = ngl;
            sc.tensor_split = {1.0f};  // all on the first server, however many are registered
            sc.repack = repack;
            GateModel m(model, sc);
            for (const uint32_t b : {8u, 64u}) {
                stock[b] = m.run(prompt, 3, b);
                ASSERT_GT(stock[b].n_prompt, 64) << what << ": the prompt is too short for a 64-token batch";
                ASSERT_EQ(stock[b].n_generated, 3) << what << ": stock stopped early";
            }
        }
        for (const uint64_t arena : {all.min_arena_bytes, 2 * all.expert_bytes}) {
            GateConfig pc;
            pc.paged = true;
            pc.arena = arena;
            pc.n_gpu_layers = ngl;
            pc.tensor_split = {1.0f};
            pc.repack = repack;
            GateModel m(model, pc);
            const ExpertIndex & local = m.paged()->index();
            ASSERT_TRUE(m.paged()->placement().any_remote()) << what << ": no layer placed on the server";
            ASSERT_FALSE(local.layers.empty());
            for (const auto & l : all.layers) {
                const bool remote = l.layer >= n_layer + 1 - ngl;
                EXPECT_EQ(local.layer(l.layer) == nullptr, remote)
                    << what << ": layer " << l.layer << (remote ? " is on the server but paged" : " is not paged");
            }
            // llama.cpp put exactly the local layers' expert stacks in the pager's buffer (plus
            // alignment): the remote ones went to the server with their layers.
            const uint64_t want = stack_bytes(file, local);
            EXPECT_GE(pager_buffer_bytes(), want) << what;
            EXPECT_LE(pager_buffer_bytes(), want + 4096 * 3 * local.layers.size()) << what;
            EXPECT_LT(want, all.expert_bytes) << what;
            for (const uint32_t b : {8u, 64u}) {
                const GateRun paged = m.run(prompt, 3, b);
                EXPECT_TRUE(paged.logits == stock[b].logits)
                    << what << ", batch " << b << ", arena " << arena << " B: paged logits differ from "
                    << stock_configuration(repack, false, true);
                EXPECT_GT(paged.after.expert_lookups, paged.before.expert_lookups)
                    << what << ": the pager computed no expert";
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Rpc, RpcSplit,
    ::testing::Values(RpcCase{"qwen3moe_q4_K", "qwen3moe", "q4_K"}, RpcCase{"olmoe_q8_0", "olmoe", "q8_0"},
                      RpcCase{"gpt_oss", "gpt-oss", ""},       // MXFP4, expert biases
                      RpcCase{"llama4", "llama4", ""},         // shared expert, interleaved no-rope layers
                      RpcCase{"qwen35moe", "qwen35moe", ""}),  // recurrent layers
    [](const auto & p) { return p.param.name; });

// End to end through the epq binary: the load line says which layers went where, the logits are
// stock's with the same flags, and what cannot work fails with a message that says what to do.
TEST(RpcRun, TheCommandSplitsAcrossTheServerAsStockDoes) {
    REQUIRE_NO_LOCAL_GPU();
    const std::string endpoint = rpc_endpoint();
    const std::string model = synth_model("rpc-qwen3moe_q4_K", tiny("qwen3moe", "q4_K"));
    const LoggedRun paged = run_logged(model, prompt_of(200), "4", {"--rpc", endpoint, "-ngl", "2"}, "rpc-paged");
    ASSERT_EQ(paged.result.exit_code, 0) << paged.result.err;
    EXPECT_NE(paged.result.err.find("layer 3 and the output layer on RPC0 (" + endpoint +
                                    "): their tensors, experts included, stay there"),
              std::string::npos)
        << paged.result.err;
    EXPECT_NE(paged.result.err.find("and the same --rpc, -ngl and --tensor-split"), std::string::npos)
        << paged.result.err;
    const LoggedRun stock =
        run_logged(model, prompt_of(200), "4", {"--rpc", endpoint, "-ngl", "2", "--no-pager"}, "rpc-stock");
    ASSERT_EQ(stock.result.exit_code, 0) << stock.result.err;
    EXPECT_TRUE(paged.logits == stock.logits) << "epq run --rpc differs from --no-pager with the same flags";

    const CommandResult everything = run_epq({"run", "-m", model, "-p", "Hi", "-n", "1", "--rpc", endpoint});
    EXPECT_NE(everything.exit_code, 0);
    EXPECT_NE(everything.err.find("every layer with experts is on the RPC servers"), std::string::npos)
        << everything.err;

    const CommandResult down = run_epq(
        {"run", "-m", model, "-p", "Hi", "-n", "1", "-ngl", "1", "--rpc", "127.0.0.1:" + std::to_string(free_port())});
    EXPECT_NE(down.exit_code, 0);
    EXPECT_NE(down.err.find("cannot reach an RPC server there (Connection refused); start llama.cpp's ggml-rpc-server"),
              std::string::npos)
        << down.err;
    const CommandResult bad = run_epq({"serve", "-m", model, "--rpc", "localhost"});
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_NE(bad.err.find("--rpc localhost: expected HOST:PORT"), std::string::npos) << bad.err;
}

namespace {

std::string g_llama_log;
void collect_log(ggml_log_level, const char * text, void *) {
    g_llama_log += text;
}

// llama.cpp's own record of where each layer went ("load_tensors: layer 3 assigned to device
// RPC0, ..." at debug level): device name per layer 0..n_layer (the output layer last).
std::vector<std::string> llama_placement(const std::string & model, int ngl, const std::vector<float> & split,
                                         int n_layer) {
    SessionOptions so;
    so.n_gpu_layers = ngl;
    so.tensor_split = split;
    g_llama_log.clear();
    llama_log_set(collect_log, nullptr);
    { LlamaSession s(model, so); }
    set_llama_verbosity(false);
    std::vector<std::string> out(static_cast<size_t>(n_layer) + 1);
    static const std::regex line(R"(layer +(\d+) assigned to device ([A-Za-z0-9_]+))");
    for (std::sregex_iterator it(g_llama_log.begin(), g_llama_log.end(), line), end; it != end; ++it) {
        const size_t il = std::stoul((*it)[1].str());
        if (il < out.size()) {
            out[il] = (*it)[2].str();
        }
    }
    return out;
}

}  // namespace

// The pager must know before the load which layers llama.cpp will send to the servers. With two
// servers and several -ngl and --tensor-split values, the predicted device of every layer is the
// one llama.cpp's loader reports for it.
TEST(RpcPlacement, PredictedLayerSplitIsLlamaCppsOwn) {
    REQUIRE_NO_LOCAL_GPU();
    static RpcServer second;
    const std::string first = rpc_endpoint();
    add_rpc_servers(second.endpoint());
    const std::string model = synth_model("rpc-qwen3moe_q4_K", tiny("qwen3moe", "q4_K"));
    const int n_layer = static_cast<int>(ExpertIndex::build(GgufFile::open(model)).n_layer);
    int compared = 0;
    for (const int ngl : {-1, 2, 3}) {
        for (const std::vector<float> & split : std::vector<std::vector<float>>{{3, 1}, {1, 1}, {1, 3}, {0, 1}}) {
            const LayerPlacement p = place_layers(n_layer, ngl, split);
            ASSERT_EQ(p.devices.size(), 2u) << "the two servers are not the model's devices";
            const std::vector<std::string> actual = llama_placement(model, ngl, split, n_layer);
            for (int il = 0; il <= n_layer; ++il) {
                const int d = p.device_of_layer[static_cast<size_t>(il)];
                const std::string predicted =
                    d == kCpuLayer ? "CPU" : ggml_backend_dev_name(p.devices[static_cast<size_t>(d)].dev);
                EXPECT_EQ(predicted, actual[static_cast<size_t>(il)])
                    << "-ngl " << ngl << ", -ts " << split[0] << "," << split[1] << ": layer " << il;
                ++compared;
            }
        }
    }
    EXPECT_EQ(compared, 3 * 4 * (n_layer + 1));
}
