// Direct reads: any offset and length returns the file's bytes, in place or through scratch;
// the pool keeps order-independent results; errors and truncation are reported, never hidden.
#include "faults/planted_faults.h"
#include "io/model_reader.h"
#include "io/read_pool.h"
#include "util/mapping.h"
#include "test_util.h"
#include "util/error.h"

#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
#include <ctime>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <memory>
#include <random>
#include <fstream>
#include <cstdio>

using namespace epq;
using namespace epq::test;

namespace {

std::string pattern_file(const std::string & name, size_t n) {
    std::vector<uint8_t> bytes(n);
    for (size_t i = 0; i < n; ++i) {
        bytes[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
    }
    const std::string path = temp_dir() + "/" + name;
    write_file(path, bytes);
    return path;
}

uint8_t expected_byte(uint64_t i) {
    return static_cast<uint8_t>((i * 2654435761u) >> 13);
}

struct Aligned {
    uint8_t * p = nullptr;
    explicit Aligned(size_t n) {
        void * raw = nullptr;
        EXPECT_EQ(posix_memalign(&raw, 4096, n), 0);
        p = static_cast<uint8_t *>(raw);
    }
    ~Aligned() { std::free(p); }
};

}  // namespace

TEST(DirectReader, UnalignedReadsReturnTheFileBytes) {
    const size_t n = 3 * 1024 * 1024 + 123;
    const std::string path = pattern_file("pattern.bin", n);
    DirectReader r(path);
    std::mt19937_64 rng(1);
    std::vector<uint8_t> buf;
    for (int i = 0; i < 200; ++i) {
        const uint64_t off = rng() % (n - 1);
        const uint64_t len = 1 + rng() % std::min<uint64_t>(n - off, 300000);
        buf.assign(len, 0);
        r.read(off, len, buf.data());
        for (uint64_t j = 0; j < len; ++j) {
            ASSERT_EQ(buf[j], expected_byte(off + j)) << "offset " << off << " + " << j;
        }
    }
    // The last bytes of the file, whose aligned range runs past its end.
    buf.assign(100, 0);
    r.read(n - 100, 100, buf.data());
    EXPECT_EQ(buf[99], expected_byte(n - 1));
}

TEST(DirectReader, InPlaceReadsUseTheRoomAroundTheDestination) {
    const std::string path = pattern_file("inplace.bin", 1 << 20);
    DirectReader r(path);
    Aligned region(3 * 4096 + 8192);
    const uint64_t off = 4096 * 5 + 100, len = 9000;
    uint8_t * dst = region.p + 100;  // same skew as the file offset
    r.read(off, len, dst, 100, 8192);
    for (uint64_t j = 0; j < len; ++j) {
        ASSERT_EQ(dst[j], expected_byte(off + j));
    }
}

// A model in several files, addressed through one byte space: each read goes to the file whose
// range holds it, at the offset within that file.
TEST(ModelReader, ReadsReachTheFileWhoseRangeHoldsThem) {
    const std::string a = pattern_file("part-a.bin", 100000), b = temp_dir() + "/part-b.bin";
    std::vector<uint8_t> other(300000);
    for (size_t i = 0; i < other.size(); ++i) {
        other[i] = expected_byte(i) ^ 0x5a;  // not the first file's bytes at the same offset
    }
    write_file(b, other);
    const uint64_t base_b = 1ull << 20;
    ModelReader r({{a, 0}, {b, base_b}});
    EXPECT_EQ(r.files(), 2u);
    std::vector<uint8_t> buf(5000);
    r.read(99000, 1000, buf.data());
    for (uint64_t j = 0; j < 1000; ++j) {
        ASSERT_EQ(buf[j], expected_byte(99000 + j));
    }
    r.read(base_b + 4096 + 7, 5000, buf.data());
    for (uint64_t j = 0; j < 5000; ++j) {
        ASSERT_EQ(buf[j], expected_byte(4096 + 7 + j) ^ 0x5a) << "not read from the second file's own offset";
    }
    // Past the end of a file is its truncation, reported as such, not bytes of the next file.
    EXPECT_THROW(r.read(99000, 2000, buf.data()), Error);
    EXPECT_THROW(ModelReader({{b, 10}, {a, 0}}), Error);
}

TEST(ReadPool, ManyConcurrentReadsAllLand) {
    const size_t n = 8 * 1024 * 1024;
    const std::string path = pattern_file("pool.bin", n);
    ModelReader r(path);
    ReadPool pool(r, 4);
    std::vector<std::vector<uint8_t>> bufs(64);
    std::vector<ReadRequest> reqs;
    for (size_t i = 0; i < bufs.size(); ++i) {
        bufs[i].resize(70000);
        reqs.push_back({i * 100003, 70000, bufs[i].data(), 0, 0});
    }
    auto t = pool.submit(reqs);
    t->wait();
    EXPECT_TRUE(t->done());
    for (size_t i = 0; i < bufs.size(); ++i) {
        for (size_t j = 0; j < 70000; j += 997) {
            ASSERT_EQ(bufs[i][j], expected_byte(i * 100003 + j));
        }
    }
    EXPECT_EQ(pool.stats().requests, 64u);
    EXPECT_EQ(pool.stats().bytes, 64u * 70000);
}

// A split model: the pool's threads read both files at once, each read from its own file.
TEST(ReadPool, ConcurrentReadsAcrossSplitFilesLand) {
    const size_t n = 4 * 1024 * 1024;
    const std::string a = pattern_file("pool-a.bin", n), b = pattern_file("pool-b.bin", n);
    const uint64_t base_b = 8ull << 20;
    ModelReader r({{a, 0}, {b, base_b}});
    ReadPool pool(r, 4);
    std::vector<std::vector<uint8_t>> bufs(64);
    std::vector<ReadRequest> reqs;
    for (size_t i = 0; i < bufs.size(); ++i) {
        bufs[i].resize(50000);
        const uint64_t local = (i / 2) * 100003;
        reqs.push_back({(i % 2 ? base_b : 0) + local, 50000, bufs[i].data(), 0, 0});
    }
    auto t = pool.submit(reqs);
    t->wait();
    EXPECT_TRUE(t->done());
    for (size_t i = 0; i < bufs.size(); ++i) {
        for (size_t j = 0; j < 50000; j += 997) {
            ASSERT_EQ(bufs[i][j], expected_byte((i / 2) * 100003 + j)) << "read " << i;
        }
    }
    EXPECT_EQ(pool.stats().requests, 64u);
}

TEST(ReadPool, AReadErrorReachesTheWaiter) {
    const std::string path = pattern_file("fail.bin", 1 << 20);
    ModelReader r(path);
    ReadPool pool(r, 2);
    std::vector<uint8_t> a(5000), b(5000);
    faults::plant_io_fault(faults::parse_io_fault("eio,after=2,count=0"));
    auto t = pool.submit({{0, 5000, a.data(), 0, 0}, {8192, 5000, b.data(), 0, 0}});
    try {
        t->wait();
        FAIL() << "no error";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("read error"), std::string::npos) << e.what();
    }
    faults::plant_io_fault({});
    auto ok = pool.submit({{0, 5000, a.data(), 0, 0}});
    EXPECT_NO_THROW(ok->wait());
}

TEST(ReadPool, AMissGoesBeforeReadsStartedOnAGuess) {
    // One thread, held busy by a first read until the others are queued: the reads a computation
    // waits on (urgent) run before the guesses queued earlier, each kind in its own order.
    const std::string path = pattern_file("order.bin", 1 << 20);
    ModelReader r(path);
    ReadPool pool(r, 1);
    std::vector<std::vector<uint8_t>> bufs(5, std::vector<uint8_t>(4096));
    std::promise<void> go;
    std::shared_future<void> started = go.get_future().share();
    std::mutex mu;
    std::vector<int> order;
    auto request = [&](int i) {
        ReadRequest q{static_cast<uint64_t>(i) * 8192, 4096, bufs[static_cast<size_t>(i)].data(), 0, 0};
        q.then = [&, i](uint8_t *) {
            std::lock_guard<std::mutex> lock(mu);
            order.push_back(i);
        };
        return q;
    };
    ReadRequest first = request(0);
    first.then = [&](uint8_t *) {
        started.wait();
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(0);
    };
    auto t0 = pool.submit({first});
    auto guesses = pool.submit({request(1), request(2)}, false);
    auto miss = pool.submit({request(3)});
    auto miss2 = pool.submit({request(4)}, true);
    go.set_value();
    for (const auto & t : {t0, guesses, miss, miss2}) {
        t->wait();
    }
    EXPECT_EQ(order, (std::vector<int>{0, 3, 4, 1, 2}));
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(bufs[static_cast<size_t>(i)][100], expected_byte(static_cast<uint64_t>(i) * 8192 + 100));
    }
}

TEST(ReadPool, JoinLandsEveryQueuedReadBeforeItReturns) {
    // One thread, many reads queued behind each other: join() returns only after the last one
    // landed (and its `then` ran), so the caller may free the buffers at once.
    const std::string path = pattern_file("join.bin", 4 << 20);
    ModelReader r(path);
    ReadPool pool(r, 1);
    std::vector<std::vector<uint8_t>> bufs(32, std::vector<uint8_t>(65536));
    std::vector<ReadRequest> reqs;
    std::atomic<int> thens{0};
    for (size_t i = 0; i < bufs.size(); ++i) {
        ReadRequest q{i * 70001, 65536, bufs[i].data(), 0, 0};
        q.then = [&thens](uint8_t *) { ++thens; };
        reqs.push_back(q);
    }
    auto t = pool.submit(reqs);
    pool.join();
    EXPECT_TRUE(t->done());
    EXPECT_EQ(thens.load(), 32);
    for (size_t i = 0; i < bufs.size(); ++i) {
        ASSERT_EQ(bufs[i][65535], expected_byte(i * 70001 + 65535));
    }
    pool.join();  // again: nothing to do
    EXPECT_THROW(pool.submit({{0, 10, bufs[0].data(), 0, 0}}), Error);
}

TEST(DirectReader, TruncationAndRewritesAreDetected) {
    const std::string path = pattern_file("shrink.bin", 1 << 20);
    DirectReader r(path);
    EXPECT_NO_THROW(r.check_unchanged());
    ASSERT_EQ(truncate(path.c_str(), 1 << 19), 0);
    std::vector<uint8_t> buf(4096);
    try {
        r.read((1 << 19) + 10, 4096, buf.data());
        FAIL() << "short read not reported";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    }
    EXPECT_THROW(r.check_unchanged(), Error);

    // A file replaced by another is not an error: the descriptor still reads the original.
    const std::string path2 = pattern_file("replaced.bin", 1 << 16);
    DirectReader r2(path2);
    write_file(path2 + ".new", std::vector<uint8_t>(1 << 16, 7));
    ASSERT_EQ(rename((path2 + ".new").c_str(), path2.c_str()), 0);
    EXPECT_NO_THROW(r2.check_unchanged());
    std::vector<uint8_t> got(100);
    r2.read(5000, 100, got.data());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], expected_byte(5000 + i)) << i;
    }

    // Rewritten in place, same size: the modification time tells.
    const std::string path3 = pattern_file("rewritten.bin", 1 << 16);
    DirectReader r3(path3);
    EXPECT_NO_THROW(r3.check_unchanged());
    struct timespec later[2] = {{0, UTIME_OMIT}, {0, 0}};
    clock_gettime(CLOCK_REALTIME, &later[1]);
    later[1].tv_sec += 5;  // a coarse filesystem clock could otherwise leave the time as it was
    write_file(path3, std::vector<uint8_t>(1 << 16, 9));
    ASSERT_EQ(utimensat(AT_FDCWD, path3.c_str(), later, 0), 0);
    try {
        r3.check_unchanged();
        FAIL() << "in-place rewrite not reported";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("modified while running"), std::string::npos) << e.what();
    }
}

TEST(DirectReader, ReadsBypassThePageCacheWhereTheFilesystemAllows) {
    const std::string path = pattern_file("direct.bin", 1 << 20);
    const int probe = open(path.c_str(), O_RDONLY | O_DIRECT);
    if (probe < 0) {
        GTEST_SKIP() << "the test directory's filesystem refuses O_DIRECT; the buffered path is tested below";
    }
    close(probe);
    DirectReader r(path);
    EXPECT_TRUE(r.direct());
    EXPECT_GT(r.align(), 0u);
    EXPECT_EQ(r.align() & (r.align() - 1), 0u) << "not a power of two: " << r.align();
    std::vector<uint8_t> got(10000);
    r.read(12345, got.size(), got.data());
    EXPECT_TRUE(r.direct());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], expected_byte(12345 + i)) << i;
    }
}

TEST(DirectReader, ARefusedDirectReadFallsBackToBufferedReads) {
    const std::string path = pattern_file("refused.bin", 1 << 20);
    DirectReader r(path);
    if (!r.direct()) {
        GTEST_SKIP() << "no direct reads on this filesystem: nothing to fall back from";
    }
    faults::plant_io_fault(faults::parse_io_fault("einval"));
    std::vector<uint8_t> got(10000);
    r.read(4096 * 3 + 7, got.size(), got.data());
    EXPECT_EQ(faults::io_faults_planted(), 1u);
    EXPECT_FALSE(r.direct());
    r.read(99, got.size(), got.data());  // buffered from now on: no further refusal
    EXPECT_EQ(faults::io_faults_planted(), 1u);
    faults::plant_io_fault({});
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], expected_byte(99 + i)) << i;
    }
}

TEST(DirectReader, IoErrorsAreRetriedTwiceThenReported) {
    const std::string path = pattern_file("eio.bin", 1 << 20);
    DirectReader r(path);
    std::vector<uint8_t> got(5000);
    faults::plant_io_fault(faults::parse_io_fault("eio,count=2"));
    r.read(777, got.size(), got.data());
    EXPECT_EQ(faults::io_faults_planted(), 2u);
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], expected_byte(777 + i)) << i;
    }
    faults::plant_io_fault(faults::parse_io_fault("eio,count=3"));
    try {
        r.read(777, got.size(), got.data());
        FAIL() << "a persistent error was not reported";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("Input/output error (after 3 attempts)"), std::string::npos) << e.what();
    }
    // Short reads and interrupted calls go on where they stopped.
    for (const char * spec : {"short", "eintr"}) {
        faults::plant_io_fault(faults::parse_io_fault(spec));
        std::vector<uint8_t> big(300000);
        r.read(4096, big.size(), big.data());
        EXPECT_GE(faults::io_faults_planted(), 1u) << spec;
        for (size_t i = 0; i < big.size(); ++i) {
            ASSERT_EQ(big[i], expected_byte(4096 + i)) << spec << " " << i;
        }
    }
    faults::plant_io_fault({});
}

namespace {
bool mapped(const void * p) {
    std::ifstream maps("/proc/self/maps");
    const auto at = reinterpret_cast<uintptr_t>(p);
    for (std::string line; std::getline(maps, line);) {
        unsigned long long b = 0, e = 0;
        if (std::sscanf(line.c_str(), "%llx-%llx", &b, &e) == 2 && at >= b && at < e) {
            return true;
        }
    }
    return false;
}
}  // namespace

TEST(Mapping, UnmapsWhenItsOwnerGoesAndMovesWithoutCopying) {
    uint8_t * p = nullptr;
    {
        Mapping a = Mapping::anonymous(1 << 20, "a test");
        p = a.data();
        p[12345] = 7;
        ASSERT_TRUE(mapped(p));
        Mapping b = std::move(a);
        EXPECT_EQ(a.data(), nullptr);
        EXPECT_EQ(b.data(), p);
        EXPECT_EQ(b.size(), 1u << 20);
        EXPECT_EQ(b.data()[12345], 7);
        EXPECT_TRUE(mapped(p));
    }
    EXPECT_FALSE(mapped(p));
    try {
        Mapping::anonymous(size_t{1} << 62, "a test");
        FAIL() << "an impossible reservation succeeded";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("cannot reserve"), std::string::npos) << e.what();
    }
}
