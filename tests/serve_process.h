// A real server for the tests: `epq serve`, or stock `llama-server` built from the same pinned
// tree, started on a free port and stopped with SIGTERM.
#pragma once

#include "util/child_process.h"

#include <memory>
#include <string>
#include <vector>

namespace epq::test {

enum class Server { epq, stock };

class ServeProcess {
public:
    // Starts `<server> -m model --host 127.0.0.1 --port 0 -t 2 <extra>` and waits until it
    // listens (llama-server prints its addresses once the model is loaded).
    ServeProcess(const std::string & model, const std::vector<std::string> & extra, Server which = Server::epq);
    // Any command line (args[0] is the program); `--port 0` must be among the flags.
    explicit ServeProcess(const std::vector<std::string> & args);

    int port() const { return port_; }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    // Sends SIGTERM and returns the exit code (128 + signal if it died of one).
    int stop() { return process_->stop(60.0); }
    bool running() const { return process_->running(); }
    std::string log() const { return process_->err(); }  // its stderr so far

private:
    void start(const std::vector<std::string> & args);
    std::unique_ptr<BackgroundProcess> process_;
    int port_ = -1;
};

// The pinned tree's real chat templates (models/templates/NAME).
std::string llama_template(const std::string & name);

}  // namespace epq::test
