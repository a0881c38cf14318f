// The pager beside other ggml devices. With -ngl, llama.cpp puts attention, norms, routers and
// the dense weights of those layers on a GPU while every routed expert stays with the pager,
// paged and computed on the CPU: stock llama.cpp's `-ngl N --cpu-moe` with experts bounded by the
// arena instead of mmap. Each case compares logits byte for byte with stock built from the same
// tree and run with the same split and --cpu-moe, with op offload off on both sides (stock
// would otherwise copy its CPU experts to the GPU for large batches; the pager's hold no bytes
// to copy).
//
// In a build with a GPU backend (scripts/setup.sh --vulkan) the tests need a device: Mesa's
// software Vulkan device (lavapipe, Debian's mesa-vulkan-drivers) does, made visible with
// GGML_VK_VISIBLE_DEVICES=0 (ggml's Vulkan backend skips CPU devices otherwise). A build without
// one skips them and says why.
#include "gate_model.h"
#include "rpc_server.h"
#include "test_util.h"

#include "engine/llama_session.h"
#include "engine/model_devices.h"
#include "engine/weight_layout.h"
#include "gguf/expert_index.h"
#include "synth/arch_fixture.h"

#include "ggml-backend.h"

#include <gtest/gtest.h>
#include <map>
#include <set>
#include <unistd.h>

using namespace epq;
using namespace epq::test;

namespace {

// Skips (a build without a GPU backend) or fails (one whose device is missing) unless a GPU
// device is visible.
#define REQUIRE_GPU()                                                                                       \
    do {                                                                                                    \
        if (!local_gpu_visible()) {                                                                         \
            if (EPQ_GPU_BACKEND[0] == '\0') {                                                               \
                GTEST_SKIP() << "built without a GPU backend: scripts/setup.sh --vulkan builds one";        \
            }                                                                                               \
            FAIL() << "built with " << EPQ_GPU_BACKEND << " but no device is visible: for Mesa's software " \
                   << "device install mesa-vulkan-drivers and set GGML_VK_VISIBLE_DEVICES=0";               \
        }                                                                                                   \
    } while (0)

// The cases that split between the CPU and the GPU alone. ggml cannot unregister a device, so
// after a test in the same process registered an RPC server (GpuHybridRpc), llama.cpp would
// split the layers over it too. ctest runs each test in a process of its own.
#define REQUIRE_NO_RPC_SERVER()                                                                         \
    do {                                                                                                \
        for (const ModelDevice & d : model_devices()) {                                                 \
            if (d.remote) {                                                                             \
                GTEST_SKIP() << "an earlier test in this process registered an RPC server, which ggml " \
                             << "cannot unregister; run this test on its own (ctest does)";             \
            }                                                                                           \
        }                                                                                               \
    } while (0)

struct HybridCase {
    std::string name;   // test name
    std::string arch;   // GGUF architecture
    std::string quant;  // "" for an arch fixture (llama.cpp's own shapes, the fixture's types)
    // Also the split with the first block on the CPU, and the repacked layout (against stock's
    // --no-host): the software device is slow, so one case goes deep and the others go wide.
    bool deep = false;
};

void PrintTo(const HybridCase & c, std::ostream * os) {
    *os << c.name;
}

std::vector<HybridCase> hybrid_cases() {
    return {
        {"qwen3moe_q4_K", "qwen3moe", "q4_K", true},  // a type ggml repacks on x86
        {"qwen3moe_q8_0", "qwen3moe", "q8_0"},
        {"olmoe_q4_0", "olmoe", "q4_0"},
        {"gpt_oss", "gpt-oss", ""},      // MXFP4 experts, biases, its own activation
        {"deepseek2", "deepseek2", ""},  // shared experts, sigmoid routing with a bias
        {"qwen35moe", "qwen35moe", ""},  // recurrent layers beside attention
    };
}

std::string model_for(const HybridCase & c) {
    if (!c.quant.empty()) {
        SynthConfig cfg = tiny(c.arch, c.quant);
        cfg.shape.n_layer = 2;
        return synth_model("device-" + c.name, cfg);
    }
    const std::string path = temp_dir() + "/device-" + c.name + ".gguf";
    write_arch_fixture(c.arch, path, ArchFixtureOptions{});
    return path;
}

}  // namespace

class GpuHybrid : public ::testing::TestWithParam<HybridCase> {};

// Every layer on the GPU (and, for the deep case, every layer but the first block), at prompt
// batches of 8 and 64 tokens (below and above the 32 rows where ggml's CPU kernels change) and
// decode; the pager at its minimum arena (constant eviction) and at one that holds every expert.
// The layout is the one epq chooses beside a GPU, the file's, against stock's default flags with
// --cpu-moe; the deep case also holds experts repacked (--repack) against stock --no-host.
TEST_P(GpuHybrid, LayersOnTheGpuWithPagedExpertsMatchStockCpuMoe) {
    REQUIRE_GPU();
    REQUIRE_NO_RPC_SERVER();
    const HybridCase & c = GetParam();
    const std::string model = model_for(c);
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const std::string prompt = prompt_of(360);  // 70-90 tokens: one full 64-token batch
    const int all = static_cast<int>(idx.n_layer) + 1;
    const std::vector<int> splits = c.deep ? std::vector<int>{all, all - 1} : std::vector<int>{all};
    const std::vector<bool> repacks = c.deep ? std::vector<bool>{false, true} : std::vector<bool>{false};
    for (const int ngl : splits) {
        for (const bool repack : repacks) {
            const std::string what = c.name + ", -ngl " + std::to_string(ngl) + (repack ? ", --repack" : "");
            std::map<uint32_t, GateRun> stock;
            {
                GateConfig sc;
                sc.n_gpu_layers = ngl;
                sc.cpu_moe = true;
                sc.op_offload = false;
                sc.no_host = repack;
                GateModel m(model, sc);
                for (const uint32_t b : {8u, 64u}) {
                    stock[b] = m.run(prompt, 3, b);
                    ASSERT_GT(stock[b].n_prompt, 64) << what << ": the prompt is too short for a 64-token batch";
                    ASSERT_EQ(stock[b].n_generated, 3) << what << ": stock stopped early";
                }
            }
            for (const uint64_t arena : {idx.min_arena_bytes, 2 * idx.expert_bytes}) {
                GateConfig pc;
                pc.paged = true;
                pc.arena = arena;
                pc.n_gpu_layers = ngl;  // op offload: off beside a GPU (PagedModel::configure)
                pc.auto_layout = !repack;
                pc.repack = repack;
                GateModel m(model, pc);
                ASSERT_TRUE(m.paged()->gpu_host()) << "the GPU's host buffer was not seen";
                EXPECT_EQ(m.paged()->repack(), repack) << what;
                for (const uint32_t b : {8u, 64u}) {
                    const GateRun paged = m.run(prompt, 3, b);
                    EXPECT_TRUE(paged.logits == stock[b].logits)
                        << what << ", batch " << b << ", arena " << arena << " B: paged logits differ from "
                        << stock_configuration(repack, true);
                    EXPECT_GT(paged.after.expert_lookups, paged.before.expert_lookups)
                        << what << ": the pager computed no expert";
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Devices, GpuHybrid, ::testing::ValuesIn(hybrid_cases()),
                         [](const auto & p) { return p.param.name; });

// The placement says where layers went and that the experts stayed with the pager.
TEST(GpuHybridRun, TheLoadLineSaysWhereLayersAndExpertsAre) {
    REQUIRE_GPU();
    REQUIRE_NO_RPC_SERVER();
    SynthConfig cfg = tiny("qwen3moe", "q4_K");
    cfg.shape.n_layer = 2;
    const std::string model = synth_model("device-qwen3moe_q4_K", cfg);
    const CommandResult r = run_epq({"run", "-m", model, "-p", "Hello", "-n", "2", "-ngl", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("2 of 3 layers (with the output layer) on "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("routed experts with the pager, computed on the CPU"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("output identical to stock llama.cpp with --cpu-moe --no-op-offload (and the same -ngl)"),
              std::string::npos)
        << r.err;
}

// llama.cpp copies a GPU layer's weights into device memory at load and never reads their file
// pages again, so the pager's dense lock (which keeps the CPU's dense weights in RAM under a
// memory cap) must leave them out: locked, they would sit in RAM beside the device's copy, which
// on an integrated or software device is RAM too, and the arena sized for the cap would overflow
// it. -ngl 2 of 3: block 0 on the CPU, block 1 and the output layer on the GPU.
TEST(GpuHybridRun, AGpuLayersWeightsAreNotAlsoLockedInRam) {
    REQUIRE_GPU();
    REQUIRE_NO_RPC_SERVER();
    if (geteuid() != 0) {
        GTEST_SKIP() << "not root: the locked-memory limit, not the placement, decides what is locked";
    }
    SynthConfig cfg = tiny("qwen3moe", "q4_K");
    cfg.shape.n_layer = 2;
    const std::string model = synth_model("device-qwen3moe_q4_K", cfg);
    const GgufFile file = GgufFile::open(model);
    const ExpertIndex idx = ExpertIndex::build(file);
    std::set<std::string> experts;
    for (const auto & l : idx.layers) {
        for (const auto & t : l.tensors) {
            experts.insert(t.name);
        }
    }
    uint64_t cpu_dense = 0, gpu_dense = 0, cpu_tensors = 0;
    for (const auto & t : file.tensors()) {
        if (experts.count(t.name) != 0) {
            continue;
        }
        const int il = placed_layer(t.name, idx.n_layer);
        (il >= 1 ? gpu_dense : cpu_dense) += t.nbytes;
        cpu_tensors += il >= 1 ? 0 : 1;
    }
    // Locked: everything but the experts and the GPU layers (the CPU's dense weights, and the
    // header, whose vocabulary every run reads), each range rounded out to whole pages.
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t rounding = 2 * page * (cpu_tensors + 1);
    const uint64_t not_on_gpu = file.file_size() - idx.expert_bytes - gpu_dense;
    ASSERT_GT(gpu_dense, rounding) << "the GPU layers are too small for the bound below to tell";

    const LoggedRun r = run_logged(model, "Hello", "2", {"-ngl", "2"}, "device-lock");
    ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
    const uint64_t locked = r.stats["dense_locked_bytes"];
    EXPECT_GE(locked, cpu_dense) << "the CPU layers' dense weights are not all locked";
    EXPECT_LE(locked, not_on_gpu + rounding)
        << "the GPU layers' weights (" << gpu_dense << " B) are locked in RAM as well";
}

// A split over an RPC server and the GPU beside the pager: every layer on a device, half to each
// (--tensor-split 1,1). RPC servers come first in llama.cpp's device order, so the first layers
// go to the server, with their experts, and the last to the GPU, with their experts paged on the
// CPU. The matching stock run has the same split, --no-op-offload, and only the GPU layers'
// routed experts on the CPU (-ot): its --cpu-moe would take the server's too.
TEST(GpuHybridRpc, ServerAndGpuLayersMatchStockWithTheSameSplit) {
    REQUIRE_GPU();
    const std::string endpoint = rpc_endpoint();
    SynthConfig cfg = tiny("qwen3moe", "q4_K");
    const std::string model = synth_model("device-rpc-qwen3moe_q4_K", cfg);
    const ExpertIndex all = ExpertIndex::build(GgufFile::open(model));
    const std::string prompt = prompt_of(360);
    std::map<std::pair<uint64_t, uint32_t>, GateRun> paged;
    std::string local;
    for (const uint64_t arena : {all.min_arena_bytes, 2 * all.expert_bytes}) {
        GateConfig pc;
        pc.paged = true;
        pc.arena = arena;
        pc.tensor_split = {1.0f, 1.0f};
        pc.auto_layout = true;
        GateModel m(model, pc);
        const LayerPlacement & p = m.paged()->placement();
        ASSERT_EQ(p.devices.size(), 2u) << "expected the server and the GPU";
        ASSERT_TRUE(p.devices[0].remote && !p.devices[1].remote);
        ASSERT_TRUE(p.any_remote());
        ASSERT_FALSE(m.paged()->index().layers.empty()) << "no layer left on the GPU";
        ASSERT_LT(m.paged()->index().layers.size(), all.layers.size()) << "no layer on the server";
        local.clear();
        for (const auto & l : m.paged()->index().layers) {
            local += (local.empty() ? "" : "|") + std::to_string(l.layer);
        }
        for (const uint32_t b : {8u, 64u}) {
            const GateRun & r = paged[std::make_pair(arena, b)] = m.run(prompt, 3, b);
            EXPECT_GT(r.after.expert_lookups, r.before.expert_lookups) << "the pager computed no expert";
        }
    }
    GateConfig sc;
    sc.tensor_split = {1.0f, 1.0f};
    sc.op_offload = false;
    // llama.cpp's --cpu-moe pattern (LLM_FFN_EXPS_REGEX), for the GPU's layers only.
    sc.cpu_pattern = "^blk\\.(" + local + ")\\.ffn_(up|down|gate|gate_up)_(ch|)exps";
    GateModel stock(model, sc);
    for (const uint32_t b : {8u, 64u}) {
        const GateRun s = stock.run(prompt, 3, b);
        ASSERT_EQ(s.n_generated, 3);
        for (const uint64_t arena : {all.min_arena_bytes, 2 * all.expert_bytes}) {
            EXPECT_TRUE(paged[std::make_pair(arena, b)].logits == s.logits)
                << "--rpc " << endpoint << " -ts 1,1, batch " << b << ", arena " << arena
                << " B: paged logits differ from " << stock_configuration(false, true, true);
        }
    }
}
