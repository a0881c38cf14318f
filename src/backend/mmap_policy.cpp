#include "backend/mmap_policy.h"

#include <cerrno>
#include <fcntl.h>
#include <mutex>
#include <algorithm>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

extern "C" void * __real_mmap(void * addr, size_t len, int prot, int flags, int fd, off_t off);

namespace epq {

namespace {

struct FilePolicy {
    dev_t dev = 0;
    ino_t ino = 0;
    LazyFile file;
    DenseLock lock;  // what the file's latest mapping locked
};

struct Policy {
    std::vector<FilePolicy> files;
    int applied = 0;
};

std::mutex g_mu;
Policy g_policy;

FilePolicy * matching(int fd) {
    struct stat st {};
    if (g_policy.files.empty() || fstat(fd, &st) != 0) {
        return nullptr;
    }
    for (auto & f : g_policy.files) {
        if (st.st_dev == f.dev && st.st_ino == f.ino) {
            return &f;
        }
    }
    return nullptr;
}

void advise(FilePolicy & fp, void * base, size_t len) {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    posix_madvise(base, len, POSIX_MADV_RANDOM);
    auto page_range = [&](uint64_t b, uint64_t e) {
        return std::make_pair(b & ~(page - 1), std::min<uint64_t>((e + page - 1) & ~(page - 1), len));
    };
    // The file is read at random (no readahead on a fault), so locking alone would read the
    // dense bytes 4 KiB at a time: 44 s for the 35B preset's 1.9 GiB from a cold cache. Reading
    // them first in large requests through a descriptor of our own fills the page cache the
    // mapping shares, and the locks below find them there (load 44.6 s -> 10.2 s, 8 GiB cap).
    const int fd = ::open(fp.file.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        std::vector<char> buf(16u << 20);
        for (const auto & [b, e] : fp.file.dense) {
            for (uint64_t at = b; at < e;) {
                const ssize_t n =
                    ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), e - at), static_cast<off_t>(at));
                if (n <= 0) {
                    break;  // the lock below reads what this could not
                }
                at += static_cast<uint64_t>(n);
            }
        }
        ::close(fd);
    }
    for (const auto & [b, e] : fp.file.lock) {
        const auto [begin, end] = page_range(b, e);
        if (begin >= end) {
            continue;
        }
        char * p = static_cast<char *>(base) + begin;
        // Locked, the dense bytes stay in RAM: every token reads them, and under a memory cap the
        // kernel would otherwise reclaim them like any page cache and fault them back 4 KiB at a
        // time (the mapping is random-access), measured as 100k+ major faults in one capped
        // prefill. Where locking is not allowed, they are only prefetched (above).
        if (fp.lock.error == 0 && mlock(p, end - begin) == 0) {
            fp.lock.bytes += end - begin;
        } else {
            fp.lock.error = fp.lock.error != 0 ? fp.lock.error : errno;
        }
    }
}

}  // namespace

void set_lazy_mapping(std::vector<LazyFile> files) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_policy.files.clear();
    for (auto & f : files) {
        struct stat st {};
        if (stat(f.path.c_str(), &st) == 0) {
            g_policy.files.push_back({st.st_dev, st.st_ino, std::move(f), DenseLock{}});
        }
    }
}

void clear_lazy_mapping() {
    std::lock_guard<std::mutex> lock(g_mu);
    g_policy.files.clear();
}

DenseLock dense_lock() {
    std::lock_guard<std::mutex> lock(g_mu);
    DenseLock all;
    for (const auto & f : g_policy.files) {
        all.bytes += f.lock.bytes;
        all.error = all.error != 0 ? all.error : f.lock.error;
    }
    return all;
}

int lazy_mappings_applied() {
    std::lock_guard<std::mutex> lock(g_mu);
    return g_policy.applied;
}

}  // namespace epq

extern "C" void * __wrap_mmap(void * addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (fd >= 0 && (flags & MAP_POPULATE) != 0) {
        std::lock_guard<std::mutex> lock(epq::g_mu);
        if (epq::FilePolicy * fp = epq::matching(fd)) {
            void * p = __real_mmap(addr, len, prot, flags & ~MAP_POPULATE, fd, off);
            if (p != MAP_FAILED) {
                fp->lock = epq::DenseLock{};  // what this mapping locks (an earlier one is gone)
                posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
                epq::advise(*fp, p, len);
                ++epq::g_policy.applied;
            }
            return p;
        }
    }
    return __real_mmap(addr, len, prot, flags, fd, off);
}
