// How many graphs ggml's CPU backend has computed in this process, llama.cpp's and the pager's
// alike. Each one is a parallel region of ggml's thread team (OpenMP here): its start wakes the
// other threads, so computes x (threads - 1) bounds the wake-ups. Counted by a linker wrap of
// ggml_graph_compute (graph_compute_wrap.cpp) in the binaries that link it; 0 elsewhere.
#pragma once

#include <atomic>
#include <cstdint>

namespace epq {

std::atomic<uint64_t> & ggml_graph_compute_counter();

}  // namespace epq
