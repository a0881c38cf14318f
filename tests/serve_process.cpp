#include "serve_process.h"

#include "test_util.h"

#include <chrono>
#include <stdexcept>
#include <thread>

namespace epq::test {

ServeProcess::ServeProcess(const std::string & model, const std::vector<std::string> & extra) {
    static int counter = 0;
    std::vector<std::string> args = {EPQ_BINARY, "serve", "-m", model, "--port", "0", "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    process_ = std::make_unique<BackgroundProcess>(args, temp_dir() + "/serve" + std::to_string(counter++) + ".err");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
        const std::string text = log();
        const size_t at = text.find("listening on http://127.0.0.1:");
        if (at != std::string::npos && port_ < 0) {
            port_ = std::atoi(text.c_str() + at + 30);
        }
        if (text.find(" ready in ") != std::string::npos) {
            return;
        }
        if (!process_->running()) {
            throw std::runtime_error("epq serve exited before it was ready:\n" + text);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("epq serve was not ready within 120 s:\n" + log());
}

}  // namespace epq::test
