#include "io/model_reader.h"

#include "util/error.h"

#include <algorithm>

namespace epq {

ModelReader::ModelReader(const std::vector<ModelFilePart> & parts) {
    if (parts.empty()) {
        throw Error("no model file to read experts from");
    }
    for (const auto & p : parts) {
        if (!parts_.empty() && p.base <= parts_.back().base) {
            throw Error("model files out of order: " + p.path);
        }
        parts_.push_back({p.base, std::make_unique<DirectReader>(p.path)});
    }
}

const ModelReader::Part & ModelReader::part_at(uint64_t offset) const {
    // The last part whose base is at or before the offset.
    auto it = std::upper_bound(parts_.begin(), parts_.end(), offset,
                               [](uint64_t off, const Part & p) { return off < p.base; });
    return *std::prev(it);  // parts_[0].base is 0 or below any offset asked for
}

void ModelReader::read(uint64_t offset, uint64_t len, uint8_t * dst, uint64_t dst_room_before,
                       uint64_t dst_room_after) const {
    const Part & p = part_at(offset);
    p.reader->read(offset - p.base, len, dst, dst_room_before, dst_room_after);
}

bool ModelReader::direct() const {
    return std::all_of(parts_.begin(), parts_.end(), [](const Part & p) { return p.reader->direct(); });
}

uint64_t ModelReader::align() const {
    uint64_t a = 1;
    for (const auto & p : parts_) {
        a = std::max(a, p.reader->align());
    }
    return a;
}

void ModelReader::check_unchanged() const {
    for (const auto & p : parts_) {
        p.reader->check_unchanged();
    }
}

}  // namespace epq
