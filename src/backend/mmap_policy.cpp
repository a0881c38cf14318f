#include "backend/mmap_policy.h"

#include <cerrno>
#include <fcntl.h>
#include <mutex>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

extern "C" void * __real_mmap(void * addr, size_t len, int prot, int flags, int fd, off_t off);

namespace epq {

namespace {

struct Policy {
    bool active = false;
    dev_t dev = 0;
    ino_t ino = 0;
    std::vector<std::pair<uint64_t, uint64_t>> dense;
    int applied = 0;
    DenseLock lock;
};

std::mutex g_mu;
Policy g_policy;

bool matches(int fd) {
    struct stat st {};
    return g_policy.active && fstat(fd, &st) == 0 && st.st_dev == g_policy.dev && st.st_ino == g_policy.ino;
}

void advise(void * base, size_t len) {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    posix_madvise(base, len, POSIX_MADV_RANDOM);
    for (const auto & [b, e] : g_policy.dense) {
        const uint64_t begin = b & ~(page - 1);
        const uint64_t end = std::min<uint64_t>((e + page - 1) & ~(page - 1), len);
        if (begin >= end) {
            continue;
        }
        char * p = static_cast<char *>(base) + begin;
        // Locked, the dense bytes stay in RAM: every token reads them, and under a memory cap the
        // kernel would otherwise reclaim them like any page cache and fault them back 4 KiB at a
        // time (the mapping is random-access), measured as 100k+ major faults in one capped
        // prefill. Locking reads them now; where it is not allowed, they are only prefetched.
        if (g_policy.lock.error == 0 && mlock(p, end - begin) == 0) {
            g_policy.lock.bytes += end - begin;
        } else {
            g_policy.lock.error = g_policy.lock.error != 0 ? g_policy.lock.error : errno;
            posix_madvise(p, end - begin, POSIX_MADV_WILLNEED);
        }
    }
}

}  // namespace

void set_lazy_mapping(const std::string & path, std::vector<std::pair<uint64_t, uint64_t>> dense) {
    std::lock_guard<std::mutex> lock(g_mu);
    struct stat st {};
    g_policy.active = stat(path.c_str(), &st) == 0;
    g_policy.dev = st.st_dev;
    g_policy.ino = st.st_ino;
    g_policy.dense = std::move(dense);
    g_policy.lock = DenseLock{};
}

void clear_lazy_mapping() {
    std::lock_guard<std::mutex> lock(g_mu);
    g_policy.active = false;
    g_policy.dense.clear();
}

DenseLock dense_lock() {
    std::lock_guard<std::mutex> lock(g_mu);
    return g_policy.lock;
}

int lazy_mappings_applied() {
    std::lock_guard<std::mutex> lock(g_mu);
    return g_policy.applied;
}

}  // namespace epq

extern "C" void * __wrap_mmap(void * addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (fd >= 0 && (flags & MAP_POPULATE) != 0) {
        std::lock_guard<std::mutex> lock(epq::g_mu);
        if (epq::matches(fd)) {
            void * p = __real_mmap(addr, len, prot, flags & ~MAP_POPULATE, fd, off);
            if (p != MAP_FAILED) {
                posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
                epq::advise(p, len);
                ++epq::g_policy.applied;
            }
            return p;
        }
    }
    return __real_mmap(addr, len, prot, flags, fd, off);
}
