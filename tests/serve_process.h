// A real `epq serve` for the tests: started on a free port, stopped with SIGTERM.
#pragma once

#include "util/child_process.h"

#include <memory>
#include <string>
#include <vector>

namespace epq::test {

class ServeProcess {
public:
    // Starts `epq serve -m model --port 0 -t 2 <extra>` and waits until it is ready.
    ServeProcess(const std::string & model, const std::vector<std::string> & extra);

    int port() const { return port_; }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    // Sends SIGTERM and returns the exit code (128 + signal if it died of one).
    int stop() { return process_->stop(60.0); }
    std::string log() const { return process_->err(); }  // its stderr so far

private:
    std::unique_ptr<BackgroundProcess> process_;
    int port_ = -1;
};

}  // namespace epq::test
