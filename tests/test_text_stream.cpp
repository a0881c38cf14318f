// TextStream: what a completion may release while tokens arrive (stop strings, UTF-8).
#include "engine/text_stream.h"

#include <gtest/gtest.h>

using epq::TextStream;

TEST(TextStream, HoldsBackWhatMayBecomeAStopStringAndCutsWhereItCompletes) {
    TextStream t({"</end>", "STOP"});
    EXPECT_EQ(t.push("Hello </"), "Hello ");
    EXPECT_EQ(t.push("e"), "");
    EXPECT_EQ(t.push("nd> more"), "");
    EXPECT_TRUE(t.stopped());
    EXPECT_EQ(t.stop_word(), "</end>");
    EXPECT_EQ(t.released(), "Hello ");
    EXPECT_EQ(t.push("after"), "");
    EXPECT_EQ(t.finish(), "");
}

TEST(TextStream, ReleasesAHeldPrefixThatDidNotBecomeAStop) {
    TextStream t({"STOP"});
    EXPECT_EQ(t.push("ST"), "");
    EXPECT_EQ(t.push("AR"), "STAR");
    EXPECT_EQ(t.push("S"), "");
    EXPECT_EQ(t.finish(), "S");
    EXPECT_FALSE(t.stopped());
    EXPECT_EQ(t.released(), "STARS");
}

TEST(TextStream, TheEarliestStopWinsWithinOnePiece) {
    TextStream t({"b", "a"});
    EXPECT_EQ(t.push("xxab"), "xx");
    EXPECT_EQ(t.stop_word(), "a");
}

TEST(TextStream, NeverSplitsAUtf8Character) {
    TextStream t;
    const std::string euro = "\xE2\x82\xAC";  // U+20AC in three bytes
    EXPECT_EQ(t.push("price " + euro.substr(0, 1)), "price ");
    EXPECT_EQ(t.push(euro.substr(1, 1)), "");
    EXPECT_EQ(t.push(euro.substr(2)), euro);
    EXPECT_EQ(epq::incomplete_utf8_tail("ok"), 0u);
    EXPECT_EQ(epq::incomplete_utf8_tail("\xF0\x9F\x98"), 3u);  // 4-byte emoji, one byte short
    EXPECT_EQ(epq::incomplete_utf8_tail("\xF0\x9F\x98\x80"), 0u);
}
