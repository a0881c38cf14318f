// Direct reads of a model that may be split over several files (llama.cpp's gguf-split shards):
// one DirectReader per file, addressed through the model's single byte space, where each file
// starts at its own base (see gguf/gguf_file.h). A read never spans two files: a tensor lives in
// one.
#pragma once

#include "io/direct_reader.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace epq {

struct ModelFilePart {
    std::string path;
    uint64_t base = 0;  // where byte 0 of this file sits in the model's byte space
};

class ModelReader {
public:
    // Opens every part (throws epq::Error naming the one that fails). Bases ascend.
    explicit ModelReader(const std::vector<ModelFilePart> & parts);
    explicit ModelReader(const std::string & path) : ModelReader(std::vector<ModelFilePart>{{path, 0}}) {}

    // Reads [offset, offset + len) of the model's byte space, as DirectReader::read does.
    void read(uint64_t offset, uint64_t len, uint8_t * dst, uint64_t dst_room_before = 0,
              uint64_t dst_room_after = 0) const;
    // Whether every file's reads still bypass the page cache.
    bool direct() const;
    // The largest alignment any file's direct reads need.
    uint64_t align() const;
    // Throws epq::Error if a file was truncated or rewritten since it was opened.
    void check_unchanged() const;
    const std::string & path() const { return parts_.front().reader->path(); }
    size_t files() const { return parts_.size(); }

private:
    struct Part {
        uint64_t base = 0;
        std::unique_ptr<DirectReader> reader;
    };
    const Part & part_at(uint64_t offset) const;
    std::vector<Part> parts_;
};

}  // namespace epq
