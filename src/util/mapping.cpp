#include "util/mapping.h"

#include "util/byte_size.h"
#include "util/error.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <utility>

namespace epq {

Mapping Mapping::anonymous(size_t bytes, const char * what) {
    if (bytes == 0) {
        return {};
    }
    void * m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        throw Error(std::string("cannot reserve ") + format_bytes(bytes) + " for " + what + ": " +
                    std::strerror(errno));
    }
    return Mapping(static_cast<uint8_t *>(m), bytes);
}

Mapping Mapping::read_only(int fd, size_t bytes) noexcept {
    void * m = bytes ? mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    return m == MAP_FAILED ? Mapping() : Mapping(static_cast<uint8_t *>(m), bytes);
}

Mapping::Mapping(Mapping && other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

Mapping & Mapping::operator=(Mapping && other) noexcept {
    if (this != &other) {
        reset();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void Mapping::reset() noexcept {
    if (data_) {
        munmap(data_, size_);
    }
    data_ = nullptr;
    size_ = 0;
}

}  // namespace epq
