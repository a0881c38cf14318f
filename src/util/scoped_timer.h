// Adds the time a scope takes to a running total: the pager's time accounting.
#pragma once

#include <chrono>

namespace epq {

class ScopedTimer {
public:
    explicit ScopedTimer(double & total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
    ~ScopedTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
    ScopedTimer(const ScopedTimer &) = delete;
    ScopedTimer & operator=(const ScopedTimer &) = delete;

private:
    double & total_;
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace epq
