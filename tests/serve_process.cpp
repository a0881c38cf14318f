#include "serve_process.h"

#include <algorithm>

#include "test_util.h"

#include "bench/serve_bench.h"
#include "util/error.h"

#include <stdexcept>

namespace epq::test {

ServeProcess::ServeProcess(const std::string & model, const std::vector<std::string> & extra) {
    static int counter = 0;
    std::vector<std::string> args = {EPQ_BINARY, "serve", "-m", model, "--port", "0", "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    // A short disk floor for the page: the tests start many servers.
    if (std::find(extra.begin(), extra.end(), "--read-floor-seconds") == extra.end()) {
        args.insert(args.end(), {"--read-floor-seconds", "0.1"});
    }
    process_ = std::make_unique<BackgroundProcess>(args, temp_dir() + "/serve" + std::to_string(counter++) + ".err");
    try {
        port_ = wait_until_serving(*process_, 120);
    } catch (const Error & e) {
        throw std::runtime_error(std::string(e.what()) + ":\n" + log());
    }
}

}  // namespace epq::test
