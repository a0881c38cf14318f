// The serve page's files (src/server/web), built into the binary: the page works with no
// network and nothing is read from disk at run time.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace epq::server {

struct WebAsset {
    const char * path;  // "/index.html", "/app.js", ...
    const unsigned char * data;
    size_t size;
};

const std::vector<WebAsset> & web_assets();

// Content-Type by the file's extension.
const char * web_content_type(const std::string & path);

}  // namespace epq::server
