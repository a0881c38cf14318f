// A real `epq serve` for the tests: started on a free port, stopped with SIGTERM.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace epq::test {

class ServeProcess {
public:
    // Starts `epq serve -m model --port 0 -t 2 <extra>` and waits until it is ready.
    ServeProcess(const std::string & model, const std::vector<std::string> & extra);
    ~ServeProcess();
    ServeProcess(const ServeProcess &) = delete;
    ServeProcess & operator=(const ServeProcess &) = delete;

    int port() const { return port_; }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    // Sends SIGTERM and returns the exit code (128 + signal if it died of one).
    int stop();
    std::string log() const;  // its stderr so far

private:
    pid_t pid_ = -1;
    int port_ = -1;
    std::string log_path_;
};

}  // namespace epq::test
