// llama.cpp's log: quiet by default (errors only, prefixed), everything with --verbose.
#pragma once

namespace epq {

void set_llama_verbosity(bool verbose);

}  // namespace epq
