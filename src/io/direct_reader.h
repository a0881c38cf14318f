// Positional reads of the model file that bypass the page cache (O_DIRECT), so expert bytes
// live once, in the arena. O_DIRECT needs aligned offsets, lengths and buffers (the alignment
// the filesystem reports through statx, else 4096): a read that is not aligned is widened to the
// enclosing aligned range, into the destination itself when the caller left room for it, or else
// into a scratch buffer.
//
// Where the filesystem refuses O_DIRECT (tmpfs, some network filesystems), at open or on a read,
// reads are buffered and the pages dropped after each read; a one-line notice says so.
//
// Failures: EINTR and short reads continue where they stopped; an I/O error (EIO and the like)
// is retried twice, since a read changes nothing and a transient error can pass; what still fails
// is one epq::Error that names the file, the offset and what to do.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <sys/types.h>

namespace epq {

class DirectReader {
public:
    // Alignment the arena lays expert matrices out for, so most reads land in place.
    static constexpr uint64_t kAlign = 4096;

    explicit DirectReader(const std::string & path);  // throws epq::Error
    ~DirectReader();
    DirectReader(const DirectReader &) = delete;
    DirectReader & operator=(const DirectReader &) = delete;

    // Whether reads still bypass the page cache (false once the filesystem refused O_DIRECT).
    bool direct() const { return direct_.load(std::memory_order_relaxed); }
    // The offset and buffer alignment direct reads use.
    uint64_t align() const { return align_; }
    const std::string & path() const { return path_; }

    // Reads [offset, offset + len) to `dst`. `dst_room_before` bytes before dst and
    // `dst_room_after` after it may be overwritten: when dst - (offset % align()) is aligned and
    // the room suffices, the aligned read lands in place without a copy.
    // Throws epq::Error on I/O errors that persist and on short reads (a truncated file).
    void read(uint64_t offset, uint64_t len, uint8_t * dst, uint64_t dst_room_before = 0,
              uint64_t dst_room_after = 0) const;

    // Throws epq::Error if the file was truncated or rewritten since it was opened. A file
    // replaced by another (renamed over, or removed) is not an error: the open descriptor still
    // reads the original, unchanged; a one-line notice says so, once.
    void check_unchanged() const;

    // The system call reads go through. Tests replace it to plant I/O faults; nullptr restores
    // pread(2).
    using PreadFn = ssize_t (*)(int fd, void * buf, size_t n, off_t offset);
    static void set_pread(PreadFn fn);

private:
    void pread_all(int fd, uint64_t offset, uint64_t len, uint8_t * dst, uint64_t want_end) const;
    void read_buffered(uint64_t offset, uint64_t len, uint8_t * dst) const;
    // A direct read the filesystem refused with EINVAL: from now on, buffered (with a notice).
    void fall_back_to_buffered(int err) const;

    std::string path_;
    int fd_ = -1;           // O_DIRECT where the filesystem allows it
    int fd_buffered_ = -1;  // the same file through the page cache
    mutable std::atomic<bool> direct_{false};
    mutable std::atomic<bool> replaced_noted_{false};
    uint64_t align_ = kAlign;
    uint64_t size_ = 0;
    int64_t mtime_ns_ = 0;
    dev_t dev_ = 0;
    ino_t ino_ = 0;
};

}  // namespace epq
