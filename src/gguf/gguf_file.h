// A GGUF model opened through ggml's gguf API and checked against the files on disk: every
// failure ggml's parser reports, and the ones it cannot see (tensor data past the end of the
// file), become one epq::Error whose message names the problem.
//
// A model split by llama.cpp's gguf-split (<name>-00001-of-00005.gguf, ...) is opened whole from
// any of its shards: every shard is parsed and checked, metadata comes from the first (as
// llama.cpp reads it), and tensors of every shard are listed. Offsets are in one byte space for
// the whole model: shard k's bytes start at shards()[k].base, a multiple of kShardAlign, so an
// offset keeps its alignment within its shard (direct reads) and names exactly one shard.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ggml.h"

struct gguf_context;

namespace epq {

struct TensorInfo {
    std::string name;
    ggml_type type = GGML_TYPE_F32;
    int n_dims = 0;
    int64_t ne[GGML_MAX_DIMS] = {1, 1, 1, 1};
    uint64_t nb[GGML_MAX_DIMS] = {0, 0, 0, 0};
    uint64_t file_offset = 0;  // in the model's byte space (from the start of the file if unsplit)
    uint64_t nbytes = 0;
    uint32_t shard = 0;  // which file of a split model holds it
};

struct GgufShard {
    std::string path;
    uint64_t size = 0;  // bytes of this file
    uint64_t base = 0;  // where its byte 0 sits in the model's byte space
};

// The paths of a split model's shards, from the path of any one of them and the split metadata
// (llama.cpp's naming: <prefix>-%05d-of-%05d.gguf). Empty when the name does not follow it.
std::vector<std::string> split_shard_paths(const std::string & path, int split_no, int split_count);
// The file llama.cpp must be given for the model `path` belongs to: the first shard when `path`
// is a later shard of a split model, else `path` itself (also when it cannot be read: opening it
// then says why).
std::string first_shard_path(const std::string & path);

class GgufFile {
public:
    static constexpr uint64_t kShardAlign = 1ull << 20;

    // Throws epq::Error (not a GGUF, corrupt header, unknown tensor type, inconsistent
    // tensor sizes, truncated data; for a split model also a missing or mismatched shard).
    static GgufFile open(const std::string & path);

    // The file llama.cpp loads the model from: the first shard of a split model.
    const std::string & path() const { return shards_.front().path; }
    const std::vector<GgufShard> & shards() const { return shards_; }
    bool split() const { return shards_.size() > 1; }
    // The first shard's header: the model's metadata.
    gguf_context * ctx() const { return ctxs_.front().get(); }
    // Bytes of every shard together.
    uint64_t file_size() const { return file_size_; }
    // End of the model's byte space (the last shard's base + size): file_size() when unsplit.
    uint64_t space_end() const { return shards_.back().base + shards_.back().size; }
    // Where the first shard's tensor data starts.
    uint64_t data_offset() const { return data_offset_; }
    // The shard holding `offset` of the model's byte space, or nullptr.
    const GgufShard * shard_at(uint64_t offset) const;
    // Reads [offset, offset + len) of the model's byte space (one shard). Throws epq::Error.
    std::vector<uint8_t> read(uint64_t offset, uint64_t len) const;
    const std::vector<TensorInfo> & tensors() const { return tensors_; }
    const TensorInfo * find_tensor(const std::string & name) const;

    // general.architecture, or "" if absent.
    std::string architecture() const;
    // Any integer-typed value (GGUF writers differ in which width they use).
    std::optional<int64_t> get_int(const std::string & key) const;
    std::optional<std::string> get_string(const std::string & key) const;
    bool has_key(const std::string & key) const;
    // Throws for a file `epq synth --header-only` wrote: its tensor data is a hole (zeros), fit
    // for inspect and arena plans, never for computing.
    void require_tensor_data() const;

private:
    struct CtxFree {
        void operator()(gguf_context * c) const;
    };
    std::vector<GgufShard> shards_;
    std::vector<std::unique_ptr<gguf_context, CtxFree>> ctxs_;  // one per shard
    uint64_t file_size_ = 0;
    uint64_t data_offset_ = 0;
    std::vector<TensorInfo> tensors_;
};

}  // namespace epq
