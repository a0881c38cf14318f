// A byte-count progress line on stderr: redrawn in place on a terminal, a line every 10%
// otherwise, so logs stay short.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace epq {

class Progress {
public:
    Progress(std::string label, uint64_t total, bool enabled = true);
    void advance(uint64_t bytes);
    void finish();

private:
    void draw(bool final_line);

    std::string label_;
    uint64_t total_;
    uint64_t done_ = 0;
    bool enabled_;
    bool tty_;
    int last_decile_ = -1;
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace epq
