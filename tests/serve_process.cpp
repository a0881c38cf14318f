#include "serve_process.h"

#include "test_util.h"

#include "bench/serve_bench.h"
#include "util/error.h"

#include <stdexcept>

namespace epq::test {

ServeProcess::ServeProcess(const std::string & model, const std::vector<std::string> & extra) {
    static int counter = 0;
    std::vector<std::string> args = {EPQ_BINARY, "serve", "-m", model, "--port", "0", "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    process_ = std::make_unique<BackgroundProcess>(args, temp_dir() + "/serve" + std::to_string(counter++) + ".err");
    try {
        port_ = wait_until_serving(*process_, 120);
    } catch (const Error & e) {
        throw std::runtime_error(std::string(e.what()) + ":\n" + log());
    }
}

}  // namespace epq::test
