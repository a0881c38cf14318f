// epq synth: reproducible files, the requested shapes and types, llama.cpp's BOOL array, every
// expert type and every tiny preset loading in stock llama.cpp.
#include "test_util.h"

#include "engine/llama_log.h"
#include "engine/llama_session.h"
#include "gguf/gguf_file.h"
#include "synth/model_layout.h"
#include "synth/tensor_filler.h"
#include "util/error.h"

#include "gguf.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <memory>

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

TEST(Synth, FlatRoutingScalesOnlyWhatWritesTheResidualStream) {
    // The flat profile draws the matrices that add a layer's output to the residual stream at
    // 1/20 of their usual spread and leaves every other tensor as the realistic profile has it.
    for (const char * preset : {"tiny-qwen3moe", "tiny-qwen35moe"}) {
        SynthConfig realistic = make_preset(preset);
        SynthConfig flat = realistic;
        flat.routing = RoutingProfile::flat;
        const ModelLayout a = build_layout(realistic, 1000), b = build_layout(flat, 1000);
        ASSERT_EQ(a.tensors.size(), b.tensors.size());
        size_t scaled = 0;
        for (size_t i = 0; i < a.tensors.size(); ++i) {
            const TensorSpec & x = a.tensors[i];
            const TensorSpec & y = b.tensors[i];
            ASSERT_EQ(x.name, y.name);
            EXPECT_EQ(x.type, y.type) << x.name;
            const bool writer = x.name.find("attn_output") != std::string::npos ||
                                x.name.find("ssm_out") != std::string::npos ||
                                x.name.find("ffn_down") != std::string::npos;
            if (writer) {
                EXPECT_FLOAT_EQ(y.dist.stddev, 0.05f * x.dist.stddev) << preset << " " << x.name;
                ++scaled;
            } else {
                EXPECT_FLOAT_EQ(y.dist.stddev, x.dist.stddev) << preset << " " << x.name;
            }
        }
        // Every layer writes at least its mixer's and its FFN's output.
        EXPECT_GE(scaled, 2u * realistic.shape.n_layer) << preset;
    }
    // The 35B preset's realistic routing comes from an offset shared by every token embedding;
    // the flat profile drops it.
    SynthConfig q35 = make_preset("qwen35moe-35b-a3b");
    auto embd_mean = [](const SynthConfig & cfg) {
        for (const TensorSpec & t : build_layout(cfg, 1000).tensors) {
            if (t.name == "token_embd.weight") {
                return t.dist.mean;
            }
        }
        return -1.0f;
    };
    EXPECT_GT(embd_mean(q35), 1.0f);
    q35.routing = RoutingProfile::flat;
    EXPECT_EQ(embd_mean(q35), 0.0f);
    EXPECT_EQ(embd_mean(make_preset("tiny-qwen35moe")), 0.0f);
    EXPECT_EQ(parse_routing_profile("flat"), RoutingProfile::flat);
    EXPECT_THROW(parse_routing_profile("zipf"), Error);
}

TEST(Synth, TheCalibratedPresetWritesLessIntoTheResidualStreamAndFlatIgnoresThat) {
    // The 30B preset's realistic routing is calibrated with a residual scale below 1: the writers
    // (and only they) are drawn at that share of the unit-scale spread, the attention outputs of
    // the layers where recent attention brings the context in at output_gain times that; flat
    // draws every writer at 1/20 of the unit-scale spread whatever the preset's scale.
    const SynthConfig q30 = make_preset("qwen3moe-30b-a3b");
    ASSERT_LT(q30.residual_scale, 1.0f);
    const auto & ra = q30.recent_attention;
    ASSERT_GT(ra.sharpness, 0.0f);
    ASSERT_GT(ra.gain_layers, 0u);
    ASSERT_LT(ra.gain_layers, q30.shape.n_layer);
    SynthConfig unit = q30, flat = q30;
    unit.residual_scale = 1.0f;
    unit.recent_attention = {};
    flat.routing = RoutingProfile::flat;
    const ModelLayout a = build_layout(q30, 1000), u = build_layout(unit, 1000), f = build_layout(flat, 1000);
    ASSERT_EQ(a.tensors.size(), u.tensors.size());
    size_t scaled = 0, gained = 0;
    for (size_t i = 0; i < a.tensors.size(); ++i) {
        const std::string & name = a.tensors[i].name;
        const bool writer = name.find("attn_output") != std::string::npos || name.find("ffn_down") != std::string::npos;
        float want = writer ? q30.residual_scale * u.tensors[i].dist.stddev : u.tensors[i].dist.stddev;
        for (uint32_t il = 0; il < ra.gain_layers; ++il) {
            if (name == "blk." + std::to_string(il) + ".attn_output.weight") {
                want *= ra.output_gain;
                ++gained;
            }
        }
        EXPECT_FLOAT_EQ(a.tensors[i].dist.stddev, want) << name;
        if (writer) {
            EXPECT_FLOAT_EQ(f.tensors[i].dist.stddev, 0.05f * u.tensors[i].dist.stddev) << name;
            ++scaled;
        }
    }
    EXPECT_EQ(scaled, 2u * q30.shape.n_layer);
    EXPECT_EQ(gained, ra.gain_layers);
}

TEST(Synth, RecentAttentionReadsOnlyTheSharedDirectionOnItsRotaryBand) {
    // qwen3moe rotates the whole head; qwen35moe a quarter of it, and its query rows carry an
    // output gate after each head. Pair p of a NEOX rotation over n_rot dims is dims p and
    // p + n_rot / 2. On the band (pairs 1..2 here) every query and key row is the shared
    // direction (all 1/sqrt(n_embd)), elsewhere random; the per-head norms weigh the band alone.
    for (const std::string arch : {"qwen3moe", "qwen35moe"}) {
        SynthConfig cfg = tiny(arch);
        cfg.quant.types["attn"] = GGML_TYPE_F32;
        cfg.embd_offset = 0.5f;
        cfg.recent_attention = {2.0f, 1, 2, 3.0f, 1};
        const std::string path = synth_model("recent-attn-" + arch, cfg);
        const GgufFile f = GgufFile::open(path);
        const auto bytes = read_file(path);
        const int64_t hd = cfg.shape.head_dim, n_embd = cfg.shape.n_embd;
        const int64_t n_rot = arch == "qwen3moe" ? hd : hd / 4, q_rows = arch == "qwen3moe" ? hd : 2 * hd;
        auto band = [n_rot](int64_t dim) {
            for (int64_t p : {1, 2}) {
                if (dim == p || dim == p + n_rot / 2) {
                    return true;
                }
            }
            return false;
        };
        auto floats = [&](const TensorInfo * t) {
            std::vector<float> v(t->nbytes / sizeof(float));
            std::memcpy(v.data(), bytes.data() + t->file_offset, t->nbytes);
            return v;
        };
        uint32_t layers = 0;
        for (uint32_t il = 0; il < cfg.shape.n_layer; ++il) {
            const std::string blk = "blk." + std::to_string(il) + ".";
            const TensorInfo * qn = f.find_tensor(blk + "attn_q_norm.weight");
            if (qn == nullptr) {
                continue;  // a recurrent layer of the hybrid
            }
            ++layers;
            for (const char * norm : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
                const auto w = floats(f.find_tensor(blk + norm));
                ASSERT_EQ(static_cast<int64_t>(w.size()), hd);
                for (int64_t i = 0; i < hd; ++i) {
                    EXPECT_EQ(w[i], band(i) ? 2.0f : 0.0f) << arch << " " << blk << norm << " dim " << i;
                }
            }
            for (const auto & [name, stride] : {std::pair<std::string, int64_t>{"attn_q.weight", q_rows},
                                                std::pair<std::string, int64_t>{"attn_k.weight", hd}}) {
                const TensorInfo * t = f.find_tensor(blk + name);
                ASSERT_EQ(t->type, GGML_TYPE_F32);
                const auto v = floats(t);
                const int64_t rows = static_cast<int64_t>(v.size()) / n_embd;
                size_t on_band = 0;
                for (int64_t r = 0; r < rows; ++r) {
                    const auto first = v.begin() + r * n_embd, last = first + n_embd;
                    const bool constant = std::count(first, last, 1.0f / std::sqrt(float(n_embd))) == n_embd;
                    EXPECT_EQ(constant, band(r % stride)) << arch << " " << blk << name << " row " << r;
                    on_band += constant;
                }
                EXPECT_EQ(on_band, 4u * static_cast<size_t>(rows / stride)) << arch << " " << name;
            }
        }
        EXPECT_GE(layers, 1u) << arch;
        // Flat keeps random attention: the norms stay near one.
        cfg.routing = RoutingProfile::flat;
        for (const TensorSpec & t : build_layout(cfg, 1000).tensors) {
            EXPECT_FALSE(t.shape_values) << arch << " flat shapes " << t.name;
        }
    }
}

TEST(Synth, RejectsImpossibleShapes) {
    SynthConfig cfg = tiny("qwen3moe", "q4_k");
    cfg.shape.n_ff_exp = 200;  // the Q4_K the user chose needs rows of whole 256-blocks
    EXPECT_THROW(synthesize(cfg, temp_dir() + "/bad.gguf"), Error);
    SynthConfig olmoe = tiny("olmoe");
    olmoe.shape.n_head_kv = 2;
    EXPECT_THROW(synthesize(olmoe, temp_dir() + "/bad2.gguf"), Error);
    EXPECT_THROW(make_preset("no-such-preset"), Error);
    EXPECT_THROW(make_quant_preset("q9_z"), Error);
}

TEST(Synth, DefaultTypesFallBackLikeLlamaQuantizeButChosenOnesDoNot) {
    // Rows of 352 values are whole 32-blocks but not 256-blocks (DeepSeek-V2-Lite's 1408 is the
    // same case): the mixed plan's Q6_K and Q4_K downs become Q8_0 and Q5_0, as in real files.
    SynthConfig cfg = make_preset("tiny-deepseek2");
    cfg.shape.n_ff_exp = 352;
    const GgufFile f = GgufFile::open(synth_model("fallback-352", cfg));
    EXPECT_EQ(f.find_tensor("blk.1.ffn_down_exps.weight")->type, GGML_TYPE_Q8_0);
    EXPECT_EQ(f.find_tensor("blk.3.ffn_down_exps.weight")->type, GGML_TYPE_Q5_0);
    EXPECT_EQ(f.find_tensor("blk.3.ffn_up_exps.weight")->type, GGML_TYPE_Q4_K);  // rows of n_embd 256 fit
    cfg.quant = make_quant_preset("q4_k");  // now the user chose Q4_K for every expert
    try {
        synthesize(cfg, temp_dir() + "/bad-352.gguf");
        FAIL() << "Q4_K experts with rows of 352 values were accepted";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("ffn_down_exps"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("352"), std::string::npos) << e.what();
    }
}

TEST(Synth, GptOssHasSinksBiasesAndSlidingWindow) {
    const GgufFile f = GgufFile::open(synth_model("preset-tiny-gpt-oss", make_preset("tiny-gpt-oss")));
    EXPECT_EQ(f.architecture(), "gpt-oss");
    EXPECT_EQ(f.get_int("gpt-oss.attention.sliding_window"), 128);
    EXPECT_EQ(f.get_int("gpt-oss.expert_feed_forward_length"), 256);
    for (const char * name : {"blk.0.attn_sinks.weight", "blk.0.attn_q.bias", "blk.0.attn_output.bias",
                              "blk.0.ffn_gate_inp.bias", "blk.0.ffn_gate_exps.bias", "blk.0.ffn_up_exps.bias",
                              "blk.0.ffn_down_exps.bias", "blk.0.post_attention_norm.weight"}) {
        const TensorInfo * t = f.find_tensor(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_EQ(t->type, GGML_TYPE_F32) << name;
    }
    EXPECT_EQ(f.find_tensor("blk.3.ffn_down_exps.weight")->type, GGML_TYPE_MXFP4);
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down_exps.bias")->ne[1], 32);
}

TEST(Synth, Deepseek2HasDenseLeadSharedExpertsAndSelectionBias) {
    const GgufFile f = GgufFile::open(synth_model("preset-tiny-deepseek2", make_preset("tiny-deepseek2")));
    EXPECT_EQ(f.architecture(), "deepseek2");
    EXPECT_EQ(f.get_int("deepseek2.leading_dense_block_count"), 1);
    EXPECT_EQ(f.get_int("deepseek2.expert_shared_count"), 2);
    EXPECT_EQ(f.get_int("deepseek2.expert_gating_func"), 2);  // sigmoid
    EXPECT_NE(f.find_tensor("blk.0.ffn_gate.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_exps.weight"), nullptr);
    for (uint32_t il = 1; il < 4; ++il) {
        const std::string b = "blk." + std::to_string(il) + ".";
        EXPECT_NE(f.find_tensor(b + "ffn_gate_exps.weight"), nullptr) << il;
        EXPECT_NE(f.find_tensor(b + "exp_probs_b.bias"), nullptr) << il;
        const TensorInfo * sh = f.find_tensor(b + "ffn_up_shexp.weight");
        ASSERT_NE(sh, nullptr) << il;
        EXPECT_EQ(sh->ne[1], 2 * 256) << "two shared experts of expert ff 256";
        EXPECT_NE(f.find_tensor(b + "attn_k_b.weight"), nullptr) << il;
    }
}

namespace {

// Loads `path` in stock llama.cpp, decodes a short text and a few greedy tokens, and checks
// the logits are finite and not all equal.
void expect_llama_runs(const std::string & path) {
    set_llama_verbosity(false);
    SessionOptions so;
    so.n_ctx = 128;
    LlamaSession s(path, so);
    s.decode(s.tokenize("The quick brown fox jumps over the lazy dog.", true));
    for (int step = 0; step < 3; ++step) {
        const float * logits = s.logits();
        ASSERT_NE(logits, nullptr);
        llama_token best = 0;
        float lo = INFINITY;
        for (int32_t i = 0; i < s.n_vocab(); ++i) {
            ASSERT_TRUE(std::isfinite(logits[i])) << path << " logit " << i << " at step " << step;
            best = logits[i] > logits[best] ? i : best;
            lo = std::min(lo, logits[i]);
        }
        EXPECT_GT(logits[best] - lo, 1e-3f) << path << ": logits are all the same";
        s.decode({best});
    }
}

std::vector<std::string> tiny_presets() {
    std::vector<std::string> names;
    for (const auto & p : list_presets()) {
        if (p.name.rfind("tiny-", 0) == 0) {
            names.push_back(p.name);
        }
    }
    return names;
}

std::string test_name(const std::string & s) {
    std::string out;
    for (char c : s) {
        out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    }
    return out;
}

}  // namespace

// Every tiny preset, with its own default types (gpt-oss: MXFP4 experts), is a model llama.cpp
// runs.
class SynthTinyPreset : public ::testing::TestWithParam<std::string> {};

TEST_P(SynthTinyPreset, LoadsAndRunsInLlamaCpp) {
    expect_llama_runs(synth_model("preset-" + GetParam(), make_preset(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Synth, SynthTinyPreset, ::testing::ValuesIn(tiny_presets()),
                         [](const auto & p) { return test_name(p.param); });

// Every type llama-quantize can write for experts: the file holds the experts in that type
// (read back with ggml's gguf API) and llama.cpp runs it. A small olmoe (the smallest vocabulary)
// with 2 layers of 8 experts keeps this quick.
class SynthExpertType : public ::testing::TestWithParam<ggml_type> {};

TEST_P(SynthExpertType, WritesTheTypeAndLoadsInLlamaCpp) {
    const ggml_type type = GetParam();
    SynthConfig cfg = tiny("olmoe", ggml_type_name(type));
    cfg.shape.n_layer = 2, cfg.shape.n_expert = 8, cfg.shape.n_expert_used = 2;
    const std::string path = synth_model(std::string("every-type-") + ggml_type_name(type), cfg);

    gguf_init_params params{true, nullptr};
    std::unique_ptr<gguf_context, void (*)(gguf_context *)> g(gguf_init_from_file(path.c_str(), params), gguf_free);
    ASSERT_NE(g, nullptr) << path;
    for (const char * kind : {"gate", "up", "down"}) {
        for (int il = 0; il < 2; ++il) {
            const std::string name = "blk." + std::to_string(il) + ".ffn_" + kind + "_exps.weight";
            const int64_t id = gguf_find_tensor(g.get(), name.c_str());
            ASSERT_GE(id, 0) << name;
            EXPECT_EQ(gguf_get_tensor_type(g.get(), id), type) << name;
        }
    }
    expect_llama_runs(path);
}

INSTANTIATE_TEST_SUITE_P(Synth, SynthExpertType, ::testing::ValuesIn(expert_quant_types()),
                         [](const auto & p) { return test_name(ggml_type_name(p.param)); });

// Every preset's output head has distinct rows, so the greedy token is the one largest logit
// and any two tools agree on it whatever their tie-breaking. The head (vocabulary x n_embd, its
// type and the tokenizer) is the preset's own; the layers are cut to a few small ones, which
// change the hidden states but not how the head's rows were drawn.
class SynthPresetHead : public ::testing::TestWithParam<std::string> {};

TEST_P(SynthPresetHead, TopLogitIsNeverTied) {
    SynthConfig cfg = make_preset(GetParam());
    SynthShape & s = cfg.shape;
    s.n_layer = std::min<uint32_t>(s.n_layer, std::max<uint32_t>({2, s.full_attn_interval, s.n_dense_lead + 1}));
    s.n_expert = std::min<uint32_t>(s.n_expert, 8);
    s.n_expert_used = std::min<uint32_t>(s.n_expert_used, 2);
    s.n_ff_exp = 256;
    if (s.n_ff_shexp != 0) {
        s.n_ff_shexp = 256;
    }
    const std::string path = synth_model("head-" + GetParam(), cfg);

    set_llama_verbosity(false);
    SessionOptions so;
    so.n_ctx = 128;
    LlamaSession session(path, so);
    session.decode(session.tokenize("Once upon a time, in a country far away, there lived", true));
    for (int step = 0; step < 4; ++step) {
        const float * logits = session.logits();
        ASSERT_NE(logits, nullptr);
        std::vector<llama_token> order(static_cast<size_t>(session.n_vocab()));
        for (size_t i = 0; i < order.size(); ++i) {
            order[i] = static_cast<llama_token>(i);
        }
        std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                          [&](llama_token a, llama_token b) { return logits[a] > logits[b]; });
        ASSERT_GT(logits[order[0]], logits[order[1]])
            << GetParam() << ": tokens " << order[0] << " and " << order[1] << " tie at the top of step " << step;
        session.decode({order[0]});
    }
}

INSTANTIATE_TEST_SUITE_P(Synth, SynthPresetHead, ::testing::ValuesIn([] {
                             std::vector<std::string> names;
                             for (const auto & p : list_presets()) {
                                 if (!p.for_planning) {  // 1 TB class: their heads are deepseek-v2-lite's
                                     names.push_back(p.name);
                                 }
                             }
                             return names;
                         }()),
                         [](const auto & p) { return test_name(p.param); });
