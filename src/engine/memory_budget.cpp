#include "engine/memory_budget.h"

#include "util/byte_size.h"
#include "util/error.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

namespace epq {

namespace {

std::optional<uint64_t> read_number(const std::string & path) {
    std::ifstream in(path);
    std::string s;
    if (!(in >> s) || s == "max") {
        return std::nullopt;
    }
    try {
        return std::stoull(s);
    } catch (...) {
        return std::nullopt;
    }
}

uint64_t stat_field(const std::string & path, const std::string & key) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string k;
        uint64_t v = 0;
        if (fields >> k >> v && k == key) {
            return v;
        }
    }
    return 0;
}

// This process's cgroup directory for a controller, from /proc/self/cgroup.
std::string cgroup_dir(bool v2) {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
        const auto a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) {
            continue;
        }
        const std::string ctrl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (v2 && line.compare(0, 2, "0:") == 0 && ctrl.empty()) {
            return "/sys/fs/cgroup" + path;
        }
        if (!v2 && (ctrl == "memory" || ctrl.find("memory") != std::string::npos)) {
            return "/sys/fs/cgroup/memory" + path;
        }
    }
    return "";
}

}  // namespace

MemoryAvailable available_memory() {
    MemoryAvailable m;
    uint64_t meminfo = stat_field("/proc/meminfo", "MemAvailable:") * 1024;
    m.bytes = meminfo;
    m.source = "MemAvailable " + format_bytes(meminfo);

    // A memory cgroup limit (v1, then v2): what it leaves, counting reclaimable page cache as free.
    for (bool v2 : {false, true}) {
        const std::string dir = cgroup_dir(v2);
        if (dir.empty()) {
            continue;
        }
        const auto limit = read_number(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
        const auto usage = read_number(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
        if (!limit || !usage || *limit >= (1ULL << 60)) {
            continue;
        }
        const uint64_t cache = stat_field(dir + "/memory.stat", v2 ? "inactive_file" : "total_inactive_file");
        const uint64_t used = *usage > cache ? *usage - cache : 0;
        const uint64_t left = *limit > used ? *limit - used : 0;
        if (left < m.bytes) {
            m.bytes = left;
            m.source = "cgroup limit " + format_bytes(*limit) + " - in use " + format_bytes(used);
        }
        break;
    }
    return m;
}

namespace {

uint64_t sum(const MemoryNeeds & n) {
    uint64_t s = n.dense + n.kv + n.compute + n.pager_scratch;
    for (const auto & [name, bytes] : n.other) {
        s += bytes;
    }
    return s;
}

std::string itemize(const MemoryAvailable & mem, const MemoryNeeds & n) {
    std::ostringstream why;
    why << "available " << format_bytes(mem.bytes) << " (" << mem.source << ") - dense weights "
        << format_bytes(n.dense) << " - KV cache " << format_bytes(n.kv) << " - compute buffers "
        << format_bytes(n.compute) << " - pager scratch " << format_bytes(n.pager_scratch);
    for (const auto & [name, bytes] : n.other) {
        why << " - " << name << " " << format_bytes(bytes);
    }
    return why.str();
}

}  // namespace

ArenaSizing auto_arena(const MemoryAvailable & mem, const MemoryNeeds & needs, uint64_t min_arena) {
    // What the estimates above miss (the vocabulary, thread stacks, allocator slack) plus room to
    // spare. A memory cgroup reclaims only at its limit, and an arena that filled it slowed a
    // capped 64-token prefill from 11 s to 37 s (the 35B preset under 8 GiB: expert reads at
    // 475 MiB/s instead of 1.9 GiB/s).
    const uint64_t headroom = std::max<uint64_t>(64ull << 20, mem.bytes / 16);
    const uint64_t reserved = sum(needs) + headroom;
    const std::string why = itemize(mem, needs) + " - headroom " + format_bytes(headroom);
    if (mem.bytes < reserved + min_arena) {
        throw Error("not enough memory for the arena: " + why + " leaves less than the minimum arena of " +
                    format_bytes(min_arena) + "; free memory, lower -c or -b, or pass --arena explicitly");
    }
    ArenaSizing s;
    s.arena_bytes = mem.bytes - reserved;
    s.reasoning = why + " = " + format_bytes(s.arena_bytes);
    return s;
}

void check_arena_fits(const MemoryAvailable & mem, const MemoryNeeds & needs, uint64_t arena,
                      const std::string & flag) {
    const uint64_t rest = sum(needs);
    if (arena <= mem.bytes && rest <= mem.bytes - arena) {
        return;
    }
    const uint64_t room = mem.bytes > rest ? mem.bytes - rest : 0;
    throw Error(flag + " (" + format_bytes(arena) + ") does not fit: " + itemize(mem, needs) + " leaves " +
                format_bytes(room) + " for experts; pass a smaller --arena, --arena auto, or lower -c or -b");
}

}  // namespace epq
