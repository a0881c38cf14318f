// The layer split's edge cases, as llama.cpp's loader defines them (llama-model.cpp,
// load_tensors): -ngl counts the output layer as one more layer after the last block, -ngl
// beyond that is every layer, no device leaves everything on the CPU. The split against
// llama.cpp's own placement is checked in test_rpc.cpp (RpcPlacement).
#include "sched/layer_split.h"

#include <gtest/gtest.h>

using namespace epq;

TEST(LayerSplit, NglCountsTheOutputLayerAndClampsToAll) {
    const int C = kCpuLayer;
    EXPECT_EQ(split_layers(4, 0, {1}), (std::vector<int>{C, C, C, C, C}));
    EXPECT_EQ(split_layers(4, 1, {1}), (std::vector<int>{C, C, C, C, 0}));  // the output layer only
    EXPECT_EQ(split_layers(4, 2, {1}), (std::vector<int>{C, C, C, 0, 0}));
    EXPECT_EQ(split_layers(4, 5, {1}), (std::vector<int>{0, 0, 0, 0, 0}));
    EXPECT_EQ(split_layers(4, 99, {1}), (std::vector<int>{0, 0, 0, 0, 0}));
    EXPECT_EQ(split_layers(4, -1, {1}), (std::vector<int>{0, 0, 0, 0, 0}));
    EXPECT_EQ(split_layers(4, -1, {}), (std::vector<int>{C, C, C, C, C}));  // no device
}

TEST(LayerSplit, DevicesTakeContiguousRunsInOrder) {
    // Even weights over 4 layers: 2 each, the first device first.
    EXPECT_EQ(split_layers(3, -1, {1, 1}), (std::vector<int>{0, 0, 1, 1}));
    // A device with no weight gets nothing.
    EXPECT_EQ(split_layers(3, -1, {0, 1}), (std::vector<int>{1, 1, 1, 1}));
    EXPECT_EQ(split_layers(3, -1, {3, 1}), (std::vector<int>{0, 0, 0, 1}));
}

TEST(LayerSplit, RangesNameTheLayersOfADevice) {
    const std::vector<int> d{-1, 0, 0, 0, 1, 0, 0};  // 6 blocks, then the output layer
    EXPECT_EQ(layer_ranges(d, 0), "1-3, 5 and the output layer");
    EXPECT_EQ(layer_ranges(d, 1), "4");
    EXPECT_EQ(layer_ranges(d, 2), "none");
}
