#include "io/direct_reader.h"

#include "util/error.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sys/stat.h>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace epq {

namespace {

std::atomic<DirectReader::PreadFn> g_pread{nullptr};

ssize_t do_pread(int fd, void * buf, size_t n, off_t offset) {
    const DirectReader::PreadFn fn = g_pread.load(std::memory_order_relaxed);
    return fn ? fn(fd, buf, n, offset) : ::pread(fd, buf, n, offset);
}

struct AlignedFree {
    void operator()(uint8_t * p) const { std::free(p); }
};

int64_t mtime_ns(const struct stat & st) {
    return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

// The direct I/O alignment the filesystem reports for `fd` (Linux 6.1+), or 0 when it does not.
uint64_t statx_dio_align(int fd) {
#ifdef STATX_DIOALIGN
    struct statx stx {};
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN) &&
        stx.stx_dio_offset_align > 0) {
        return std::max<uint64_t>(stx.stx_dio_offset_align, stx.stx_dio_mem_align);
    }
#else
    (void)fd;
#endif
    return 0;
}

constexpr int kReadAttempts = 3;

}  // namespace

void DirectReader::set_pread(PreadFn fn) {
    g_pread.store(fn);
}

DirectReader::DirectReader(const std::string & path) : path_(path) {
    fd_buffered_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_buffered_ < 0) {
        throw Error("cannot open model file " + path + " for reading experts: " + std::strerror(errno));
    }
    struct stat st {};
    if (fstat(fd_buffered_, &st) != 0) {
        const int err = errno;
        ::close(fd_buffered_);
        throw Error("cannot stat " + path + ": " + std::strerror(err));
    }
    size_ = static_cast<uint64_t>(st.st_size);
    mtime_ns_ = mtime_ns(st);
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    posix_fadvise(fd_buffered_, 0, 0, POSIX_FADV_RANDOM);

    fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd_ >= 0) {
        direct_ = true;
        if (const uint64_t a = statx_dio_align(fd_); a > 0) {
            align_ = a;
        }
    } else {
        fall_back_to_buffered(errno);
    }
}

DirectReader::~DirectReader() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
    ::close(fd_buffered_);
}

void DirectReader::fall_back_to_buffered(int err) const {
    if (direct_.exchange(false)) {
        std::fprintf(stderr,
                     "epq: note: the filesystem of %s refuses direct reads (%s); reading experts through the page "
                     "cache, dropping each read's pages after it\n",
                     path_.c_str(), std::strerror(err));
    } else if (fd_ < 0) {
        std::fprintf(stderr,
                     "epq: note: %s cannot be opened for direct reads (%s); reading experts through the page cache, "
                     "dropping each read's pages after it\n",
                     path_.c_str(), std::strerror(err));
    }
}

void DirectReader::check_unchanged() const {
    struct stat now {
    }, named{};
    if (fstat(fd_buffered_, &now) != 0 || static_cast<uint64_t>(now.st_size) != size_ || mtime_ns(now) != mtime_ns_) {
        throw Error("the model file " + path_ +
                    " was modified while running (size or modification time changed); stopping rather than "
                    "computing with mixed weights: restore the file and run again");
    }
    if ((stat(path_.c_str(), &named) != 0 || named.st_dev != dev_ || named.st_ino != ino_) &&
        !replaced_noted_.exchange(true)) {
        std::fprintf(stderr,
                     "epq: note: %s was replaced or removed while running; still using the file opened at start "
                     "(unchanged); restart to use the new one\n",
                     path_.c_str());
    }
}

void DirectReader::pread_all(int fd, uint64_t offset, uint64_t len, uint8_t * dst, uint64_t want_end) const {
    uint64_t done = 0;
    int attempt = 1;
    while (done < len) {
        const ssize_t n = do_pread(fd, dst + done, len - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            const int err = errno;
            if (err == EINTR) {
                continue;
            }
            if (err == EINVAL && fd == fd_) {
                throw std::system_error(err, std::generic_category());  // alignment: read() falls back
            }
            if (attempt < kReadAttempts && err != EBADF && err != EFAULT) {
                std::fprintf(stderr, "epq: warning: read error on %s at offset %llu (%s); retrying (%d of %d)\n",
                             path_.c_str(), static_cast<unsigned long long>(offset + done), std::strerror(err), attempt,
                             kReadAttempts - 1);
                std::this_thread::sleep_for(std::chrono::milliseconds(attempt == 1 ? 20 : 200));
                ++attempt;
                continue;
            }
            throw Error("read error on " + path_ + " at offset " + std::to_string(offset + done) + ": " +
                        std::strerror(err) + (attempt > 1 ? " (after " + std::to_string(attempt) + " attempts)" : "") +
                        "; check the disk (dmesg) and run again");
        }
        if (n == 0) {
            break;  // end of file: an aligned read may legitimately stop early
        }
        done += static_cast<uint64_t>(n);
    }
    if (offset + done < want_end) {
        throw Error("short read on " + path_ + ": needed bytes up to offset " + std::to_string(want_end) +
                    " but the file ends at " + std::to_string(offset + done) +
                    "; the model file was truncated while running");
    }
}

void DirectReader::read_buffered(uint64_t offset, uint64_t len, uint8_t * dst) const {
    pread_all(fd_buffered_, offset, len, dst, offset + len);
    posix_fadvise(fd_buffered_, static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
}

void DirectReader::read(uint64_t offset, uint64_t len, uint8_t * dst, uint64_t room_before, uint64_t room_after) const {
    if (!direct()) {
        read_buffered(offset, len, dst);
        return;
    }
    const uint64_t start = offset / align_ * align_;
    const uint64_t end = (offset + len + align_ - 1) / align_ * align_;
    const uint64_t head = offset - start;
    uint8_t * in_place = dst - head;
    try {
        if (head <= room_before && end - (offset + len) <= room_after &&
            reinterpret_cast<uintptr_t>(in_place) % align_ == 0) {
            pread_all(fd_, start, end - start, in_place, offset + len);
            return;
        }
        void * raw = nullptr;
        if (posix_memalign(&raw, align_, end - start) != 0) {
            throw Error("out of memory for a read buffer of " + std::to_string(end - start) + " bytes");
        }
        std::unique_ptr<uint8_t, AlignedFree> scratch(static_cast<uint8_t *>(raw));
        pread_all(fd_, start, end - start, scratch.get(), offset + len);
        std::memcpy(dst, scratch.get() + head, len);
    } catch (const std::system_error & e) {
        // EINVAL: the filesystem refuses this direct read (an alignment it did not report).
        // Reading is idempotent, so the same bytes are read again through the page cache.
        fall_back_to_buffered(e.code().value());
        read_buffered(offset, len, dst);
    }
}

}  // namespace epq
