#include "serve_process.h"

#include "test_util.h"

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace epq::test {

ServeProcess::ServeProcess(const std::string & model, const std::vector<std::string> & extra) {
    static int counter = 0;
    log_path_ = temp_dir() + "/serve" + std::to_string(counter++) + ".err";
    std::vector<std::string> args = {EPQ_BINARY, "serve", "-m", model, "--port", "0", "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
        const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        const int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        std::vector<char *> argv;
        for (auto & a : args) {
            argv.push_back(const_cast<char *>(a.c_str()));
        }
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        _exit(127);
    }
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
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            throw std::runtime_error("epq serve exited before it was ready:\n" + text);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("epq serve was not ready within 120 s:\n" + log());
}

ServeProcess::~ServeProcess() {
    if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
}

int ServeProcess::stop() {
    if (pid_ <= 0) {
        return -1;
    }
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ServeProcess::log() const {
    std::ifstream in(log_path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace epq::test
