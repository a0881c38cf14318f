#include "backend/repacked_experts.h"

#include "backend/expert_repack.h"
#include "backend/expert_store.h"
#include "io/direct_reader.h"
#include "io/model_reader.h"
#include "util/error.h"
#include "util/mapping.h"

#include "ggml-backend.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace epq {

namespace {

using json = nlohmann::json;

constexpr char kMagic[8] = {'E', 'P', 'Q', 'R', 'E', 'P', 'K', '1'};
constexpr int kVersion = 1;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxHeader = 64ull << 20;

uint64_t round_up(uint64_t v, uint64_t a) {
    return (v + a - 1) / a * a;
}

std::string base_name(const std::string & path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string rewrite_hint(const ExpertIndex & index) {
    return "rewrite it with `epq repack -m " + index.shards.front().path + "`, or delete it";
}

// What the file must say about the model: its files and the slot layout the images follow.
json model_json(const ExpertIndex & index, const SlotLayout & layout) {
    json files = json::array();
    for (const auto & s : index.shards) {
        files.push_back({{"name", base_name(s.path)}, {"size", s.size}});
    }
    json layers = json::array();
    for (const auto & l : layout.layers) {
        json matrices = json::array();
        for (const auto & m : l.matrices) {
            matrices.push_back({{"name", m.name},
                                {"type", m.type},
                                {"n_in", m.n_in},
                                {"n_out", m.n_out},
                                {"file_offset", m.file_offset},
                                {"stride", m.stride},
                                {"slot_offset", m.slot_offset}});
        }
        layers.push_back({{"layer", l.layer}, {"image_bytes", l.bytes}, {"matrices", matrices}});
    }
    return {{"files", files}, {"n_expert", index.n_expert}, {"layers", layers}};
}

// The matrices this CPU holds repacked, by name: which types ggml repacks depends on the CPU.
json repacked_json(const SlotLayout & layout, const ExpertRepack & repack) {
    json names = json::array();
    for (const auto & l : layout.layers) {
        for (const auto & m : l.matrices) {
            if (repack.repacks(m)) {
                names.push_back(m.name);
            }
        }
    }
    return names;
}

// Offsets of every layer's images, laid one after another from `data_offset`.
void place_layers(const SlotLayout & layout, uint32_t n_expert, RepackedExperts * rx) {
    uint64_t at = rx->data_offset;
    for (const auto & l : layout.layers) {
        rx->layer_offset.push_back(at);
        rx->layer_image_bytes.push_back(l.bytes);
        at += l.bytes * n_expert;
    }
    rx->file_bytes = at;
}

// One expert's slot image of a layer, as the arena holds it after read and repack, at `image`
// (page-aligned, layer.bytes long).
void build_image(const ModelReader & reader, const ExpertRepack & repack, const LayerLayout & layer, uint32_t expert,
                 uint8_t * image) {
    std::memset(image, 0, layer.bytes);
    for (const auto & m : layer.matrices) {
        uint8_t * dst = image + m.slot_offset;
        reader.read(m.file_offset + expert * m.stride, m.stride, dst, m.slot_offset - m.region_begin,
                    m.region_end - (m.slot_offset + m.stride));
        // The read may widen into the region's padding: clear it again, so files compare equal.
        std::memset(image + m.region_begin, 0, m.slot_offset - m.region_begin);
        std::memset(dst + m.stride, 0, m.region_end - (m.slot_offset + m.stride));
        repack.repack(m, dst);
    }
}

void write_all(int fd, const uint8_t * data, uint64_t len, uint64_t offset, const std::string & path) {
    while (len > 0) {
        const ssize_t n = pwrite(fd, data, len, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            throw Error("cannot write " + path + ": " + (n < 0 ? std::strerror(errno) : "no progress") +
                        (errno == ENOSPC ? " (the disk is full: the file needs about the model's expert bytes)" : ""));
        }
        data += n;
        len -= static_cast<uint64_t>(n);
        offset += static_cast<uint64_t>(n);
    }
}

// An owned file descriptor, closed (and with `unlink_on_fail` the file removed) on every path.
struct OutFile {
    std::string path;
    int fd = -1;
    bool keep = false;
    ~OutFile() {
        if (fd >= 0) {
            close(fd);
        }
        if (!keep) {
            unlink(path.c_str());
        }
    }
};

// Writes every slot image with a few threads (reads, repacking and writes overlap), dropping
// written pages from the page cache as it goes so the file does not crowd a small machine.
void write_images(const ExpertIndex & index, const SlotLayout & layout, const ExpertRepack & repack,
                  const RepackedExperts & rx, const OutFile & out, const std::function<void(uint64_t)> & progress) {
    const ModelReader reader(model_file_parts(index));
    uint64_t max_image = 0;
    for (const auto & l : layout.layers) {
        max_image = std::max(max_image, l.bytes);
    }
    const uint64_t total = static_cast<uint64_t>(layout.layers.size()) * index.n_expert;
    std::atomic<uint64_t> next{0};
    std::mutex mu;
    std::string error;
    uint64_t done_bytes = 0;
    auto worker = [&]() {
        try {
            Mapping image = Mapping::anonymous(max_image, "an expert image buffer");
            for (uint64_t job = next++; job < total; job = next++) {
                const size_t li = job / index.n_expert;
                const auto e = static_cast<uint32_t>(job % index.n_expert);
                const LayerLayout & l = layout.layers[li];
                build_image(reader, repack, l, e, image.data());
                const uint64_t at = rx.image_offset(li, e);
                write_all(out.fd, image.data(), l.bytes, at, out.path);
                sync_file_range(out.fd, static_cast<off_t>(at), static_cast<off_t>(l.bytes),
                                SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
                posix_fadvise(out.fd, static_cast<off_t>(at), static_cast<off_t>(l.bytes), POSIX_FADV_DONTNEED);
                std::lock_guard<std::mutex> lock(mu);
                if (!error.empty()) {
                    return;
                }
                for (const auto & m : l.matrices) {
                    done_bytes += m.stride;
                }
                if (progress) {
                    progress(done_bytes);
                }
            }
        } catch (const std::exception & e) {
            std::lock_guard<std::mutex> lock(mu);
            error = error.empty() ? e.what() : error;
            next = total;
        }
    };
    const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n_threads; ++t) {
        threads.emplace_back(worker);
    }
    for (auto & t : threads) {
        t.join();
    }
    if (!error.empty()) {
        throw Error(error);
    }
}

[[noreturn]] void damaged(const std::string & path, const std::string & what, const ExpertIndex & index) {
    throw Error(path + " is not a usable repacked-experts file (" + what + "): " + rewrite_hint(index));
}

json read_header(const DirectReader & file, uint64_t file_size, const ExpertIndex & index, uint64_t * header_end) {
    uint8_t head[16] = {};
    if (file_size < sizeof(head)) {
        damaged(file.path(), "shorter than its header", index);
    }
    file.read(0, sizeof(head), head);
    if (std::memcmp(head, kMagic, sizeof(kMagic)) != 0) {
        damaged(file.path(), "no epq repacked-experts header", index);
    }
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) {
        len = len << 8 | head[8 + i];
    }
    if (len > kMaxHeader || sizeof(head) + len > file_size) {
        damaged(file.path(), "header length out of range", index);
    }
    std::string text(len, '\0');
    file.read(sizeof(head), len, reinterpret_cast<uint8_t *>(text.data()));
    *header_end = sizeof(head) + len;
    json h = json::parse(text, nullptr, false);
    if (h.is_discarded() || !h.is_object()) {
        damaged(file.path(), "its header is not valid JSON", index);
    }
    return h;
}

// Two experts of the first layer with each matrix shape: the file's bytes must be this CPU's
// rewrite of the model's bytes.
void check_probes(const DirectReader & file, const ExpertIndex & index, const SlotLayout & layout,
                  const ExpertRepack & repack, const RepackedExperts & rx, const std::string & made_on) {
    const ModelReader model(model_file_parts(index));
    std::map<std::tuple<int, int64_t, int64_t>, bool> seen;
    for (size_t li = 0; li < layout.layers.size(); ++li) {
        const LayerLayout & l = layout.layers[li];
        for (const auto & m : l.matrices) {
            if (!seen.emplace(std::make_tuple(m.type, m.n_in, m.n_out), true).second) {
                continue;
            }
            for (uint32_t e : {0u, index.n_expert - 1}) {
                std::vector<uint8_t> want(m.stride), have(m.stride);
                model.read(m.file_offset + e * m.stride, m.stride, want.data());
                repack.repack(m, want.data());
                file.read(rx.image_offset(li, e) + m.slot_offset, m.stride, have.data());
                if (want != have) {
                    throw Error(file.path() + " does not hold " + m.name + " (expert " + std::to_string(e) +
                                ") as this CPU repacks the model's bytes: it was made on a CPU with " + made_on +
                                ", this one has " + cpu_features() +
                                ", or the model changed since. A repacked layout belongs to the CPU it was made "
                                "for: " +
                                rewrite_hint(index) + " (or run with -nr)");
                }
            }
        }
    }
}

}  // namespace

std::string repacked_experts_path(const ExpertIndex & index) {
    return index.shards.front().path + ".epq-repacked";
}

std::string cpu_features() {
    std::string out;
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    auto get = cpu ? reinterpret_cast<ggml_backend_get_features_t>(ggml_backend_reg_get_proc_address(
                         ggml_backend_dev_backend_reg(cpu), "ggml_backend_get_features"))
                   : nullptr;
    for (ggml_backend_feature * f = get ? get(ggml_backend_dev_backend_reg(cpu)) : nullptr; f && f->name; ++f) {
        if (std::string(f->value) != "0") {
            out += (out.empty() ? "" : " ") + std::string(f->name) +
                   (std::string(f->value) == "1" ? "" : "=" + std::string(f->value));
        }
    }
    return out.empty() ? "(none reported)" : out;
}

RepackWriteReport write_repacked_experts(const ExpertIndex & index, const std::string & out,
                                         const std::function<void(uint64_t)> & progress) {
    const auto t0 = std::chrono::steady_clock::now();
    const SlotLayout layout = SlotLayout::build(index);
    const ExpertRepack repack(true, layout);
    if (repack.n_repacked() == 0) {
        throw Error("ggml repacks none of this model's expert types on this CPU (" + cpu_features() +
                    "): stock's default flags compute them in the file's layout, so there is nothing to rewrite");
    }
    json header = {{"format", "epq repacked experts"},
                   {"version", kVersion},
                   {"model", model_json(index, layout)},
                   {"repacked", repacked_json(layout, repack)},
                   {"cpu", cpu_features()}};
    const std::string text = header.dump();
    RepackedExperts rx;
    rx.data_offset = round_up(16 + text.size(), kPage);
    place_layers(layout, index.n_expert, &rx);

    OutFile file{out + ".part"};
    file.fd = open(file.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file.fd < 0) {
        file.keep = true;  // nothing of ours to remove
        throw Error("cannot create " + file.path + ": " + std::strerror(errno));
    }
    if (int err = posix_fallocate(file.fd, 0, static_cast<off_t>(rx.file_bytes)); err != 0) {
        throw Error("cannot reserve " + std::to_string(rx.file_bytes >> 20) + " MiB for " + file.path + ": " +
                    std::strerror(err) +
                    (err == ENOSPC ? " (free that much disk, or write it elsewhere with -o)" : ""));
    }
    std::vector<uint8_t> head(rx.data_offset, 0);
    std::memcpy(head.data(), kMagic, sizeof(kMagic));
    for (int i = 0; i < 8; ++i) {
        head[8 + i] = static_cast<uint8_t>(text.size() >> (8 * i));
    }
    std::memcpy(head.data() + 16, text.data(), text.size());
    write_all(file.fd, head.data(), head.size(), 0, file.path);
    write_images(index, layout, repack, rx, file, progress);
    if (fsync(file.fd) != 0) {
        throw Error("cannot write " + file.path + ": " + std::strerror(errno));
    }
    if (rename(file.path.c_str(), out.c_str()) != 0) {
        throw Error("cannot rename " + file.path + " to " + out + ": " + std::strerror(errno));
    }
    file.keep = true;

    RepackWriteReport r;
    r.file_bytes = rx.file_bytes;
    r.expert_bytes = index.expert_bytes;
    r.repacked_matrices = repack.n_repacked();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

RepackedExperts open_repacked_experts(const std::string & path, const ExpertIndex & index) {
    const DirectReader file(path);
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        throw Error("cannot read " + path + ": " + std::strerror(errno));
    }
    const auto file_size = static_cast<uint64_t>(st.st_size);
    uint64_t header_end = 0;
    const json h = read_header(file, file_size, index, &header_end);
    if (h.value("version", 0) != kVersion) {
        damaged(path, "written by another version of epq", index);
    }
    const SlotLayout layout = SlotLayout::build(index);
    if (h.value("model", json()) != model_json(index, layout)) {
        throw Error(path + " does not hold the experts this run pages from " + index.shards.front().path +
                    " (the model's files or expert tensors differ, or --rpc keeps some layers' experts "
                    "elsewhere): " +
                    rewrite_hint(index));
    }
    const std::string made_on = h.value("cpu", std::string("(unknown)"));
    const ExpertRepack repack(true, layout);
    if (h.value("repacked", json()) != repacked_json(layout, repack)) {
        throw Error(path + " was made on a CPU where ggml repacks other expert types (made with " + made_on +
                    "; this CPU has " + cpu_features() + "). A repacked layout belongs to the CPU it was made for: " +
                    rewrite_hint(index) + " (or run with -nr)");
    }
    RepackedExperts rx;
    rx.path = path;
    rx.data_offset = round_up(header_end, kPage);
    rx.cpu = made_on;
    rx.repacked_matrices = repack.n_repacked();
    place_layers(layout, index.n_expert, &rx);
    if (file_size != rx.file_bytes) {
        damaged(path,
                "it holds " + std::to_string(file_size) + " bytes, its header says " + std::to_string(rx.file_bytes) +
                    ": cut short or grown",
                index);
    }
    check_probes(file, index, layout, repack, rx, made_on);
    return rx;
}

}  // namespace epq
