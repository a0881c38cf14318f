#include "backend/graph_compute_count.h"

namespace epq {

std::atomic<uint64_t> & ggml_graph_compute_counter() {
    static std::atomic<uint64_t> n{0};
    return n;
}

}  // namespace epq
