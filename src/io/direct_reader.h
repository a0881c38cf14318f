// Positional reads of the model file that bypass the page cache (O_DIRECT), so expert bytes
// live once, in the arena. O_DIRECT needs aligned offsets, lengths and buffers: a read that
// is not aligned is widened to the enclosing aligned range, into the destination itself when
// the caller left room for it, or else into a scratch buffer.
//
// Where the filesystem refuses O_DIRECT (tmpfs, some network filesystems) reads are buffered
// and the pages dropped after each read.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <sys/types.h>

namespace epq {

class DirectReader {
public:
    static constexpr uint64_t kAlign = 4096;

    explicit DirectReader(const std::string & path);  // throws epq::Error
    ~DirectReader();
    DirectReader(const DirectReader &) = delete;
    DirectReader & operator=(const DirectReader &) = delete;

    bool direct() const { return direct_; }
    const std::string & path() const { return path_; }

    // Reads [offset, offset + len) to `dst`. `dst_room_before` bytes before dst and
    // `dst_room_after` after it may be overwritten: when dst - (offset % kAlign) is aligned and
    // the room suffices, the aligned read lands in place without a copy.
    // Throws epq::Error on I/O errors and short reads (a truncated file).
    void read(uint64_t offset, uint64_t len, uint8_t * dst, uint64_t dst_room_before = 0,
              uint64_t dst_room_after = 0) const;

    // Throws epq::Error if the file was truncated, replaced or rewritten since it was opened.
    void check_unchanged() const;

    // Test hook: the Nth read from now (1 = the next) fails with EIO. 0 disables.
    static void inject_read_failure_after(uint64_t n);

private:
    void pread_all(uint64_t offset, uint64_t len, uint8_t * dst, uint64_t want_end) const;

    std::string path_;
    int fd_ = -1;
    bool direct_ = false;
    uint64_t size_ = 0;
    int64_t mtime_ns_ = 0;
    dev_t dev_ = 0;
    ino_t ino_ = 0;
};

}  // namespace epq
