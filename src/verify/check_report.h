// The outcome of one verify check: a verdict, a Markdown report in the seeds' style and the
// same numbers as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace epq {

struct CheckReport {
    std::string check;  // "kernel", "layer", ...
    bool pass = false;
    std::string summary;  // one line
    std::string markdown;
    nlohmann::json json;

    // Writes <dir>/<check>.md and <dir>/<check>.json; throws epq::Error if it cannot.
    void write(const std::string & dir) const;
};

// Formats a float the way the seed reports do (shortest exact form; 0.0 for zero).
std::string fmt_float(double v);

}  // namespace epq
