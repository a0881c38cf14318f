// The outcome of one verify check: a verdict, a Markdown report in the seeds' style and the
// same numbers as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace epq {

// NOT CHECKED: the check could not judge something (a weight format or expert layout its oracle
// does not model). It is not a failure (exit code 0), and never shown as a pass.
enum class Status { Pass, Fail, NotChecked };

// "PASS", "FAIL", "NOT CHECKED".
std::string status_label(Status s);
// The label back; anything unknown is FAIL.
Status status_from_label(const std::string & label);
// Two verdicts together: any FAIL fails, else any NOT CHECKED, else PASS.
Status combine(Status a, Status b);

struct CheckReport {
    std::string check;  // "kernel", "layer", ...
    Status status = Status::Fail;
    std::string summary;  // one line
    std::string markdown;
    nlohmann::json json;

    bool failed() const { return status == Status::Fail; }
    // Writes <dir>/<check>.md and <dir>/<check>.json; throws epq::Error if it cannot.
    void write(const std::string & dir) const;
};

// Formats a float the way the seed reports do (shortest exact form; 0.0 for zero).
std::string fmt_float(double v);

}  // namespace epq
