#include "bench/time_bound.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace epq {

TimeBound time_bound(const TimeParts & t) {
    const double reads = std::max(0.0, t.read_wait - t.repack);
    const double scheduling = std::max(0.0, t.total - t.compute - std::max(t.read_wait, t.repack));
    const std::vector<std::pair<const char *, double>> parts = {
        {"compute", t.compute}, {"reads", reads}, {"repack", t.repack}, {"scheduling", scheduling}};
    const auto top = std::max_element(parts.begin(), parts.end(),
                                      [](const auto & a, const auto & b) { return a.second < b.second; });
    TimeBound b;
    b.name = top->first;
    b.seconds = top->second;
    char line[256];
    std::snprintf(line, sizeof line,
                  "compute %.1f, reads %.1f, repack %.1f, scheduling %.1f ms; the reads at the disk's floor: %.1f ms",
                  1e3 * t.compute, 1e3 * reads, 1e3 * t.repack, 1e3 * scheduling, 1e3 * t.read_floor);
    b.detail = line;
    return b;
}

}  // namespace epq
