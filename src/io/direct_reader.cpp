#include "io/direct_reader.h"

#include "util/error.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>

namespace epq {

namespace {

std::atomic<uint64_t> g_fail_countdown{0};

bool consume_injected_failure() {
    uint64_t n = g_fail_countdown.load();
    while (n > 0) {
        if (g_fail_countdown.compare_exchange_weak(n, n - 1)) {
            return n == 1;
        }
    }
    return false;
}

struct AlignedFree {
    void operator()(uint8_t * p) const { std::free(p); }
};

int64_t mtime_ns(const struct stat & st) {
    return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

}  // namespace

void DirectReader::inject_read_failure_after(uint64_t n) {
    g_fail_countdown.store(n);
}

DirectReader::DirectReader(const std::string & path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    direct_ = fd_ >= 0;
    if (fd_ < 0 && errno == EINVAL) {
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (fd_ < 0) {
        throw Error("cannot open model file " + path + " for reading experts: " + std::strerror(errno));
    }
    struct stat st {};
    if (fstat(fd_, &st) != 0) {
        throw Error("cannot stat " + path + ": " + std::strerror(errno));
    }
    size_ = static_cast<uint64_t>(st.st_size);
    mtime_ns_ = mtime_ns(st);
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    if (!direct_) {
        posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
    }
}

DirectReader::~DirectReader() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

void DirectReader::check_unchanged() const {
    struct stat now {
    }, named{};
    if (fstat(fd_, &now) != 0 || static_cast<uint64_t>(now.st_size) != size_ || mtime_ns(now) != mtime_ns_) {
        throw Error("the model file " + path_ +
                    " was modified while running (size or modification time changed); stopping rather than "
                    "computing with mixed weights: restore the file and run again");
    }
    if (stat(path_.c_str(), &named) != 0 || named.st_dev != dev_ || named.st_ino != ino_) {
        throw Error("the model file " + path_ +
                    " was replaced or removed while running; stopping: run again on the new file");
    }
}

void DirectReader::pread_all(uint64_t offset, uint64_t len, uint8_t * dst, uint64_t want_end) const {
    uint64_t done = 0;
    while (done < len) {
        if (consume_injected_failure()) {
            errno = EIO;
            throw Error("read error on " + path_ + " at offset " + std::to_string(offset + done) + ": " +
                        std::strerror(EIO) + " (injected for testing)");
        }
        const ssize_t n = ::pread(fd_, dst + done, len - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw Error("read error on " + path_ + " at offset " + std::to_string(offset + done) + ": " +
                        std::strerror(errno) + "; check the disk (dmesg) and run again");
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

void DirectReader::read(uint64_t offset, uint64_t len, uint8_t * dst, uint64_t room_before, uint64_t room_after) const {
    if (!direct_) {
        pread_all(offset, len, dst, offset + len);
        posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
        return;
    }
    const uint64_t start = offset & ~(kAlign - 1);
    const uint64_t end = (offset + len + kAlign - 1) & ~(kAlign - 1);
    const uint64_t head = offset - start;
    uint8_t * in_place = dst - head;
    if (head <= room_before && end - (offset + len) <= room_after &&
        reinterpret_cast<uintptr_t>(in_place) % kAlign == 0) {
        pread_all(start, end - start, in_place, offset + len);
        return;
    }
    void * raw = nullptr;
    if (posix_memalign(&raw, kAlign, end - start) != 0) {
        throw Error("out of memory for a read buffer of " + std::to_string(end - start) + " bytes");
    }
    std::unique_ptr<uint8_t, AlignedFree> scratch(static_cast<uint8_t *>(raw));
    pread_all(start, end - start, scratch.get(), offset + len);
    std::memcpy(dst, scratch.get() + head, len);
}

}  // namespace epq
