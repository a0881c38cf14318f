#include "util/byte_size.h"

#include <gtest/gtest.h>

using epq::format_bytes;
using epq::parse_byte_size;

TEST(ByteSize, ParsesSuffixesAsPowersOf1024) {
    EXPECT_EQ(parse_byte_size("4G"), 4ull << 30);
    EXPECT_EQ(parse_byte_size("4GiB"), 4ull << 30);
    EXPECT_EQ(parse_byte_size("512m"), 512ull << 20);
    EXPECT_EQ(parse_byte_size("1.5K"), 1536u);
    EXPECT_EQ(parse_byte_size("123"), 123u);
    EXPECT_EQ(parse_byte_size("7B"), 7u);
}

TEST(ByteSize, RejectsNonSizes) {
    EXPECT_FALSE(parse_byte_size(""));
    EXPECT_FALSE(parse_byte_size("G"));
    EXPECT_FALSE(parse_byte_size("-1G"));
    EXPECT_FALSE(parse_byte_size("4X"));
    EXPECT_FALSE(parse_byte_size("4GG"));
    EXPECT_FALSE(parse_byte_size("1.2.3"));
}

TEST(ByteSize, Formats) {
    EXPECT_EQ(format_bytes(512), "512 B");
    EXPECT_EQ(format_bytes(1536), "1.50 KiB");
    EXPECT_EQ(format_bytes(3ull << 30), "3.00 GiB");
}
