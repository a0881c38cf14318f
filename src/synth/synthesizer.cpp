#include "synth/synthesizer.h"

#include "synth/model_layout.h"
#include "util/rng.h"
#include "synth/vocab.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/progress.h"

#include "gguf.h"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/statvfs.h>
#include <thread>
#include <unistd.h>

namespace epq {

namespace {

// Hands filled buffers to a thread that writes them, so generation and disk writes overlap.
class BackgroundWriter {
public:
    BackgroundWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)), thread_([this] { run(); }) {}
    ~BackgroundWriter() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    BackgroundWriter(const BackgroundWriter &) = delete;
    BackgroundWriter & operator=(const BackgroundWriter &) = delete;

    // Takes ownership of `buf` and returns an empty buffer to fill next (the previous one,
    // once written).
    std::vector<uint8_t> submit(std::vector<uint8_t> buf) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !pending_ || !error_.empty(); });
        check_locked();
        pending_ = true;
        work_.swap(buf);
        cv_.notify_all();
        buf.clear();
        return buf;
    }

    void drain() {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !pending_ || !error_.empty(); });
        check_locked();
    }

private:
    void check_locked() const {
        if (!error_.empty()) {
            throw Error(error_);
        }
    }

    void run() {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            cv_.wait(lock, [this] { return pending_ || stop_; });
            if (!pending_) {
                return;
            }
            std::vector<uint8_t> buf;
            buf.swap(work_);
            lock.unlock();
            const std::string err = write_all(buf);
            lock.lock();
            work_.swap(buf);
            pending_ = false;
            if (!err.empty() && error_.empty()) {
                error_ = err;
            }
            cv_.notify_all();
        }
    }

    std::string write_all(const std::vector<uint8_t> & buf) const {
        size_t off = 0;
        while (off < buf.size()) {
            const ssize_t n = ::write(fd_, buf.data() + off, buf.size() - off);
            if (n < 0) {
                if (errno == EINTR) {
                    continue;
                }
                return "cannot write " + path_ + ": " + std::strerror(errno) +
                       (errno == ENOSPC ? " (free some space or write elsewhere with -o)" : "");
            }
            off += static_cast<size_t>(n);
        }
        return "";
    }

    int fd_;
    std::string path_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<uint8_t> work_;
    bool pending_ = false;
    bool stop_ = false;
    std::string error_;
    std::thread thread_;
};

struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) {
            ::close(fd);
        }
    }
};

std::string parent_dir(const std::string & path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

}  // namespace

namespace {

using GgufPtr = std::unique_ptr<gguf_context, void (*)(gguf_context *)>;

// An empty GGUF context that lays tensors out at `alignment`. ggml's writer pads with the
// alignment a context was read with, and only a parsed header sets it: so an empty header that
// declares it is written and read back.
GgufPtr empty_context(uint32_t alignment) {
    GgufPtr g(gguf_init_empty(), gguf_free);
    if (alignment == 0) {
        return g;
    }
    if ((alignment & (alignment - 1)) != 0) {
        throw Error("alignment " + std::to_string(alignment) + " is not a power of 2");
    }
    gguf_set_val_u32(g.get(), "general.alignment", alignment);
    std::vector<uint8_t> header(gguf_get_meta_size(g.get()));
    gguf_get_meta_data(g.get(), header.data());
    gguf_init_params params{/*no_alloc =*/true, /*ctx =*/nullptr};
    GgufPtr parsed(gguf_init_from_buffer(header.data(), header.size(), params), gguf_free);
    if (!parsed || gguf_get_alignment(parsed.get()) != alignment) {
        throw Error("ggml's GGUF writer cannot lay out tensors at alignment " + std::to_string(alignment));
    }
    return parsed;
}

// Tensors in file order, grouped into files of at most `max_bytes` (each file holds at least
// one tensor), as gguf-split groups them.
std::vector<std::vector<size_t>> group_into_files(const ModelLayout & layout, uint64_t max_bytes, size_t alignment) {
    std::vector<std::vector<size_t>> files(1);
    uint64_t bytes = 0;
    for (size_t i = 0; i < layout.tensors.size(); ++i) {
        const auto & t = layout.tensors[i];
        uint64_t n = ggml_row_size(t.type, t.ne[0]);
        for (size_t d = 1; d < t.ne.size(); ++d) {
            n *= static_cast<uint64_t>(t.ne[d]);
        }
        n = GGML_PAD(n, alignment);
        if (max_bytes > 0 && !files.back().empty() && bytes + n > max_bytes) {
            files.emplace_back();
            bytes = 0;
        }
        files.back().push_back(i);
        bytes += n;
    }
    return files;
}

std::string split_file_name(const std::string & out_path, size_t no, size_t count) {
    std::string prefix = out_path;
    const std::string ext = ".gguf";
    if (prefix.size() > ext.size() && prefix.compare(prefix.size() - ext.size(), ext.size(), ext) == 0) {
        prefix.resize(prefix.size() - ext.size());
    }
    char tail[64];
    std::snprintf(tail, sizeof tail, "-%05zu-of-%05zu.gguf", no + 1, count);
    return prefix + tail;
}

// One file: its header, then the tensors' bytes streamed in chunks, under a temporary name
// renamed into place once complete. With header_only the data section is a hole of its size.
void write_file(gguf_context * g, const SynthConfig & cfg, const ModelLayout & layout,
                const std::vector<size_t> & which, const std::string & path, UnitPoolCache & pools, Progress & progress,
                bool header_only) {
    std::vector<uint8_t> header(gguf_get_meta_size(g));
    gguf_get_meta_data(g, header.data());
    const size_t alignment = gguf_get_alignment(g);

    const std::string tmp_path = path + ".partial";
    Fd out;
    out.fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out.fd < 0) {
        throw Error("cannot create " + tmp_path + ": " + std::strerror(errno));
    }
    try {
        constexpr size_t kChunk = 16u << 20;
        std::vector<uint8_t> buf = std::move(header);
        if (header_only) {
            uint64_t size = buf.size();
            for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
                size += GGML_PAD(gguf_get_tensor_size(g, i), alignment);
            }
            if (::pwrite(out.fd, buf.data(), buf.size(), 0) != static_cast<ssize_t>(buf.size()) ||
                ::ftruncate(out.fd, static_cast<off_t>(size)) != 0) {
                throw Error("cannot write " + tmp_path + ": " + std::strerror(errno));
            }
            progress.advance(size);
        } else {
            BackgroundWriter writer(out.fd, tmp_path);
            for (const size_t i : which) {
                const auto & t = layout.tensors[i];
                int64_t nelements = 1;
                for (auto d : t.ne) {
                    nelements *= d;
                }
                // The output head's rows (token_embd when tied) must differ: see TensorFiller.
                const bool distinct = t.name == (cfg.shape.tie_embeddings ? "token_embd.weight" : "output.weight");
                TensorFiller filler(pools, t.type, t.ne[0], nelements, t.dist, cfg.seed ^ hash_string(t.name), distinct,
                                    t.shape_values);
                const uint64_t step = std::max<uint64_t>(1, kChunk / filler.unit_bytes()) * filler.unit_bytes();
                for (uint64_t done = 0; done < filler.nbytes();) {
                    const uint64_t n = std::min(step, filler.nbytes() - done);
                    const size_t at = buf.size();
                    buf.resize(at + n);
                    filler.fill(buf.data() + at, n);
                    done += n;
                    if (buf.size() >= kChunk) {
                        progress.advance(buf.size());
                        buf = writer.submit(std::move(buf));
                    }
                }
                const uint64_t pad = GGML_PAD(filler.nbytes(), alignment) - filler.nbytes();
                buf.insert(buf.end(), pad, 0);
            }
            progress.advance(buf.size());
            buf = writer.submit(std::move(buf));
            writer.drain();
        }
        if (::fsync(out.fd) != 0) {
            throw Error("cannot write " + tmp_path + ": " + std::strerror(errno));
        }
        if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
            throw Error("cannot rename " + tmp_path + " to " + path + ": " + std::strerror(errno));
        }
    } catch (...) {
        ::unlink(tmp_path.c_str());
        throw;
    }
}

}  // namespace

SynthResult synthesize(const SynthConfig & cfg, const std::string & out_path, const SynthOptions & opts) {
    const auto t0 = std::chrono::steady_clock::now();
    validate(cfg);
    const Vocab vocab = Vocab::load(cfg.vocab);
    const ModelLayout layout = build_layout(cfg, vocab.n_tokens());
    const std::string chat_template = cfg.chat_template.empty() ? "" : load_chat_template(cfg.chat_template);

    ggml_init_params ip{};
    ip.mem_size = (layout.tensors.size() + 1) * ggml_tensor_overhead();
    ip.no_alloc = true;
    std::unique_ptr<ggml_context, void (*)(ggml_context *)> meta(ggml_init(ip), ggml_free);
    std::vector<ggml_tensor *> tensors;
    for (const auto & t : layout.tensors) {
        ggml_tensor * tensor = ggml_new_tensor(meta.get(), t.type, static_cast<int>(t.ne.size()), t.ne.data());
        ggml_set_name(tensor, t.name.c_str());
        tensors.push_back(tensor);
    }

    // Every file's header: the model's metadata in the first, and when split, the keys
    // llama.cpp finds the others by in each.
    const size_t alignment = cfg.alignment ? cfg.alignment : gguf_get_alignment(empty_context(0).get());
    const auto groups = group_into_files(layout, cfg.split_max_bytes, alignment);
    if (groups.size() > 9999) {
        throw Error("--split-max-size " + std::to_string(cfg.split_max_bytes) + " would write " +
                    std::to_string(groups.size()) +
                    " files, more than a split model can have (9999); give a larger size");
    }
    std::vector<GgufPtr> headers;
    std::vector<std::string> paths;
    uint64_t total = 0;
    for (size_t k = 0; k < groups.size(); ++k) {
        headers.push_back(empty_context(cfg.alignment));
        gguf_context * g = headers.back().get();
        if (k == 0) {
            layout.write_metadata(g);
            vocab.copy_into(g);
            if (!chat_template.empty()) {
                gguf_set_val_str(g, "tokenizer.chat_template", chat_template.c_str());
            }
            if (opts.header_only) {
                // epq refuses to compute on it (GgufFile::require_tensor_data).
                gguf_set_val_bool(g, "epq.synth.header_only", true);
            }
        }
        if (groups.size() > 1) {
            gguf_set_val_u16(g, "split.no", static_cast<uint16_t>(k));
            gguf_set_val_u16(g, "split.count", static_cast<uint16_t>(groups.size()));
            gguf_set_val_i32(g, "split.tensors.count", static_cast<int32_t>(layout.tensors.size()));
        }
        for (const size_t i : groups[k]) {
            gguf_add_tensor(g, tensors[i]);
        }
        total += gguf_get_meta_size(g);
        for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
            total += GGML_PAD(gguf_get_tensor_size(g, i), alignment);
        }
        paths.push_back(groups.size() > 1 ? split_file_name(out_path, k, groups.size()) : out_path);
    }

    struct statvfs vfs {};
    if (!opts.header_only && statvfs(parent_dir(out_path).c_str(), &vfs) == 0) {
        const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
        if (free_bytes < total) {
            throw Error("not enough disk space for " + out_path + ": the model needs " + format_bytes(total) + ", " +
                        format_bytes(free_bytes) + " free; free space or write elsewhere with -o");
        }
    }

    Progress progress("synth " + cfg.preset, total, opts.progress);
    UnitPoolCache pools(cfg.seed);
    for (size_t k = 0; k < groups.size(); ++k) {
        write_file(headers[k].get(), cfg, layout, groups[k], paths[k], pools, progress, opts.header_only);
    }
    progress.finish();

    SynthResult r;
    r.path = paths.front();
    r.files = paths;
    r.bytes = total;
    r.n_tensors = layout.tensors.size();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace epq
