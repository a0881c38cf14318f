#include "arena/trace.h"

#include "arena/route_trace.h"

#include "util/error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

namespace epq {

namespace {

constexpr const char * kMagic = "epq-trace 2";
constexpr const char * kMagicV1 = "epq-trace 1";  // the same without guesses
constexpr size_t kFlushAt = 1 << 20;              // large writes, rare enough to keep off the hot path

void append_number(std::string & out, uint64_t v) {
    char tmp[24];
    const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    out.append(tmp, r.ptr);
}

void append_number(std::string & out, uint32_t v) {
    append_number(out, static_cast<uint64_t>(v));
}

void append_number(std::string & out, int32_t v) {
    char tmp[16];
    const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    out.append(tmp, r.ptr);
}

// The expert ids that end a record or a guess line, and the line's end.
template <class Id>
void end_line(std::string & out, const Id * experts, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        out += ' ';
        append_number(out, experts[i]);
    }
    out += '\n';
}

// Ordered, so the header reads in the order the format describes it.
nlohmann::ordered_json header_json(const TraceHeader & h) {
    nlohmann::ordered_json j;
    j["model"] = h.model;
    if (!h.arch.empty()) {
        j["arch"] = h.arch;
    }
    j["n_expert"] = h.n_expert;
    j["n_expert_used"] = h.n_expert_used;
    j["classes"] = nlohmann::ordered_json::array();
    for (const auto & c : h.classes) {
        j["classes"].push_back({{"slot_bytes", c.slot_bytes}, {"total_experts", c.total_experts}});
    }
    j["layers"] = nlohmann::ordered_json::array();
    for (const auto & [layer, cls] : h.layers) {
        j["layers"].push_back({{"layer", layer}, {"class", cls}});
    }
    return j;
}

// Parses and checks line 2; `where` prefixes every message.
TraceHeader parse_header(const std::string & line, const std::string & where) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception & e) {
        throw Error(where + ": the header is not valid JSON (" + e.what() + "); the trace is damaged, record it again");
    }
    TraceHeader h;
    try {
        h.model = j.at("model").get<std::string>();
        h.arch = j.value("arch", std::string());
        h.n_expert = j.at("n_expert").get<uint32_t>();
        h.n_expert_used = j.at("n_expert_used").get<uint32_t>();
        for (const auto & c : j.at("classes")) {
            h.classes.push_back({c.at("slot_bytes").get<uint64_t>(), c.at("total_experts").get<uint64_t>()});
        }
        for (const auto & l : j.at("layers")) {
            h.layers.emplace_back(l.at("layer").get<uint32_t>(), l.at("class").get<uint32_t>());
        }
    } catch (const nlohmann::json::exception & e) {
        throw Error(where + ": the header lacks a field or has one of the wrong type (" + e.what() +
                    "); the trace is damaged, record it again");
    }
    auto bad = [&](const std::string & what) {
        return Error(where + ": bad header: " + what + "; the trace is damaged, record it again");
    };
    if (h.n_expert == 0 || h.n_expert_used == 0 || h.n_expert_used > h.n_expert) {
        throw bad("n_expert_used " + std::to_string(h.n_expert_used) + " of n_expert " + std::to_string(h.n_expert));
    }
    if (h.classes.empty() || h.layers.empty()) {
        throw bad("no size classes or no layers");
    }
    for (size_t c = 0; c < h.classes.size(); ++c) {
        if (h.classes[c].slot_bytes == 0 || (c > 0 && h.classes[c].slot_bytes <= h.classes[c - 1].slot_bytes)) {
            throw bad("size classes must have ascending, non-zero slot_bytes");
        }
    }
    for (size_t i = 0; i < h.layers.size(); ++i) {
        if (h.layers[i].second >= h.classes.size()) {
            throw bad("layer " + std::to_string(h.layers[i].first) + " has class " +
                      std::to_string(h.layers[i].second) + " of " + std::to_string(h.classes.size()));
        }
        for (size_t k = 0; k < i; ++k) {
            if (h.layers[k].first == h.layers[i].first) {
                throw bad("layer " + std::to_string(h.layers[i].first) + " is listed twice");
            }
        }
    }
    return h;
}

// Splits a record line into numbers; false if a field is not an integer.
bool split_numbers(const std::string & line, std::vector<int64_t> & out) {
    out.clear();
    const char * p = line.data();
    const char * end = p + line.size();
    while (true) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) {
            ++p;
        }
        if (p == end) {
            return true;
        }
        int64_t v = 0;
        const auto r = std::from_chars(p, end, v);
        if (r.ec != std::errc() || (r.ptr < end && *r.ptr != ' ' && *r.ptr != '\t' && *r.ptr != '\r')) {
            return false;
        }
        out.push_back(v);
        p = r.ptr;
    }
}

}  // namespace

TraceWriter::TraceWriter(const std::string & path, const TraceHeader & h) : path_(path) {
    file_.reset(std::fopen(path.c_str(), "wb"));
    if (!file_) {
        throw Error("cannot create the trace file '" + path + "': " + std::strerror(errno) +
                    "; check that its directory exists and is writable");
    }
    std::setvbuf(file_.get(), nullptr, _IONBF, 0);  // buf_ already batches the writes
    buf_.reserve(kFlushAt + 4096);
    buf_ += kMagic;
    buf_ += '\n';
    buf_ += header_json(h).dump();
    buf_ += '\n';
    flush();
}

TraceWriter::~TraceWriter() {
    try {
        flush();
    } catch (const Error &) {
    }
}

void TraceWriter::record(uint64_t step, uint64_t token, uint32_t layer, const int32_t * experts, size_t n) {
    append_number(buf_, step);
    buf_ += ' ';
    append_number(buf_, token);
    buf_ += ' ';
    append_number(buf_, static_cast<uint64_t>(layer));
    end_line(buf_, experts, n);
    if (buf_.size() >= kFlushAt) {
        flush();
    }
}

void TraceWriter::record_guess(uint64_t step, uint32_t layer, const uint32_t * experts, size_t n) {
    buf_ += "g ";
    append_number(buf_, step);
    buf_ += ' ';
    append_number(buf_, layer);
    end_line(buf_, experts, n);
    if (buf_.size() >= kFlushAt) {
        flush();
    }
}

void TraceWriter::flush() {
    if (!file_ || buf_.empty()) {
        return;
    }
    const bool written = std::fwrite(buf_.data(), 1, buf_.size(), file_.get()) == buf_.size();
    buf_.clear();
    if (!written || std::fflush(file_.get()) != 0) {
        throw Error("cannot write the trace file '" + path_ + "': " + std::strerror(errno) +
                    "; free disk space or trace to another place");
    }
}

Trace read_trace(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw Error("cannot open the trace '" + path + "': " + std::strerror(errno) + "; check the path");
    }
    std::string line;
    const bool read = static_cast<bool>(std::getline(in, line));
    if (read && !line.empty() && line.back() == '\r') {
        line.pop_back();
    }
    if (read && line == kRouteTraceMagic) {
        return read_route_trace(in, path);
    }
    if (!read || (line != kMagic && line != kMagicV1)) {
        const bool other_version = line.rfind("epq-trace ", 0) == 0;
        throw Error("'" + path + "' is not an epq routing trace: its first line is '" + line.substr(0, 40) +
                    "', not '" + kMagic + "' or '" + kRouteTraceMagic + "'" +
                    (other_version ? "; this epq reads trace formats 1 and 2, record the trace again with it" : ""));
    }
    const bool guesses_allowed = line == kMagic;
    const std::string where = "trace '" + path + "' line ";
    if (!std::getline(in, line)) {
        throw Error(where + "2: the header is missing; the trace is damaged, record it again");
    }
    Trace t;
    t.header = parse_header(line, where + "2");
    const TraceHeader & h = t.header;

    std::vector<char> known;  // by layer number: listed in the header
    for (const auto & l : h.layers) {
        if (l.first >= known.size()) {
            known.resize(l.first + 1, 0);
        }
        known[l.first] = 1;
    }

    std::vector<int64_t> f;
    for (uint64_t line_no = 3; std::getline(in, line); ++line_no) {
        if (line.empty() || line == "\r") {
            continue;
        }
        const std::string at = where + std::to_string(line_no);
        if (line[0] == 'g' && guesses_allowed) {
            if (!split_numbers(line.substr(1), f) || f.size() < 2 || f.size() > 2 + size_t{h.n_expert} || f[0] < 0 ||
                f[1] < 0 || static_cast<uint64_t>(f[1]) >= known.size() || !known[static_cast<size_t>(f[1])]) {
                throw Error(at + ": malformed guess '" + line.substr(0, 80) +
                            "': expected g STEP LAYER and expert ids of a MoE layer the header lists; the trace is "
                            "damaged, record it again");
            }
            TraceGuess g;
            g.step = static_cast<uint64_t>(f[0]);
            g.layer = static_cast<uint32_t>(f[1]);
            for (size_t i = 2; i < f.size(); ++i) {
                if (f[i] < 0 || f[i] >= h.n_expert) {
                    throw Error(at + ": guessed expert " + std::to_string(f[i]) +
                                " is out of range; the trace is "
                                "damaged, record it again");
                }
                g.experts.push_back(static_cast<uint32_t>(f[i]));
            }
            t.guesses.push_back(std::move(g));
            continue;
        }
        if (!split_numbers(line, f) || f.size() != 3 + size_t{h.n_expert_used} || f[0] < 0 || f[1] < 0 || f[2] < 0) {
            throw Error(at + ": malformed record '" + line.substr(0, 80) + "': expected STEP TOKEN LAYER and " +
                        std::to_string(h.n_expert_used) +
                        " expert ids, all non-negative integers; the trace is damaged (cut short?), record it again");
        }
        TraceRecord r;
        r.step = static_cast<uint64_t>(f[0]);
        r.token = static_cast<uint64_t>(f[1]);
        if (static_cast<uint64_t>(f[2]) >= known.size() || !known[static_cast<size_t>(f[2])]) {
            throw Error(at + ": layer " + std::to_string(f[2]) +
                        " is not one of the MoE layers the header lists; the trace is damaged, record it again");
        }
        r.layer = static_cast<uint32_t>(f[2]);
        r.experts.reserve(h.n_expert_used);
        for (size_t i = 3; i < f.size(); ++i) {
            if (f[i] < 0 || f[i] >= h.n_expert) {
                throw Error(at + ": expert " + std::to_string(f[i]) + " is out of range (the model has " +
                            std::to_string(h.n_expert) + " experts per layer); the trace is damaged, record it again");
            }
            r.experts.push_back(static_cast<uint32_t>(f[i]));
        }
        t.records.push_back(std::move(r));
    }
    if (in.bad()) {
        throw Error("cannot read the trace '" + path + "': " + std::strerror(errno));
    }
    return t;
}

}  // namespace epq
