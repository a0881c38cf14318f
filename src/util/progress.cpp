#include "util/progress.h"

#include "util/byte_size.h"

#include <cstdio>
#include <unistd.h>

namespace epq {

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void Progress::advance(uint64_t bytes) {
    done_ += bytes;
    if (!enabled_) {
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (tty_) {
        if (now - last_draw_ > std::chrono::milliseconds(200)) {
            last_draw_ = now;
            draw(false);
        }
    } else {
        const int decile = total_ ? static_cast<int>(done_ * 10 / total_) : 10;
        if (decile != last_decile_ && decile < 10) {
            last_decile_ = decile;
            draw(false);
        }
    }
}

void Progress::finish() {
    if (enabled_) {
        draw(true);
    }
}

void Progress::draw(bool final_line) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    const double rate = secs > 0 ? static_cast<double>(done_) / secs : 0.0;
    const int width = 30;
    const int fill = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(width, '.');
    char eta[32] = "";
    if (!final_line && rate > 0 && done_ < total_) {
        std::snprintf(eta, sizeof eta, ", ETA %.0fs", static_cast<double>(total_ - done_) / rate);
    }
    std::fprintf(stderr, "%s%s [%s] %5.1f%%  %s / %s  %s/s  %.1fs%s%s", tty_ ? "\r" : "", label_.c_str(), bar.c_str(),
                 frac * 100.0, format_bytes(done_).c_str(), format_bytes(total_).c_str(),
                 format_bytes(static_cast<uint64_t>(rate)).c_str(), secs, eta, (final_line || !tty_) ? "\n" : "");
    std::fflush(stderr);
}

}  // namespace epq
