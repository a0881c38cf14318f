// epq synth: reproducible files, the requested shapes and types, llama.cpp's BOOL array.
#include "test_util.h"

#include "gguf/gguf_file.h"
#include "synth/model_layout.h"
#include "synth/tensor_filler.h"
#include "util/error.h"

#include "gguf.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace epq;
using namespace epq::test;

TEST(Synth, SameSeedGivesByteIdenticalFiles) {
    const SynthConfig cfg = tiny("qwen3moe", "mixed", 7);
    SynthOptions quiet;
    quiet.progress = false;
    const std::string a = temp_dir() + "/det-a.gguf", b = temp_dir() + "/det-b.gguf";
    synthesize(cfg, a, quiet);
    synthesize(cfg, b, quiet);
    const auto ba = read_file(a), bb = read_file(b);
    ASSERT_GT(ba.size(), 1000000u);
    EXPECT_TRUE(ba == bb) << "two runs with the same arguments differ";
}

TEST(Synth, DifferentSeedGivesDifferentWeights) {
    SynthOptions quiet;
    quiet.progress = false;
    const std::string a = temp_dir() + "/seed-1.gguf", b = temp_dir() + "/seed-2.gguf";
    synthesize(tiny("olmoe", "mixed", 1), a, quiet);
    synthesize(tiny("olmoe", "mixed", 2), b, quiet);
    const auto ba = read_file(a), bb = read_file(b);
    ASSERT_EQ(ba.size(), bb.size());
    // Compare the expert bytes of layer 0 only: the metadata records the seed as well.
    const GgufFile fa = GgufFile::open(a);
    const TensorInfo * t = fa.find_tensor("blk.0.ffn_gate_exps.weight");
    ASSERT_NE(t, nullptr);
    size_t same = 0;
    for (uint64_t i = t->file_offset; i < t->file_offset + t->nbytes; ++i) {
        same += ba[i] == bb[i];
    }
    EXPECT_LT(same, t->nbytes / 2) << "seeds 1 and 2 produced mostly the same expert bytes";
}

TEST(Synth, WritesTheRequestedShapeAndTypes) {
    SynthConfig cfg = tiny("qwen3moe", "q5_k");
    cfg.shape.n_layer = 3;
    cfg.shape.n_expert = 20;
    cfg.shape.n_expert_used = 3;
    cfg.shape.n_ff_exp = 512;
    cfg.quant.types["ffn_down_exps"] = GGML_TYPE_Q8_0;
    const GgufFile f = GgufFile::open(synth_model("shape-q5k", cfg));
    EXPECT_EQ(f.architecture(), "qwen3moe");
    EXPECT_EQ(f.get_int("qwen3moe.block_count"), 3);
    EXPECT_EQ(f.get_int("qwen3moe.expert_count"), 20);
    EXPECT_EQ(f.get_int("qwen3moe.expert_used_count"), 3);
    EXPECT_EQ(f.get_int("qwen3moe.expert_feed_forward_length"), 512);
    const TensorInfo * up = f.find_tensor("blk.2.ffn_up_exps.weight");
    const TensorInfo * down0 = f.find_tensor("blk.0.ffn_down_exps.weight");
    const TensorInfo * down2 = f.find_tensor("blk.2.ffn_down_exps.weight");
    ASSERT_TRUE(up && down0 && down2);
    EXPECT_EQ(up->type, GGML_TYPE_Q5_K);
    EXPECT_EQ(up->ne[0], 256);
    EXPECT_EQ(up->ne[1], 512);
    EXPECT_EQ(up->ne[2], 20);
    EXPECT_EQ(down0->type, GGML_TYPE_Q8_0);  // first half: the ffn_down_exps kind
    EXPECT_EQ(down2->type, GGML_TYPE_Q5_K);  // second half: ffn_down_exps_alt
    EXPECT_EQ(down0->ne[0], 512);
    EXPECT_EQ(down0->ne[1], 256);
}

TEST(Synth, EmbedsTheFamilysRealTokenizer) {
    const GgufFile f = GgufFile::open(synth_model("tiny-qwen35moe", tiny("qwen35moe")));
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen35");
    const int64_t id = gguf_find_key(f.ctx(), "tokenizer.ggml.tokens");
    ASSERT_GE(id, 0);
    EXPECT_EQ(gguf_get_arr_n(f.ctx(), id), 151936u);
    const TensorInfo * embd = f.find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->ne[1], 151936);
}

TEST(Synth, Qwen35RecurrentLayersIsABoolArray) {
    SynthConfig cfg = tiny("qwen35moe");
    cfg.shape.n_layer = 8;
    cfg.shape.full_attn_interval = 4;
    const GgufFile f = GgufFile::open(synth_model("qwen35-8layers", cfg));
    const int64_t id = gguf_find_key(f.ctx(), "qwen35moe.attention.recurrent_layers");
    ASSERT_GE(id, 0);
    ASSERT_EQ(gguf_get_kv_type(f.ctx(), id), GGUF_TYPE_ARRAY);
    ASSERT_EQ(gguf_get_arr_type(f.ctx(), id), GGUF_TYPE_BOOL);
    ASSERT_EQ(gguf_get_arr_n(f.ctx(), id), 8u);
    const auto * flags = static_cast<const int8_t *>(gguf_get_arr_data(f.ctx(), id));
    const int8_t expected[8] = {1, 1, 1, 0, 1, 1, 1, 0};
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(flags[i], expected[i]) << "layer " << i;
        // and the tensors follow the pattern: attention layers have attn_q, recurrent ones ssm_a
        EXPECT_EQ(f.find_tensor("blk." + std::to_string(i) + ".ssm_a") != nullptr, expected[i] == 1);
        EXPECT_EQ(f.find_tensor("blk." + std::to_string(i) + ".attn_q.weight") != nullptr, expected[i] == 0);
    }
}

TEST(Synth, PooledQuantizedWeightsHaveTheRequestedMagnitude) {
    // Dequantize what the filler produced for a large Q4_K tensor and check its spread.
    UnitPoolCache pools(3);
    const int64_t n_in = 1024, rows = 4096;
    const ValueDist dist{0.0f, 0.05f};
    TensorFiller filler(pools, GGML_TYPE_Q4_K, n_in, n_in * rows, dist, 11);
    std::vector<uint8_t> bytes(filler.nbytes());
    filler.fill(bytes.data(), bytes.size());
    std::vector<float> values(static_cast<size_t>(n_in * rows));
    ggml_get_type_traits(GGML_TYPE_Q4_K)->to_float(bytes.data(), values.data(), n_in * rows);
    double sum = 0, sq = 0;
    for (float v : values) {
        ASSERT_TRUE(std::isfinite(v));
        sum += v;
        sq += double(v) * v;
    }
    const double n = static_cast<double>(values.size());
    const double mean = sum / n;
    const double sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.005);
    EXPECT_NEAR(sd, 0.05, 0.01);
}

TEST(Synth, RejectsImpossibleShapes) {
    SynthConfig cfg = tiny("qwen3moe");
    cfg.shape.n_ff_exp = 200;  // Q6_K/Q4_K rows must be multiples of 256
    EXPECT_THROW(synthesize(cfg, temp_dir() + "/bad.gguf"), Error);
    SynthConfig olmoe = tiny("olmoe");
    olmoe.shape.n_head_kv = 2;
    EXPECT_THROW(synthesize(olmoe, temp_dir() + "/bad2.gguf"), Error);
    EXPECT_THROW(make_preset("no-such-preset"), Error);
    EXPECT_THROW(make_quant_preset("q9_z"), Error);
}
