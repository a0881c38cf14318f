#include "verify/check_report.h"

#include "util/error.h"

#include <cstdio>
#include <fstream>
#include <sys/stat.h>

namespace epq {

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
    j["pass"] = pass;
    j["summary"] = summary;
    js << j.dump(2) << "\n";
    if (!md || !js) {
        throw Error("cannot write the report into " + dir);
    }
}

}  // namespace epq
