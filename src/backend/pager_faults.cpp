#include "backend/pager_faults.h"

#include <atomic>

namespace epq {

namespace {
std::atomic<PagerFaultsFactory> g_factory{nullptr};
}

void set_pager_faults_factory(PagerFaultsFactory factory) {
    g_factory.store(factory);
}

std::unique_ptr<PagerFaults> make_pager_faults() {
    const PagerFaultsFactory f = g_factory.load();
    return f ? f() : nullptr;
}

}  // namespace epq
