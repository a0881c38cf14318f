#include "bench/read_floor.h"

#include "gguf/slot_layout.h"
#include "backend/expert_store.h"
#include "io/read_pool.h"
#include "util/error.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>

namespace epq {

ReadFloor measure_expert_reads(const std::string & path, const ExpertIndex & index, int threads, double seconds,
                               uint64_t seed, size_t depth) {
    const SlotLayout layout = SlotLayout::build(index);
    if (layout.layers.empty()) {
        throw Error(path + " has no routed experts to read");
    }
    ModelReader reader(model_file_parts(index));
    ReadPool pool(reader, threads);
    const uint64_t slot = layout.class_bytes.back();
    depth = depth > 0 ? depth : static_cast<size_t>(threads) * 8;
    depth = std::max<size_t>(1, std::min<size_t>(depth, (256ull << 20) / layout.class_bytes.back()));  // buffers
    struct Free {
        void operator()(uint8_t * p) const { std::free(p); }
    };
    std::vector<std::unique_ptr<uint8_t, Free>> bufs;
    for (size_t i = 0; i < depth; ++i) {
        void * p = nullptr;
        if (posix_memalign(&p, 4096, slot) != 0) {
            throw Error("cannot allocate read buffers");
        }
        bufs.emplace_back(static_cast<uint8_t *>(p));
    }
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<size_t> pick_layer(0, layout.layers.size() - 1);
    std::uniform_int_distribution<uint32_t> pick_expert(0, index.n_expert - 1);

    ReadFloor f;
    f.direct = reader.direct();
    std::deque<std::pair<std::shared_ptr<Ticket>, uint64_t>> inflight;
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&]() { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    size_t next_buf = 0;
    while (elapsed() < seconds || !inflight.empty()) {
        while (inflight.size() < depth && elapsed() < seconds) {
            const LayerLayout & l = layout.layers[pick_layer(rng)];
            const uint32_t e = pick_expert(rng);
            std::vector<ReadRequest> reqs;
            uint64_t bytes = 0;
            for (const auto & m : l.matrices) {
                ReadRequest q;
                q.offset = m.file_offset + static_cast<uint64_t>(e) * m.stride;
                q.len = m.stride;
                q.dst = bufs[next_buf].get() + m.slot_offset;
                q.room_before = m.slot_offset - m.region_begin;
                q.room_after = m.region_end - (m.slot_offset + m.stride);
                reqs.push_back(q);
                bytes += m.stride;
            }
            next_buf = (next_buf + 1) % depth;
            inflight.emplace_back(pool.submit(reqs), bytes);
        }
        if (inflight.empty()) {
            break;
        }
        inflight.front().first->wait();
        f.bytes += inflight.front().second;
        ++f.reads;
        inflight.pop_front();
    }
    f.seconds = elapsed();
    return f;
}

}  // namespace epq
