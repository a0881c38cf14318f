#include "gguf/gguf_file.h"

#include "util/byte_size.h"
#include "util/error.h"

#include "gguf.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>
#include <sys/stat.h>
#include <unordered_set>

namespace epq {

namespace {

// ggml's parser reports why it failed only through the log; collect those lines while it runs
// so the error we raise can say what ggml saw.
struct LogCapture {
    std::vector<std::string> errors;

    ggml_log_callback prev_cb = nullptr;
    void * prev_user = nullptr;

    LogCapture() {
        ggml_log_get(&prev_cb, &prev_user);
        ggml_log_set(&LogCapture::callback, this);
    }
    ~LogCapture() { ggml_log_set(prev_cb, prev_user); }
    LogCapture(const LogCapture &) = delete;
    LogCapture & operator=(const LogCapture &) = delete;

    static void callback(ggml_log_level level, const char * text, void * user) {
        if (level != GGML_LOG_LEVEL_ERROR && level != GGML_LOG_LEVEL_WARN) {
            return;
        }
        std::string line(text);
        while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) {
            line.pop_back();
        }
        // Drop ggml's "function_name: " prefix; the user does not need it.
        const auto colon = line.find(": ");
        if (colon != std::string::npos && line.find(' ') > colon) {
            line = line.substr(colon + 2);
        }
        // ggml quotes key names, which a file can make as long as it likes, and the regexes in
        // explain_parse_failure recurse once per character (std::regex): a long enough line
        // overflowed the stack. Every message worth explaining is short (tensor names are
        // under GGML_MAX_NAME bytes).
        constexpr size_t kMaxLine = 512;
        if (line.size() > kMaxLine) {
            line.resize(kMaxLine);
            line += "...";
        }
        if (!line.empty()) {
            static_cast<LogCapture *>(user)->errors.push_back(line);
        }
    }
};

std::string explain_parse_failure(const std::string & path, const std::vector<std::string> & errors) {
    static const std::regex bad_type(R"(tensor '([^']*)' has invalid ggml type (-?\d+))");
    static const std::regex bad_offset(R"(tensor '([^']*)' has offset (\d+), expected (\d+))");
    static const std::regex bad_block(
        R"(tensor '([^']*)' of type \d+ \(([^)]*)\) has (\d+) elements per row, not a multiple of block size \((\d+)\))");
    std::smatch m;
    for (const auto & e : errors) {
        if (std::regex_search(e, m, bad_type)) {
            return path + ": tensor '" + m[1].str() + "' has unknown tensor type " + m[2].str() +
                   " (this build knows types 0.." + std::to_string(GGML_TYPE_COUNT - 1) +
                   "); the file is corrupt or needs a newer llama.cpp";
        }
        if (std::regex_search(e, m, bad_offset)) {
            return path + ": tensor byte sizes disagree with their types and shapes: tensor '" + m[1].str() +
                   "' starts at data offset " + m[2].str() + " but the tensors before it, by type and shape, end at " +
                   m[3].str() + "; the file is corrupt";
        }
        if (std::regex_search(e, m, bad_block)) {
            if (m[4].str() == "0") {
                return path + ": tensor '" + m[1].str() + "' has type " + m[2].str() +
                       ", which this llama.cpp no longer supports; re-quantize the model";
            }
            return path + ": tensor '" + m[1].str() + "' has " + m[3].str() +
                   " elements per row, not a multiple of its type's block size " + m[4].str() + "; the file is corrupt";
        }
    }
    std::string detail = errors.empty() ? "ggml's GGUF parser rejected it" : errors.front();
    return path + ": corrupt or truncated GGUF header (" + detail + ")";
}

std::string shape_str(const int64_t * ne) {
    std::string s = "[";
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        s += (d ? ", " : "") + std::to_string(ne[d]);
    }
    return s + "]";
}

// Whether a tensor's type and shape give exactly `nbytes`, counted without overflow. ggml checks
// that the element count fits in 64 bits only when its own (overflowing) product comes out
// positive, so a shape of 2^64 elements passes with a wrapped byte size, often 0.
bool size_matches_shape(ggml_type type, const int64_t * ne, uint64_t nbytes) {
    const int64_t blck = ggml_blck_size(type);
    if (blck <= 0 || ne[0] < 0 || ne[0] % blck != 0) {
        return false;
    }
    uint64_t bytes = 0;
    int64_t elements = ne[0];
    bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(ne[0] / blck), ggml_type_size(type), &bytes);
    for (int d = 1; d < GGML_MAX_DIMS; ++d) {
        overflow = overflow || ne[d] < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(ne[d]), &bytes) ||
                   __builtin_mul_overflow(elements, ne[d], &elements);
    }
    return !overflow && bytes == nbytes;
}

}  // namespace

void GgufFile::CtxFree::operator()(gguf_context * c) const {
    gguf_free(c);
}

namespace {

struct ParsedFile {
    std::unique_ptr<gguf_context, void (*)(gguf_context *)> ctx{nullptr, gguf_free};
    uint64_t size = 0;
    uint64_t data_offset = 0;
    std::vector<TensorInfo> tensors;  // offsets within this file
};

// One GGUF file, parsed and checked against its size on disk.
ParsedFile parse_file(const std::string & path) {
    ParsedFile f;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        throw Error("cannot open model file " + path + ": " + std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        throw Error(path + " is a directory, not a GGUF model file");
    }
    f.size = static_cast<uint64_t>(st.st_size);

    // The magic is checked here so that "not a GGUF" reads as such rather than as a parser
    // failure deep in the header.
    {
        FILE * fp = std::fopen(path.c_str(), "rb");
        if (!fp) {
            throw Error("cannot open model file " + path + ": " + std::strerror(errno));
        }
        char magic[4] = {0, 0, 0, 0};
        const size_t got = std::fread(magic, 1, 4, fp);
        std::fclose(fp);
        if (got < 4 || std::memcmp(magic, "GGUF", 4) != 0) {
            std::string shown;
            for (size_t i = 0; i < got; ++i) {
                const unsigned char c = static_cast<unsigned char>(magic[i]);
                shown += (c >= 32 && c < 127) ? static_cast<char>(c) : '.';
            }
            throw Error(path + " is not a GGUF file (" +
                        (got < 4 ? std::string("only ") + std::to_string(got) + " bytes long"
                                 : "it starts with '" + shown + "', not 'GGUF'") +
                        "); pass a .gguf model");
        }
    }

    {
        LogCapture capture;
        gguf_init_params params{/*no_alloc =*/true, /*ctx =*/nullptr};
        f.ctx.reset(gguf_init_from_file(path.c_str(), params));
        if (!f.ctx) {
            throw Error(explain_parse_failure(path, capture.errors));
        }
    }
    gguf_context * raw = f.ctx.get();
    f.data_offset = gguf_get_data_offset(raw);

    const int64_t n = gguf_get_n_tensors(raw);
    f.tensors.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        TensorInfo t;
        t.name = gguf_get_tensor_name(raw, i);
        t.type = gguf_get_tensor_type(raw, i);
        const int64_t * ne = gguf_get_tensor_ne(raw, i);
        for (int d = 0; d < GGML_MAX_DIMS; ++d) {
            t.ne[d] = ne[d];
            if (ne[d] != 1) {
                t.n_dims = d + 1;
            }
        }
        t.n_dims = t.n_dims == 0 ? 1 : t.n_dims;
        t.nb[0] = ggml_type_size(t.type);
        t.nb[1] = ggml_row_size(t.type, t.ne[0]);
        for (int d = 2; d < GGML_MAX_DIMS; ++d) {
            t.nb[d] = t.nb[d - 1] * static_cast<uint64_t>(t.ne[d - 1]);
        }
        t.nbytes = gguf_get_tensor_size(raw, i);
        if (!size_matches_shape(t.type, t.ne, t.nbytes)) {
            throw Error(path + ": tensor '" + t.name + "' has shape " + shape_str(t.ne) + ", too large for a " +
                        ggml_type_name(t.type) + " tensor's size to be counted in 64 bits; the file is corrupt");
        }
        t.file_offset = f.data_offset + gguf_get_tensor_offset(raw, i);
        // Compared without adding: a size near 2^64 would wrap the end back inside the file.
        if (t.nbytes > f.size || t.file_offset > f.size - t.nbytes) {
            uint64_t end = 0;
            const bool wraps = __builtin_add_overflow(t.file_offset, t.nbytes, &end);
            throw Error(path + ": truncated: tensor '" + t.name + "' (" + ggml_type_name(t.type) + ", " +
                        format_bytes(t.nbytes) + ") ends " +
                        (wraps ? "past byte 2^64" : "at byte " + std::to_string(end)) + " but the file has only " +
                        std::to_string(f.size) +
                        " bytes; the download or copy is incomplete, fetch or generate it again");
        }
        f.tensors.push_back(std::move(t));
    }
    return f;
}

// An integer key of one file's header, whatever width its writer chose.
std::optional<int64_t> int_key(gguf_context * ctx, const char * key) {
    const int64_t id = gguf_find_key(ctx, key);
    if (id < 0) {
        return std::nullopt;
    }
    switch (gguf_get_kv_type(ctx, id)) {
        case GGUF_TYPE_UINT8: return gguf_get_val_u8(ctx, id);
        case GGUF_TYPE_INT8: return gguf_get_val_i8(ctx, id);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(ctx, id);
        case GGUF_TYPE_INT16: return gguf_get_val_i16(ctx, id);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(ctx, id);
        case GGUF_TYPE_INT32: return gguf_get_val_i32(ctx, id);
        case GGUF_TYPE_UINT64: return static_cast<int64_t>(gguf_get_val_u64(ctx, id));
        case GGUF_TYPE_INT64: return gguf_get_val_i64(ctx, id);
        default: return std::nullopt;
    }
}

std::string shard_name(int no, int count) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", no + 1, count);
    return buf;
}

}  // namespace

std::vector<std::string> split_shard_paths(const std::string & path, int split_no, int split_count) {
    const std::string own = shard_name(split_no, split_count);
    if (split_no < 0 || split_count < 1 || split_no >= split_count || path.size() <= own.size() ||
        path.compare(path.size() - own.size(), own.size(), own) != 0) {
        return {};
    }
    const std::string prefix = path.substr(0, path.size() - own.size());
    std::vector<std::string> out;
    for (int i = 0; i < split_count; ++i) {
        out.push_back(prefix + shard_name(i, split_count));
    }
    return out;
}

std::string first_shard_path(const std::string & path) {
    gguf_init_params params{/*no_alloc =*/true, /*ctx =*/nullptr};
    LogCapture quiet;  // a file that does not parse is reported when it is opened
    std::unique_ptr<gguf_context, void (*)(gguf_context *)> ctx(gguf_init_from_file(path.c_str(), params), gguf_free);
    if (!ctx) {
        return path;
    }
    const int64_t no = int_key(ctx.get(), "split.no").value_or(0);
    const int64_t count = int_key(ctx.get(), "split.count").value_or(1);
    if (no <= 0 || count <= 1 || no >= count || count > 9999) {
        return path;
    }
    const auto paths = split_shard_paths(path, static_cast<int>(no), static_cast<int>(count));
    return paths.empty() ? path : paths.front();
}

void GgufFile::require_tensor_data() const {
    if (has_key("epq.synth.header_only")) {
        throw Error(path() +
                    " was written by `epq synth --header-only`: its tensor data is a hole, for epq inspect "
                    "and arena plans only; write it again without --header-only to run it");
    }
}

GgufFile GgufFile::open(const std::string & path) {
    GgufFile f;
    ParsedFile given = parse_file(path);
    const int64_t count = int_key(given.ctx.get(), "split.count").value_or(1);
    const int64_t no = int_key(given.ctx.get(), "split.no").value_or(0);
    if (count < 1 || count > 9999 || no < 0 || no >= count) {
        throw Error(path + ": split metadata says shard " + std::to_string(no + 1) + " of " + std::to_string(count) +
                    "; the file is corrupt");
    }
    std::vector<std::string> paths{path};
    if (count > 1) {
        paths = split_shard_paths(path, static_cast<int>(no), static_cast<int>(count));
        if (paths.empty()) {
            throw Error(path + " is shard " + std::to_string(no + 1) + " of a model split in " + std::to_string(count) +
                        ", but its name does not end in " + shard_name(static_cast<int>(no), static_cast<int>(count)) +
                        " as llama.cpp's split files do, so the other shards cannot be found; keep the names "
                        "llama-gguf-split gave them");
        }
    }

    uint64_t n_tensors = 0;
    for (int64_t k = 0; k < count; ++k) {
        const std::string & p = paths[static_cast<size_t>(k)];
        ParsedFile shard;
        if (k == no) {
            shard = std::move(given);
        } else {
            struct stat st {};
            if (stat(p.c_str(), &st) != 0) {
                throw Error("shard " + std::to_string(k + 1) + " of " + std::to_string(count) + " of " + path +
                            " is missing: " + p + " (" + std::strerror(errno) +
                            "); every shard of a split model must sit in the same folder, named as downloaded");
            }
            shard = parse_file(p);
            const auto s_no = int_key(shard.ctx.get(), "split.no");
            const auto s_count = int_key(shard.ctx.get(), "split.count");
            if (!s_no || !s_count || *s_no != k || *s_count != count) {
                throw Error(p + " does not belong with " + path + ": it should be shard " + std::to_string(k + 1) +
                            " of " + std::to_string(count) + " but its split metadata says " +
                            (s_no && s_count ? "shard " + std::to_string(*s_no + 1) + " of " + std::to_string(*s_count)
                                             : std::string("it is not a split file")) +
                            "; download the shards of one model again");
            }
        }
        GgufShard s;
        s.path = p;
        s.size = shard.size;
        if (!f.shards_.empty()) {
            const GgufShard & prev = f.shards_.back();
            s.base = (prev.base + prev.size + kShardAlign - 1) / kShardAlign * kShardAlign;
        }
        for (auto & t : shard.tensors) {
            t.file_offset += s.base;
            t.shard = static_cast<uint32_t>(k);
            f.tensors_.push_back(std::move(t));
        }
        n_tensors += shard.tensors.size();
        if (k == 0) {
            f.data_offset_ = shard.data_offset;
        }
        f.file_size_ += s.size;
        f.shards_.push_back(std::move(s));
        f.ctxs_.emplace_back(shard.ctx.release());
    }
    if (count > 1) {
        const auto want = int_key(f.ctx(), "split.tensors.count");
        if (want && static_cast<uint64_t>(*want) != n_tensors) {
            throw Error(f.path() + ": the split metadata counts " + std::to_string(*want) + " tensors but its " +
                        std::to_string(count) + " shards hold " + std::to_string(n_tensors) +
                        "; a shard is from another model or incomplete, download them again");
        }
        std::unordered_set<std::string> seen;
        for (const auto & t : f.tensors_) {
            if (!seen.insert(t.name).second) {
                throw Error(f.path() + ": tensor '" + t.name + "' is in more than one shard (shard " +
                            std::to_string(t.shard + 1) + " has it again); the shards are from different splits");
            }
        }
    }
    return f;
}

const GgufShard * GgufFile::shard_at(uint64_t offset) const {
    for (const auto & s : shards_) {
        if (offset >= s.base && offset - s.base < s.size) {
            return &s;
        }
    }
    return nullptr;
}

std::vector<uint8_t> GgufFile::read(uint64_t offset, uint64_t len) const {
    const GgufShard * s = shard_at(offset);
    std::vector<uint8_t> out(len);
    if (s == nullptr || len > s->size - (offset - s->base)) {
        throw Error("cannot read " + std::to_string(len) + " bytes at model offset " + std::to_string(offset) + " of " +
                    path() + ": past the end of its file");
    }
    std::unique_ptr<FILE, int (*)(FILE *)> fp(std::fopen(s->path.c_str(), "rb"), std::fclose);
    if (!fp || fseeko(fp.get(), static_cast<off_t>(offset - s->base), SEEK_SET) != 0 ||
        std::fread(out.data(), 1, len, fp.get()) != len) {
        throw Error("cannot read " + std::to_string(len) + " bytes at " + std::to_string(offset - s->base) + " of " +
                    s->path);
    }
    return out;
}

const TensorInfo * GgufFile::find_tensor(const std::string & name) const {
    for (const auto & t : tensors_) {
        if (t.name == name) {
            return &t;
        }
    }
    return nullptr;
}

bool GgufFile::has_key(const std::string & key) const {
    return gguf_find_key(ctx(), key.c_str()) >= 0;
}

std::string GgufFile::architecture() const {
    return get_string("general.architecture").value_or("");
}

std::optional<std::string> GgufFile::get_string(const std::string & key) const {
    const int64_t id = gguf_find_key(ctx(), key.c_str());
    if (id < 0 || gguf_get_kv_type(ctx(), id) != GGUF_TYPE_STRING) {
        return std::nullopt;
    }
    return std::string(gguf_get_val_str(ctx(), id));
}

std::optional<int64_t> GgufFile::get_int(const std::string & key) const {
    return int_key(ctx(), key.c_str());
}

}  // namespace epq
