// epq inspect's numbers against the shapes the test asked synth for. Expected byte counts come
// from the block formats (bytes per block / values per block), not from ggml.
#include "test_util.h"

#include "gguf/expert_index.h"
#include "gguf/inspect_report.h"
#include "synth/synthesizer.h"

#include <algorithm>
#include <gtest/gtest.h>

using namespace epq;
using namespace epq::test;

namespace {

// Bytes one row of n values takes, from the GGUF block format definitions.
uint64_t row_bytes(const std::string & type, uint64_t n) {
    if (type == "q4_K")
        return n / 256 * 144;  // d, dmin (2+2), 12 scale bytes, 128 nibble bytes
    if (type == "q5_K")
        return n / 256 * 176;  // + 32 high-bit bytes
    if (type == "q6_K")
        return n / 256 * 210;  // 128 low + 64 high + 16 scales + 2 d
    if (type == "q8_0")
        return n / 32 * 34;  // 2 d + 32 int8
    if (type == "q4_0")
        return n / 32 * 18;  // 2 d + 16 nibble bytes
    if (type == "f16")
        return n * 2;
    if (type == "f32")
        return n * 4;
    ADD_FAILURE() << "no format size for " << type;
    return 0;
}

// Arena slot bytes of one layer by the documented rule: each matrix in its own 4 KiB-aligned
// region, starting at its file offset's position within the page when the expert stride is
// whole pages. Offsets come from the GGUF header, not from the index.
uint64_t slot_need(const GgufFile & f, int layer) {
    uint64_t total = 0;
    for (const char * kind : {"gate", "up", "down"}) {
        const TensorInfo * t = f.find_tensor("blk." + std::to_string(layer) + ".ffn_" + kind + "_exps.weight");
        EXPECT_NE(t, nullptr);
        const uint64_t stride = t->nbytes / uint64_t(t->ne[2]);
        const uint64_t skew = stride % 4096 == 0 ? t->file_offset % 4096 : 0;
        total += (skew + stride + 4095) / 4096 * 4096;
    }
    return total;
}

uint64_t min_arena(const GgufFile & f, uint32_t n_layer, uint32_t k) {
    uint64_t largest = 0;
    for (uint32_t il = 0; il < n_layer; ++il) {
        largest = std::max(largest, slot_need(f, static_cast<int>(il)));
    }
    return k * largest;
}

}  // namespace

TEST(ExpertIndex, MixedPresetHasTwoSizeClassesMatchingTypeTimesShape) {
    SynthConfig cfg = tiny("qwen3moe");
    cfg.shape.n_layer = 6;
    cfg.shape.n_embd = 512;
    cfg.shape.n_ff_exp = 768;
    cfg.shape.n_expert = 24;
    cfg.shape.n_expert_used = 3;
    const std::string path = synth_model("index-mixed", cfg);
    const GgufFile f = GgufFile::open(path);
    const ExpertIndex idx = ExpertIndex::build(f);

    EXPECT_EQ(idx.arch, "qwen3moe");
    EXPECT_EQ(idx.n_layer, 6u);
    EXPECT_EQ(idx.n_expert, 24u);
    EXPECT_EQ(idx.n_expert_used, 3u);
    ASSERT_EQ(idx.layers.size(), 6u);

    const uint64_t gate = row_bytes("q4_K", 512) * 768;
    const uint64_t down_q6 = row_bytes("q6_K", 768) * 512;
    const uint64_t down_q4 = row_bytes("q4_K", 768) * 512;
    ASSERT_EQ(idx.size_classes.size(), 2u);
    EXPECT_EQ(idx.size_classes[0].expert_bytes, 2 * gate + down_q4);
    EXPECT_EQ(idx.size_classes[1].expert_bytes, 2 * gate + down_q6);
    EXPECT_EQ(idx.size_classes[0].layers, (std::vector<int>{3, 4, 5}));
    EXPECT_EQ(idx.size_classes[1].layers, (std::vector<int>{0, 1, 2}));

    for (const auto & l : idx.layers) {
        ASSERT_EQ(l.tensors.size(), 3u);
        for (const auto & t : l.tensors) {
            const bool down = t.kind == "down";
            EXPECT_EQ(t.ne[0], down ? 768 : 512);
            EXPECT_EQ(t.ne[1], down ? 512 : 768);
            EXPECT_EQ(t.ne[2], 24);
            EXPECT_EQ(t.expert_stride, row_bytes(ggml_type_name(t.type), uint64_t(t.ne[0])) * uint64_t(t.ne[1]));
            // The offset points at the tensor's bytes in the file: check it against the header.
            const TensorInfo * info = f.find_tensor(t.name);
            ASSERT_NE(info, nullptr);
            EXPECT_EQ(t.file_offset, info->file_offset);
            EXPECT_EQ(info->nbytes, t.expert_stride * 24);
        }
    }
    const uint64_t all_experts = 24 * 3 * (2 * gate + down_q4) + 24 * 3 * (2 * gate + down_q6);
    EXPECT_EQ(idx.expert_bytes, all_experts);
    EXPECT_LE(idx.dense_bytes + idx.expert_bytes + f.data_offset(), f.file_size());
    EXPECT_EQ(idx.min_arena_bytes, min_arena(f, 6, 3));
    EXPECT_GE(idx.min_arena_bytes, 3 * (2 * gate + down_q6));
    EXPECT_EQ(idx.layers[0].slot_bytes, slot_need(f, 0));
}

// The index reads headers only: these files are written header-only (their data a hole), so
// nine models cost no quantizing.
TEST(ExpertIndex, SingleTypeExpertsForEveryArch) {
    SynthOptions opts;
    opts.progress = false;
    opts.header_only = true;
    for (const std::string arch : {"qwen35moe", "qwen3moe", "olmoe"}) {
        for (const std::string type : {"q8_0", "q4_0", "f16"}) {
            const SynthConfig cfg = tiny(arch, type);
            const GgufFile f =
                GgufFile::open(synthesize(cfg, temp_dir() + "/idx-" + arch + "-" + type + ".gguf", opts).path);
            const ExpertIndex idx = ExpertIndex::build(f);
            const auto & s = cfg.shape;
            const std::string gname = type == "f16" ? "f16" : type;
            const uint64_t expected =
                2 * row_bytes(gname, s.n_embd) * s.n_ff_exp + row_bytes(gname, s.n_ff_exp) * s.n_embd;
            ASSERT_EQ(idx.size_classes.size(), 1u) << arch << " " << type;
            EXPECT_EQ(idx.size_classes[0].expert_bytes, expected) << arch << " " << type;
            EXPECT_EQ(idx.layers.size(), s.n_layer);
            EXPECT_EQ(idx.min_arena_bytes, min_arena(f, s.n_layer, s.n_expert_used));
        }
    }
}

TEST(ExpertIndex, JsonCarriesTheSameNumbers) {
    const std::string path = synth_model("tiny-qwen35moe", tiny("qwen35moe"));
    const GgufFile f = GgufFile::open(path);
    const ExpertIndex idx = ExpertIndex::build(f);
    const auto j = inspect_json(f, idx);
    EXPECT_EQ(j["architecture"], "qwen35moe");
    EXPECT_EQ(j["n_expert"], idx.n_expert);
    EXPECT_EQ(j["size_classes"].size(), idx.size_classes.size());
    EXPECT_EQ(j["min_arena_bytes"], idx.min_arena_bytes);
    EXPECT_EQ(j["layers"].size(), idx.layers.size());
    EXPECT_EQ(j["recurrent_layers"], (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(j["layers"][0]["tensors"][0]["bytes_per_expert"], idx.layers[0].tensors[0].expert_stride);
}

TEST(ExpertIndex, FormatRanges) {
    EXPECT_EQ(format_ranges({0, 1, 2, 4, 6, 7}), "0-2, 4, 6-7");
    EXPECT_EQ(format_ranges({}), "");
    EXPECT_EQ(format_ranges({5}), "5");
}
