// The text a completion releases to its client as tokens arrive: it holds back what might still
// become a stop string and the bytes of an unfinished UTF-8 character, so a client never sees
// half a stop word or half a character, and cuts the text where a stop string completes.
// Pure: no llama.cpp.
#pragma once

#include <string>
#include <vector>

namespace epq {

class TextStream {
public:
    explicit TextStream(std::vector<std::string> stops = {});

    // Appends a token's text; returns the text that is now safe to release (may be empty).
    // After a stop string completes, stopped() is true and nothing more is released.
    std::string push(const std::string & piece);
    // The end of the completion: releases what was held back (unless a stop string matched).
    std::string finish();

    bool stopped() const { return !stop_word_.empty(); }
    const std::string & stop_word() const { return stop_word_; }
    // Everything released so far (the completion's text).
    const std::string & released() const { return released_; }

private:
    std::vector<std::string> stops_;
    std::string pending_;   // received, not yet released
    std::string released_;  // released so far
    std::string stop_word_;
};

// Bytes at the end of `s` that start a UTF-8 character whose continuation bytes are missing.
size_t incomplete_utf8_tail(const std::string & s);

}  // namespace epq
