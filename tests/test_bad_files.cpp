// Every kind of bad model file gets one clear line and a non-zero exit, from the library and
// from the command line. The test crafts each file itself.
#include "test_util.h"

#include "gguf/expert_index.h"
#include "util/error.h"

#include "gguf.h"

#include <algorithm>
#include <cstring>
#include <gtest/gtest.h>

using namespace epq;
using namespace epq::test;

namespace {

// A small valid GGUF made with ggml's writer: `arch` metadata and the given 3-D/2-D tensors.
struct TensorDef {
    std::string name;
    std::vector<int64_t> ne;
    ggml_type type = GGML_TYPE_F32;
};

std::string write_gguf(const std::string & name, const std::string & arch, const std::vector<TensorDef> & tensors,
                       int expert_count, int expert_used) {
    gguf_context * g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", arch.c_str());
    gguf_set_val_u32(g, (arch + ".block_count").c_str(), 2);
    if (expert_count >= 0) {
        gguf_set_val_u32(g, (arch + ".expert_count").c_str(), static_cast<uint32_t>(expert_count));
    }
    if (expert_used >= 0) {
        gguf_set_val_u32(g, (arch + ".expert_used_count").c_str(), static_cast<uint32_t>(expert_used));
    }
    ggml_init_params ip{64 * 1024 * 1024, nullptr, false};
    ggml_context * ctx = ggml_init(ip);
    for (const auto & d : tensors) {
        ggml_tensor * t = ggml_new_tensor(ctx, d.type, static_cast<int>(d.ne.size()), d.ne.data());
        ggml_set_name(t, d.name.c_str());
        std::memset(t->data, 0x11, ggml_nbytes(t));
        gguf_add_tensor(g, t);
    }
    const std::string path = temp_dir() + "/" + name + ".gguf";
    EXPECT_TRUE(gguf_write_to_file(g, path.c_str(), false));
    gguf_free(g);
    ggml_free(ctx);
    return path;
}

std::vector<TensorDef> moe_tensors(int n_expert) {
    std::vector<TensorDef> t;
    for (int il = 0; il < 2; ++il) {
        const std::string b = "blk." + std::to_string(il) + ".";
        t.push_back({b + "attn_q.weight", {64, 64}});
        t.push_back({b + "ffn_gate_exps.weight", {64, 32, n_expert}});
        t.push_back({b + "ffn_up_exps.weight", {64, 32, n_expert}});
        t.push_back({b + "ffn_down_exps.weight", {32, 64, n_expert}});
    }
    return t;
}

// Offset of tensor `name`'s info record (just past its name) in the header bytes.
size_t tensor_info_offset(const std::vector<uint8_t> & bytes, const std::string & name) {
    std::vector<uint8_t> needle(8 + name.size());
    const uint64_t len = name.size();
    std::memcpy(needle.data(), &len, 8);
    std::memcpy(needle.data() + 8, name.data(), name.size());
    auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
    EXPECT_NE(it, bytes.end()) << name;
    return static_cast<size_t>(it - bytes.begin()) + needle.size();
}

std::string error_of(const std::string & path) {
    try {
        ExpertIndex::build(GgufFile::open(path));
    } catch (const Error & e) {
        return e.what();
    }
    return "";
}

// The command line gives the same verdict: exit 1, one line on stderr, nothing on stdout.
void expect_cli_error(const std::string & path, const std::string & fragment) {
    for (const std::string cmd : {"inspect", "run"}) {
        std::vector<std::string> args = {cmd, "-m", path};
        if (cmd == "run") {
            args.insert(args.end(), {"-p", "hi", "-n", "1"});
        }
        const CommandResult r = run_epq(args);
        EXPECT_EQ(r.exit_code, 1) << cmd << ": " << r.err;
        EXPECT_TRUE(r.out.empty()) << cmd;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << cmd << ": " << r.err;
        EXPECT_EQ(r.err.rfind("epq: error: ", 0), 0u) << r.err;
        EXPECT_NE(r.err.find(fragment), std::string::npos) << cmd << ": " << r.err;
    }
}

}  // namespace

TEST(BadFiles, ValidCraftedMoeFileIsAccepted) {
    // The control case: the crafting itself yields a readable MoE file.
    const std::string path = write_gguf("good", "qwen3moe", moe_tensors(8), 8, 2);
    EXPECT_EQ(error_of(path), "");
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(path));
    EXPECT_EQ(idx.layers.size(), 2u);
    EXPECT_EQ(idx.n_expert, 8u);
}

TEST(BadFiles, NotAGguf) {
    const std::string path = temp_dir() + "/text.gguf";
    const std::string text = "this is a text file, not a model\n";
    write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
    EXPECT_NE(error_of(path).find("is not a GGUF file"), std::string::npos) << error_of(path);
    expect_cli_error(path, "is not a GGUF file");

    const std::string empty = temp_dir() + "/empty.gguf";
    write_file(empty, {});
    EXPECT_NE(error_of(empty).find("only 0 bytes long"), std::string::npos) << error_of(empty);
    expect_cli_error(empty, "not a GGUF file");
}

TEST(BadFiles, MissingFile) {
    const std::string path = temp_dir() + "/does-not-exist.gguf";
    EXPECT_NE(error_of(path).find("No such file"), std::string::npos) << error_of(path);
    expect_cli_error(path, "cannot open model file");
}

TEST(BadFiles, TruncatedTensorData) {
    const std::string good = synth_model("tiny-olmoe", tiny("olmoe"));
    auto bytes = read_file(good);
    bytes.resize(bytes.size() * 6 / 10);
    const std::string path = temp_dir() + "/truncated.gguf";
    write_file(path, bytes);
    const std::string err = error_of(path);
    EXPECT_NE(err.find("truncated: tensor '"), std::string::npos) << err;
    EXPECT_NE(err.find("the file has only " + std::to_string(bytes.size()) + " bytes"), std::string::npos) << err;
    expect_cli_error(path, "truncated");
}

TEST(BadFiles, TruncatedHeader) {
    const std::string good = synth_model("tiny-olmoe", tiny("olmoe"));
    auto bytes = read_file(good);
    bytes.resize(4096);  // inside the tokenizer's metadata
    const std::string path = temp_dir() + "/header-cut.gguf";
    write_file(path, bytes);
    EXPECT_NE(error_of(path).find("corrupt or truncated GGUF header"), std::string::npos) << error_of(path);
    expect_cli_error(path, "corrupt or truncated GGUF header");
}

TEST(BadFiles, TensorSizeDisagreesWithTypeAndShape) {
    const std::string good = write_gguf("to-grow", "qwen3moe", moe_tensors(8), 8, 2);
    auto bytes = read_file(good);
    // blk.0.attn_q.weight: n_dims (u32), ne[0], ne[1] (i64): claim 128 rows instead of 64.
    const size_t at = tensor_info_offset(bytes, "blk.0.attn_q.weight");
    int64_t ne1 = 0;
    std::memcpy(&ne1, bytes.data() + at + 4 + 8, 8);
    ASSERT_EQ(ne1, 64);
    ne1 = 128;
    std::memcpy(bytes.data() + at + 4 + 8, &ne1, 8);
    const std::string path = temp_dir() + "/size-mismatch.gguf";
    write_file(path, bytes);
    const std::string err = error_of(path);
    EXPECT_NE(err.find("byte sizes disagree with their types and shapes"), std::string::npos) << err;
    EXPECT_NE(err.find("blk.0.ffn_gate_exps.weight"), std::string::npos) << err;
    expect_cli_error(path, "disagree");
}

TEST(BadFiles, UnknownTensorType) {
    const std::string good = write_gguf("to-retype", "qwen3moe", moe_tensors(8), 8, 2);
    auto bytes = read_file(good);
    // 3-D tensor: n_dims (u32) + 3 x i64, then the type (u32).
    const size_t at = tensor_info_offset(bytes, "blk.1.ffn_up_exps.weight");
    uint32_t type = 99;
    std::memcpy(&type, bytes.data() + at + 4 + 3 * 8, 4);
    ASSERT_EQ(type, static_cast<uint32_t>(GGML_TYPE_F32));
    type = 200;
    std::memcpy(bytes.data() + at + 4 + 3 * 8, &type, 4);
    const std::string path = temp_dir() + "/unknown-type.gguf";
    write_file(path, bytes);
    const std::string err = error_of(path);
    EXPECT_NE(err.find("tensor 'blk.1.ffn_up_exps.weight' has unknown tensor type 200"), std::string::npos) << err;
    expect_cli_error(path, "unknown tensor type 200");
}

TEST(BadFiles, NotAMoeModel) {
    const std::string path =
        write_gguf("dense", "llama", {{"blk.0.attn_q.weight", {64, 64}}, {"blk.0.ffn_up.weight", {64, 128}}}, -1, -1);
    const std::string err = error_of(path);
    EXPECT_NE(err.find("not a MoE model: nothing to page"), std::string::npos) << err;
    const CommandResult r = run_epq({"inspect", "-m", path});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("not a MoE model: nothing to page"), std::string::npos) << r.err;
    // `epq run` runs such a model through stock llama.cpp instead (this one is no real model, so
    // llama.cpp's loader refuses it after the notice); ArchGate runs real dense models.
    const CommandResult run = run_epq({"run", "-m", path, "-p", "hi", "-n", "1"});
    EXPECT_NE(run.err.find("no routed experts (not a MoE model): nothing to page"), std::string::npos) << run.err;
    EXPECT_EQ(run.exit_code, 1) << run.err;
}

TEST(BadFiles, ExpertCountDisagreesWithTensors) {
    const std::string path = write_gguf("count", "qwen3moe", moe_tensors(8), 16, 2);
    const std::string err = error_of(path);
    EXPECT_NE(err.find("holds 8 experts but qwen3moe.expert_count is 16"), std::string::npos) << err;
    expect_cli_error(path, "expert_count is 16");
}

TEST(BadFiles, MissingExpertUsedCount) {
    const std::string path = write_gguf("no-used", "qwen3moe", moe_tensors(8), 8, -1);
    const std::string err = error_of(path);
    EXPECT_NE(err.find("expert_used_count is missing"), std::string::npos) << err;
    expect_cli_error(path, "expert_used_count");
}

// Each input the fuzzer (tests/fuzz) found a crash or a wrong answer with, kept in its corpus:
// `epq inspect` names the problem and exits 1, in text and in JSON.
TEST(BadFiles, FuzzFindingsEndInOneClearError) {
    const std::string dir = std::string(EPQ_SOURCE_DIR) + "/tests/fuzz/corpus";
    const CommandResult ls = run_command({"bash", "-c", "ls '" + dir + "' | grep '^regress-'"});
    ASSERT_EQ(ls.exit_code, 0) << "no regress-* inputs in " << dir;
    size_t n = 0;
    for (size_t at = 0, end; (end = ls.out.find('\n', at)) != std::string::npos; at = end + 1) {
        const std::string path = dir + "/" + ls.out.substr(at, end - at);
        for (const bool json : {false, true}) {
            std::vector<std::string> args = {"inspect", path};
            if (json) {
                args.push_back("--json");
            }
            const CommandResult r = run_epq(args);
            EXPECT_EQ(r.exit_code, 1) << path << "\n" << r.out << r.err;
            EXPECT_NE(r.err.find("epq: error: "), std::string::npos) << path << "\n" << r.err;
            EXPECT_EQ(r.err.find("internal"), std::string::npos) << path << "\n" << r.err;
        }
        ++n;
    }
    EXPECT_GE(n, 7u);
}
