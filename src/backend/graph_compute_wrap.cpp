// Linked with -Wl,--wrap=ggml_graph_compute: counts every graph ggml's CPU backend computes
// (see graph_compute_count.h), then computes it unchanged.
#include "backend/graph_compute_count.h"

#include "ggml-cpu.h"

extern "C" enum ggml_status __real_ggml_graph_compute(struct ggml_cgraph * cgraph, struct ggml_cplan * cplan);

extern "C" enum ggml_status __wrap_ggml_graph_compute(struct ggml_cgraph * cgraph, struct ggml_cplan * cplan) {
    epq::ggml_graph_compute_counter().fetch_add(1, std::memory_order_relaxed);
    return __real_ggml_graph_compute(cgraph, cplan);
}
