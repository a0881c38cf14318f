// epq serve: llama.cpp's llama-server with the pager (src/server/serve.h). main() hands it the
// command line before CLI11 parses anything, since llama.cpp's own parser reads the flags; this
// entry only lists it in `epq --help`.
#include "commands.h"

namespace epq::cli {

Handler add_serve(CLI::App & app) {
    auto * sub = app.add_subcommand("serve",
                                    "llama.cpp's llama-server with the pager: every llama-server flag, route and "
                                    "its web UI, plus the pager's view at /epq/ (epq serve --help)");
    sub->allow_extras();
    return [] { return 0; };
}

}  // namespace epq::cli
