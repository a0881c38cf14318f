// libFuzzer target: the input is a GGUF model file. It goes through what epq does with a model
// before it touches any memory for it (epq inspect, and PagedModel / the Pager's constructor up
// to the arena plan): ggml's GGUF parser through GgufFile::open, the metadata accessors,
// ExpertIndex::build, SlotLayout::build, the inspect report (text and JSON) and plan_arena.
//
// epq::Error is how epq rejects a bad file, so it is the expected outcome for most inputs. Any
// other exception, a crash, a leak, a sanitizer report, or a broken invariant below (what the
// pager relies on when it reads experts by offset) is a finding.
#include "arena/slot_arena.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "gguf/inspect_report.h"
#include "gguf/slot_layout.h"
#include "util/error.h"

#include "ggml.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <typeinfo>
#include <vector>

namespace {

[[noreturn]] void finding(const std::string & what) {
    std::fprintf(stderr, "fuzz_gguf: FINDING: %s\n", what.c_str());
    std::abort();
}

void require(bool ok, const std::string & what) {
    if (!ok) {
        finding("invariant broken: " + what);
    }
}

// GgufFile::open takes a path (it stats the file, reads the magic, then ggml fopen()s it), so
// each input is written to one memory-backed file that lives as long as the process: no disk
// I/O per input and nothing left behind.
class MemFile {
public:
    MemFile() {
        fd_ = memfd_create("fuzz_gguf", MFD_CLOEXEC);
        if (fd_ < 0) {
            std::perror("fuzz_gguf: memfd_create");
            std::abort();
        }
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    MemFile(const MemFile &) = delete;
    MemFile & operator=(const MemFile &) = delete;

    void assign(const uint8_t * data, size_t size) {
        if (ftruncate(fd_, 0) != 0) {
            std::perror("fuzz_gguf: ftruncate");
            std::abort();
        }
        size_t done = 0;
        while (done < size) {
            const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                std::perror("fuzz_gguf: pwrite");
                std::abort();
            }
            done += static_cast<size_t>(n);
        }
    }

    const std::string & path() const { return path_; }

private:
    int fd_ = -1;
    std::string path_;
};

// [offset, offset + bytes) lies inside a file of `size` bytes (no wrap-around).
bool within(uint64_t offset, uint64_t bytes, uint64_t size) {
    return bytes <= size && offset <= size - bytes;
}

void check_file(const epq::GgufFile & f) {
    for (const auto & t : f.tensors()) {
        require(t.file_offset >= f.data_offset() && within(t.file_offset, t.nbytes, f.file_size()),
                "tensor '" + t.name + "' (" + std::to_string(t.nbytes) + " B at " + std::to_string(t.file_offset) +
                    ") lies outside the " + std::to_string(f.file_size()) + " B file");
        require(f.find_tensor(t.name) == &t, "find_tensor('" + t.name + "') finds another tensor");
    }
    // What the tools read of any model's metadata.
    const std::string arch = f.architecture();
    for (const char * key : {".block_count", ".expert_count", ".expert_used_count", ".embedding_length",
                             ".attention.head_count", ".attention.head_count_kv", ".context_length"}) {
        (void)f.get_int(arch + key);
        (void)f.has_key(arch + key);
    }
    (void)f.get_string("general.name");
    (void)f.get_int("general.alignment");
}

void check_index(const epq::GgufFile & f, const epq::ExpertIndex & idx) {
    require(idx.n_expert > 0 && idx.n_expert_used > 0 && idx.n_expert_used <= idx.n_expert,
            "expert counts " + std::to_string(idx.n_expert_used) + " of " + std::to_string(idx.n_expert));
    require(!idx.layers.empty() && !idx.size_classes.empty(), "an index without expert layers");
    uint64_t largest = 0;
    for (const auto & c : idx.size_classes) {
        largest = std::max(largest, c.slot_bytes);
        require(!c.layers.empty() && idx.layer(c.layers.front()) != nullptr, "a size class without layers");
    }
    require(idx.min_arena_bytes == static_cast<uint64_t>(idx.n_expert_used) * largest, "min_arena_bytes");
    for (const auto & l : idx.layers) {
        require(idx.layer(l.layer) == &l, "layer lookup");
        for (const auto & e : l.tensors) {
            const epq::TensorInfo * t = f.find_tensor(e.name);
            require(t != nullptr && epq::is_routed_expert_matrix(*t, idx.n_expert),
                    "indexed tensor '" + e.name + "' is not a routed expert matrix");
            // The pager reads expert x of this tensor at file_offset + x * expert_stride: the
            // stack is n_expert non-empty matrices, all inside the file.
            uint64_t bytes = 0;
            require(e.expert_stride > 0 &&
                        !__builtin_mul_overflow(e.expert_stride, static_cast<uint64_t>(idx.n_expert), &bytes) &&
                        bytes == t->nbytes && within(e.file_offset, bytes, f.file_size()),
                    "the experts of '" + e.name + "' are not " + std::to_string(idx.n_expert) + " matrices of " +
                        std::to_string(e.expert_stride) + " B inside the file");
        }
    }
}

void check_layout(const epq::ExpertIndex & idx, const epq::SlotLayout & layout) {
    require(layout.layers.size() == idx.layers.size(), "layout and index disagree on the layers");
    require(layout.class_bytes.size() == layout.class_experts.size(), "class tables");
    require(std::is_sorted(layout.class_bytes.begin(), layout.class_bytes.end()), "class sizes not ascending");
    for (const auto & l : layout.layers) {
        require(l.size_class < layout.class_bytes.size() && layout.class_bytes[l.size_class] >= l.bytes,
                "layer " + std::to_string(l.layer) + " does not fit its size class");
        uint64_t at = 0;
        for (const auto & m : l.matrices) {
            require(m.region_begin >= at && m.region_begin <= m.slot_offset && m.slot_offset <= m.region_end &&
                        m.stride <= m.region_end - m.slot_offset && m.region_end <= l.bytes,
                    "matrix '" + m.name + "' does not fit its region of the slot");
            at = m.region_end;
            const epq::MatrixPlacement * found = nullptr;
            require(layout.find(m.name, &found) == &l && found == &m, "layout.find('" + m.name + "')");
        }
    }
}

// What the Pager's constructor does with the layout before it maps the arena.
void check_plan(const epq::ExpertIndex & idx, const epq::SlotLayout & layout) {
    std::vector<epq::SizeClassDemand> demand;
    uint64_t everything = 0;
    bool overflow = false;
    for (size_t c = 0; c < layout.class_bytes.size(); ++c) {
        demand.push_back({layout.class_bytes[c], layout.class_experts[c]});
        uint64_t bytes = 0;
        overflow = overflow || __builtin_mul_overflow(layout.class_bytes[c], layout.class_experts[c], &bytes) ||
                   __builtin_add_overflow(everything, bytes, &everything);
    }
    (void)epq::lfu_half_life_acquires(layout.layers.size(), idx.n_expert_used);

    std::vector<uint64_t> budgets{idx.min_arena_bytes};
    if (!overflow) {
        budgets.push_back(everything);
        budgets.push_back(everything / 2);
    }
    for (const uint64_t budget : budgets) {
        epq::ArenaPlan plan;
        try {
            plan = epq::plan_arena(budget, demand, idx.n_expert_used);
        } catch (const epq::Error & e) {
            // The minimum the index reports must be enough; smaller budgets may be refused.
            require(budget != idx.min_arena_bytes, std::string("the minimum arena is refused: ") + e.what());
            continue;
        }
        require(plan.pools.size() == demand.size(), "one pool per size class");
        uint64_t used = 0;
        for (const auto & p : plan.pools) {
            used += p.slot_bytes * p.n_slots;
        }
        require(used == plan.bytes && plan.bytes <= budget,
                "the plan uses " + std::to_string(plan.bytes) + " B of a " + std::to_string(budget) + " B budget");
        // Classes of equal slot size may come in either order: take the smallest one's count.
        uint64_t cap = UINT64_MAX;
        for (size_t c = 0; c < layout.class_bytes.size(); ++c) {
            if (layout.class_bytes[c] == layout.class_bytes.back()) {
                cap = std::min(cap, layout.class_experts[c]);
            }
        }
        require(plan.pools.back().n_slots >= std::min<uint64_t>(idx.n_expert_used, cap),
                "the largest class cannot hold one layer's selected experts");
    }
}

void run(const std::string & path) {
    const epq::GgufFile f = epq::GgufFile::open(path);
    check_file(f);
    const bool moe = epq::has_routed_experts(f);
    const epq::ExpertIndex idx = epq::ExpertIndex::build(f);
    require(moe, "ExpertIndex::build accepted a file that has_routed_experts calls dense");
    check_index(f, idx);
    const epq::SlotLayout layout = epq::SlotLayout::build(idx);
    check_layout(idx, layout);
    // epq inspect, both forms (the JSON one serialised as the command does).
    (void)epq::inspect_text(f, idx, true);
    (void)epq::inspect_json(f, idx).dump(2);
    check_plan(idx, layout);
}

void quiet_log(ggml_log_level, const char *, void *) {}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    // ggml logs every rejection to stderr; at thousands of inputs a second that buries the
    // fuzzer's own output. GgufFile::open still sees the messages (it installs its own logger).
    ggml_log_set(quiet_log, nullptr);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static MemFile file;
    file.assign(data, size);
    try {
        run(file.path());
    } catch (const epq::Error &) {
        // A rejected file: the expected outcome.
    } catch (const std::exception & e) {
        finding(std::string("uncaught ") + typeid(e).name() + ": " + e.what());
    }
    return 0;
}
