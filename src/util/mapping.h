// A memory mapping owned like a unique_ptr: unmapped when its owner goes, whatever the path
// (a constructor that throws after mapping, an early return), and movable, never copied.
#pragma once

#include <cstddef>
#include <cstdint>

namespace epq {

class Mapping {
public:
    Mapping() = default;
    // Private anonymous memory, reserved without commitment (MAP_NORESERVE): pages are taken on
    // first touch. Throws epq::Error naming `what` when the address space is refused.
    static Mapping anonymous(size_t bytes, const char * what);
    // The first `bytes` of `fd`, read-only and shared with the page cache; an empty mapping
    // (check with data()) when the kernel refuses.
    static Mapping read_only(int fd, size_t bytes) noexcept;

    ~Mapping() { reset(); }
    Mapping(Mapping && other) noexcept;
    Mapping & operator=(Mapping && other) noexcept;
    Mapping(const Mapping &) = delete;
    Mapping & operator=(const Mapping &) = delete;

    uint8_t * data() const { return data_; }
    size_t size() const { return size_; }
    void reset() noexcept;

private:
    Mapping(uint8_t * data, size_t size) : data_(data), size_(size) {}
    uint8_t * data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace epq
