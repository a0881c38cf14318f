// epq serve: llama.cpp's own server (llama_server() from the pinned tree's server library) with
// the pager inside. epq takes its own flags out (serve_args.h), lets llama.cpp's parser read
// everything else, sizes the arena around what the server holds (serve_budget.h), overrides the
// expert tensors to the pager's buffer type, and adds the pager's view to the same HTTP server
// (pager_routes.h, through server_hooks.h).
#pragma once

namespace epq::server {

// argv[0] is the program, the rest what followed `serve`. Returns the exit code.
int serve_main(int argc, char ** argv);

}  // namespace epq::server
