#include "faults/planted_faults.h"

#include "backend/pager_faults.h"
#include "io/direct_reader.h"
#include "util/error.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fcntl.h>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>

namespace epq::faults {

namespace {

IoFault g_io;
std::atomic<uint64_t> g_calls{0}, g_planted{0};

ssize_t faulty_pread(int fd, void * buf, size_t n, off_t offset) {
    const uint64_t call = ++g_calls;
    bool hit = call >= g_io.after && (g_io.count == 0 || call < g_io.after + g_io.count);
    if (hit && g_io.kind == IoFault::Kind::eintr) {
        hit = (call - g_io.after) % 2 == 0;  // every other call: the retry gets through
    }
    if (hit && g_io.kind == IoFault::Kind::einval_direct) {
        const int flags = fcntl(fd, F_GETFL);
        hit = flags >= 0 && (flags & O_DIRECT) != 0;
    }
    if (!hit) {
        return ::pread(fd, buf, n, offset);
    }
    ++g_planted;
    switch (g_io.kind) {
        case IoFault::Kind::eio: errno = EIO; return -1;
        case IoFault::Kind::eintr: errno = EINTR; return -1;
        case IoFault::Kind::einval_direct: errno = EINVAL; return -1;
        case IoFault::Kind::short_read: {
            // Whole blocks, as a device returns them, so a direct read can go on from there.
            const size_t half = n / 2 / 4096 * 4096;
            return ::pread(fd, buf, half > 0 ? half : n, offset);
        }
        case IoFault::Kind::slow:
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            return ::pread(fd, buf, n, offset);
        case IoFault::Kind::none: break;
    }
    return ::pread(fd, buf, n, offset);
}

class CorruptSlot : public PagerFaults {
public:
    explicit CorruptSlot(uint64_t after) : countdown_(after) {}
    void landed(uint8_t * row, size_t bytes) override {
        if (countdown_ > 0 && --countdown_ == 0) {
            // Every block's scales and codes of the row, so the damage shows whatever the type's
            // block layout (one flipped bit can land on a code whose activation quantizes to zero).
            for (size_t i = 0; i < bytes; ++i) {
                row[i] ^= 0xFF;
            }
        }
    }
    uint32_t slot(uint32_t s, uint32_t) override { return s; }

private:
    uint64_t countdown_;
};

class WrongSlot : public PagerFaults {
public:
    explicit WrongSlot(uint64_t after) : countdown_(after) {}
    void landed(uint8_t *, size_t) override {}
    uint32_t slot(uint32_t s, uint32_t n) override {
        if (countdown_ > 0 && --countdown_ == 0) {
            active_ = true;
        }
        return active_ && n > 1 ? (s + 1) % n : s;
    }

private:
    uint64_t countdown_;
    bool active_ = false;
};

// Plain values, constant-initialized: plant_from_env runs from another file's static initializer.
bool g_corrupt = false;
uint64_t g_pager_after = 1;

std::unique_ptr<PagerFaults> make_planted() {
    if (g_corrupt) {
        return std::make_unique<CorruptSlot>(g_pager_after);
    }
    return std::make_unique<WrongSlot>(g_pager_after);
}

uint64_t parse_count(const std::string & v, const std::string & spec) {
    char * end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') {
        throw Error("EPQ_IO_FAULT '" + spec + "': '" + v + "' is not a count");
    }
    return n;
}

}  // namespace

IoFault parse_io_fault(const std::string & spec) {
    IoFault f;
    size_t at = spec.find(',');
    const std::string kind = spec.substr(0, at);
    if (kind == "eio") {
        f.kind = IoFault::Kind::eio;
        f.count = 1;
    } else if (kind == "short") {
        f.kind = IoFault::Kind::short_read;
    } else if (kind == "eintr") {
        f.kind = IoFault::Kind::eintr;
    } else if (kind == "slow") {
        f.kind = IoFault::Kind::slow;
    } else if (kind == "einval") {
        f.kind = IoFault::Kind::einval_direct;
    } else {
        throw Error("EPQ_IO_FAULT '" + spec + "': unknown kind '" + kind + "' (eio, short, eintr, slow or einval)");
    }
    while (at != std::string::npos) {
        const size_t next = spec.find(',', at + 1);
        const std::string item = spec.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
        if (item.rfind("after=", 0) == 0) {
            f.after = std::max<uint64_t>(1, parse_count(item.substr(6), spec));
        } else if (item.rfind("count=", 0) == 0) {
            f.count = parse_count(item.substr(6), spec);
        } else {
            throw Error("EPQ_IO_FAULT '" + spec + "': unknown item '" + item + "' (after=N or count=M)");
        }
        at = next;
    }
    return f;
}

void plant_io_fault(const IoFault & f) {
    g_io = f;
    g_calls = 0;
    g_planted = 0;
    DirectReader::set_pread(f.kind == IoFault::Kind::none ? nullptr : faulty_pread);
}

uint64_t io_calls() {
    return g_calls.load();
}

uint64_t io_faults_planted() {
    return g_planted.load();
}

void plant_pager_fault(const std::string & kind, uint64_t after) {
    if (kind.empty()) {
        set_pager_faults_factory(nullptr);
        return;
    }
    if (kind != "corrupt-slot" && kind != "wrong-slot") {
        throw Error("unknown EPQ_FAULT '" + kind + "' (corrupt-slot or wrong-slot)");
    }
    g_corrupt = kind == "corrupt-slot";
    g_pager_after = std::max<uint64_t>(1, after);
    set_pager_faults_factory(make_planted);
}

void plant_from_env() {
    try {
        if (const char * kind = std::getenv("EPQ_FAULT"); kind && *kind) {
            const char * after = std::getenv("EPQ_FAULT_AFTER");
            plant_pager_fault(kind, after ? std::strtoull(after, nullptr, 10) : 1);
        }
        if (const char * io = std::getenv("EPQ_IO_FAULT"); io && *io) {
            plant_io_fault(parse_io_fault(io));
            // So that a test can tell its fault was met, not skipped by a run that read nothing.
            std::atexit([] {
                std::fprintf(stderr, "epq-faults: planted %llu faults in %llu read calls\n",
                             static_cast<unsigned long long>(io_faults_planted()),
                             static_cast<unsigned long long>(io_calls()));
            });
        }
    } catch (const Error & e) {
        std::fprintf(stderr, "epq-faults: %s\n", e.what());
        std::exit(2);
    }
}

}  // namespace epq::faults
