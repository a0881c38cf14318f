#include "verify/check_report.h"

#include "util/error.h"

#include <cstdio>
#include <fstream>
#include <sys/stat.h>

namespace epq {

std::string status_label(Status s) {
    switch (s) {
        case Status::Pass: return "PASS";
        case Status::NotChecked: return "NOT CHECKED";
        case Status::Fail: break;
    }
    return "FAIL";
}

Status status_from_label(const std::string & label) {
    if (label == "PASS") {
        return Status::Pass;
    }
    return label == "NOT CHECKED" ? Status::NotChecked : Status::Fail;
}

Status combine(Status a, Status b) {
    if (a == Status::Fail || b == Status::Fail) {
        return Status::Fail;
    }
    return a == Status::NotChecked || b == Status::NotChecked ? Status::NotChecked : Status::Pass;
}

std::string fmt_float(double v) {
    if (v == 0.0) {
        return "0.0";
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

void CheckReport::write(const std::string & dir) const {
    ::mkdir(dir.c_str(), 0755);
    std::ofstream md(dir + "/" + check + ".md");
    md << markdown;
    std::ofstream js(dir + "/" + check + ".json");
    nlohmann::json j = json;
    j["check"] = check;
    j["status"] = status_label(status);
    j["pass"] = status == Status::Pass;
    j["summary"] = summary;
    js << j.dump(2) << "\n";
    if (!md || !js) {
        throw Error("cannot write the report into " + dir);
    }
}

}  // namespace epq
