#include "server/web_assets.h"

namespace epq::server {

namespace {

bool ends_with(const std::string & s, const char * tail) {
    const std::string t(tail);
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

const char * web_content_type(const std::string & path) {
    if (ends_with(path, ".js")) {
        return "text/javascript; charset=utf-8";
    }
    if (ends_with(path, ".css")) {
        return "text/css; charset=utf-8";
    }
    return "text/html; charset=utf-8";
}

}  // namespace epq::server
