#include "engine/text_stream.h"

#include <algorithm>

namespace epq {

size_t incomplete_utf8_tail(const std::string & s) {
    // Walk back over at most 3 continuation bytes to the lead byte and compare the length it
    // announces with the bytes present.
    const size_t n = s.size();
    for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
        const auto c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) {
            continue;  // continuation byte
        }
        size_t need = 1;
        if ((c & 0xE0) == 0xC0) {
            need = 2;
        } else if ((c & 0xF0) == 0xE0) {
            need = 3;
        } else if ((c & 0xF8) == 0xF0) {
            need = 4;
        }
        return back < need ? back : 0;
    }
    return 0;
}

TextStream::TextStream(std::vector<std::string> stops) {
    for (auto & s : stops) {
        if (!s.empty()) {
            stops_.push_back(std::move(s));
        }
    }
}

std::string TextStream::push(const std::string & piece) {
    if (stopped()) {
        return {};
    }
    pending_ += piece;
    // A complete stop string: the text ends where the earliest one starts.
    size_t cut = std::string::npos;
    for (const auto & s : stops_) {
        const size_t at = pending_.find(s);
        if (at != std::string::npos && at < cut) {
            cut = at;
            stop_word_ = s;
        }
    }
    if (cut != std::string::npos) {
        std::string out = pending_.substr(0, cut);
        pending_.clear();
        released_ += out;
        return out;
    }
    // Hold back the longest tail that is the start of some stop string.
    size_t hold = 0;
    for (const auto & s : stops_) {
        for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
            if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
                hold = len;
                break;
            }
        }
    }
    hold = std::max(hold, incomplete_utf8_tail(pending_));
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, out.size());
    released_ += out;
    return out;
}

std::string TextStream::finish() {
    if (stopped()) {
        return {};
    }
    std::string out;
    out.swap(pending_);
    released_ += out;
    return out;
}

}  // namespace epq
