// A GGUF model file opened through ggml's gguf API and checked against the file on disk:
// every failure ggml's parser reports, and the ones it cannot see (tensor data past the end of
// the file), become one epq::Error whose message names the problem.
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
    uint64_t file_offset = 0;  // absolute, in bytes from the start of the file
    uint64_t nbytes = 0;
};

class GgufFile {
public:
    // Throws epq::Error (not a GGUF, corrupt header, unknown tensor type, inconsistent
    // tensor sizes, truncated data).
    static GgufFile open(const std::string & path);

    const std::string & path() const { return path_; }
    gguf_context * ctx() const { return ctx_.get(); }
    uint64_t file_size() const { return file_size_; }
    uint64_t data_offset() const { return data_offset_; }
    const std::vector<TensorInfo> & tensors() const { return tensors_; }
    const TensorInfo * find_tensor(const std::string & name) const;

    // general.architecture, or "" if absent.
    std::string architecture() const;
    // Any integer-typed value (GGUF writers differ in which width they use).
    std::optional<int64_t> get_int(const std::string & key) const;
    std::optional<std::string> get_string(const std::string & key) const;
    bool has_key(const std::string & key) const;

private:
    struct CtxFree {
        void operator()(gguf_context * c) const;
    };
    std::string path_;
    std::unique_ptr<gguf_context, CtxFree> ctx_;
    uint64_t file_size_ = 0;
    uint64_t data_offset_ = 0;
    std::vector<TensorInfo> tensors_;
};

}  // namespace epq
