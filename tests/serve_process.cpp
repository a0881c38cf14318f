#include "serve_process.h"

#include "test_util.h"

#include "bench/serve_bench.h"
#include "util/error.h"

#include <stdexcept>

namespace epq::test {

ServeProcess::ServeProcess(const std::string & model, const std::vector<std::string> & extra, Server which) {
    std::vector<std::string> args;
    if (which == Server::epq) {
        args = {EPQ_BINARY, "serve"};
    } else {
        args = {EPQ_LLAMA_SERVER_BINARY};
    }
    args.insert(args.end(), {"-m", model, "--host", "127.0.0.1", "--port", "0", "-t", "2"});
    args.insert(args.end(), extra.begin(), extra.end());
    start(args);
}

ServeProcess::ServeProcess(const std::vector<std::string> & args) {
    start(args);
}

void ServeProcess::start(const std::vector<std::string> & args) {
    static int counter = 0;
    process_ = std::make_unique<BackgroundProcess>(args, temp_dir() + "/serve" + std::to_string(counter++) + ".err");
    try {
        port_ = wait_until_serving(*process_, 180);
    } catch (const Error & e) {
        throw std::runtime_error(std::string(e.what()) + ":\n" + log());
    }
}

std::string llama_template(const std::string & name) {
    return std::string(EPQ_LLAMA_SOURCE_DIR) + "/models/templates/" + name;
}

}  // namespace epq::test
