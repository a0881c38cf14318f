#include "arena/route_trace.h"

#include "util/error.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <vector>

namespace epq {

namespace {

std::optional<uint64_t> to_uint(const std::string & s) {
    uint64_t v = 0;
    const char * end = s.data() + s.size();
    const auto r = std::from_chars(s.data(), end, v);
    if (r.ec != std::errc() || r.ptr != end || s.empty()) {
        return std::nullopt;
    }
    return v;
}

// "# a=1 b=x" -> {a: 1, b: x}
std::map<std::string, std::string> key_values(const std::string & line) {
    std::map<std::string, std::string> kv;
    size_t p = line.find_first_not_of("# ");
    while (p != std::string::npos && p < line.size()) {
        const size_t end = std::min(line.find(' ', p), line.size());
        const std::string item = line.substr(p, end - p);
        const size_t eq = item.find('=');
        if (eq != std::string::npos) {
            kv[item.substr(0, eq)] = item.substr(eq + 1);
        }
        p = line.find_first_not_of(' ', end);
    }
    return kv;
}

std::vector<std::string> split_csv(const std::string & line) {
    std::vector<std::string> out;
    size_t p = 0;
    while (true) {
        const size_t c = line.find(',', p);
        out.push_back(line.substr(p, c == std::string::npos ? std::string::npos : c - p));
        if (c == std::string::npos) {
            return out;
        }
        p = c + 1;
    }
}

// The columns this reader uses, by name, so that a writer may add or reorder columns.
struct Columns {
    size_t turn = 0, phase = 0, step = 0, layer = 0, slot = 0, expert = 0, count = 0;
};

class RouteTraceReader {
public:
    RouteTraceReader(std::istream & in, const std::string & path)
        : in_(in), where_("route trace '" + path + "' line ") {}

    Trace read() {
        read_model_line();
        std::string line = read_layer_lines();
        read_columns(line);
        while (next_line(line)) {
            read_row(line);
        }
        flush_record();
        if (t_.records.empty()) {
            throw fail("the trace has no rows; record a run that routes at least one token");
        }
        return std::move(t_);
    }

private:
    Error fail(const std::string & what) const { return Error(where_ + std::to_string(line_no_) + ": " + what); }

    bool next_line(std::string & line) {
        while (std::getline(in_, line)) {
            ++line_no_;
            if (!line.empty() && line.back() == '\r') {
                line.pop_back();
            }
            if (!line.empty()) {
                return true;
            }
        }
        if (in_.bad()) {
            throw fail("the file cannot be read");
        }
        return false;
    }

    uint64_t field(const std::map<std::string, std::string> & kv, const char * key) const {
        const auto it = kv.find(key);
        const std::optional<uint64_t> v = it == kv.end() ? std::nullopt : to_uint(it->second);
        if (!v) {
            throw fail(std::string("expected ") + key +
                       "=<non-negative integer>; the trace is damaged or not route_trace v1");
        }
        return *v;
    }

    void read_model_line() {
        std::string line;
        if (!next_line(line) || line.rfind("# model=", 0) != 0) {
            throw fail("expected '# model=... arch=... n_layer=... n_expert=... n_expert_used=...'");
        }
        const auto kv = key_values(line);
        TraceHeader & h = t_.header;
        const std::string model = kv.count("model") ? kv.at("model") : std::string();
        h.model = model.substr(model.find_last_of('/') + 1);
        h.arch = kv.count("arch") ? kv.at("arch") : std::string();
        const uint64_t n_expert = field(kv, "n_expert"), k = field(kv, "n_expert_used");
        if (n_expert == 0 || k == 0 || k > n_expert || n_expert > (1u << 20)) {
            throw fail("n_expert_used " + std::to_string(k) + " of n_expert " + std::to_string(n_expert) +
                       " is not a MoE model's routing");
        }
        h.n_expert = static_cast<uint32_t>(n_expert);
        h.n_expert_used = static_cast<uint32_t>(k);
    }

    // The per-layer lines give the size classes; returns the first line after them.
    std::string read_layer_lines() {
        std::string line;
        std::vector<std::pair<uint32_t, uint64_t>> layer_bytes;
        while (next_line(line) && line.rfind("# layer=", 0) == 0) {
            const auto kv = key_values(line);
            const uint64_t layer = field(kv, "layer"), bytes = field(kv, "expert_bytes");
            if (layer > UINT32_MAX || bytes == 0) {
                throw fail("a layer needs a number and a non-zero expert_bytes");
            }
            for (const auto & lb : layer_bytes) {
                if (lb.first == layer) {
                    throw fail("layer " + std::to_string(layer) + " is listed twice");
                }
            }
            layer_bytes.emplace_back(static_cast<uint32_t>(layer), bytes);
        }
        if (layer_bytes.empty()) {
            throw fail("expected '# layer=<i> expert_bytes=<bytes>' lines for the MoE layers");
        }
        TraceHeader & h = t_.header;
        std::vector<uint64_t> sizes;
        for (const auto & lb : layer_bytes) {
            sizes.push_back(lb.second);
        }
        std::sort(sizes.begin(), sizes.end());
        sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
        for (uint64_t s : sizes) {
            h.classes.push_back({s, 0});
        }
        for (const auto & lb : layer_bytes) {
            const auto cls =
                static_cast<uint32_t>(std::lower_bound(sizes.begin(), sizes.end(), lb.second) - sizes.begin());
            h.layers.emplace_back(lb.first, cls);
            h.classes[cls].total_experts += h.n_expert;
            if (lb.first >= known_.size()) {
                known_.resize(size_t{lb.first} + 1, 0);
            }
            known_[lb.first] = 1;
        }
        return line;
    }

    void read_columns(const std::string & line) {
        const std::vector<std::string> names = split_csv(line);
        auto col = [&](const char * name) {
            const auto it = std::find(names.begin(), names.end(), name);
            if (it == names.end()) {
                throw fail(std::string("the column header lacks '") + name +
                           "'; expected turn,phase,step,layer,slot,expert,...");
            }
            return static_cast<size_t>(it - names.begin());
        };
        c_ = {col("turn"), col("phase"), col("step"), col("layer"), col("slot"), col("expert"), names.size()};
    }

    void read_row(const std::string & line) {
        const std::vector<std::string> f = split_csv(line);
        if (f.size() != c_.count) {
            throw fail("expected " + std::to_string(c_.count) + " fields, found " + std::to_string(f.size()) +
                       "; the trace is damaged (cut short?)");
        }
        auto num = [&](size_t i, const char * name) {
            const std::optional<uint64_t> v = to_uint(f[i]);
            if (!v) {
                throw fail(std::string(name) + " '" + f[i].substr(0, 20) + "' is not a non-negative integer");
            }
            return *v;
        };
        const uint64_t turn = num(c_.turn, "turn"), phase = num(c_.phase, "phase"), step = num(c_.step, "step");
        const uint64_t layer = num(c_.layer, "layer"), slot = num(c_.slot, "slot"), expert = num(c_.expert, "expert");
        if (phase > 1) {
            throw fail("phase " + std::to_string(phase) + " is neither 0 (prompt) nor 1 (decode)");
        }
        if (layer >= known_.size() || !known_[layer]) {
            throw fail("layer " + std::to_string(layer) + " has no '# layer=' line in the header");
        }
        if (expert >= t_.header.n_expert || slot >= t_.header.n_expert_used) {
            throw fail("expert " + std::to_string(expert) + " in slot " + std::to_string(slot) + " is out of range (" +
                       std::to_string(t_.header.n_expert) + " experts, " + std::to_string(t_.header.n_expert_used) +
                       " per token)");
        }
        const Key key{turn, phase, step, layer};
        if (!open_ || !(key == cur_)) {
            flush_record();
            start_record(key);
        }
        if (slot != rec_.experts.size()) {
            throw fail("slot " + std::to_string(slot) + " comes out of order; rows of a token's layer list slots 0.." +
                       std::to_string(t_.header.n_expert_used - 1) + " in turn");
        }
        rec_.experts.push_back(static_cast<uint32_t>(expert));
    }

    struct Key {
        uint64_t turn = 0, phase = 0, step = 0, layer = 0;
        bool operator==(const Key & o) const {
            return turn == o.turn && phase == o.phase && step == o.step && layer == o.layer;
        }
    };

    void start_record(const Key & key) {
        // A new batch: any decode step, or a turn's prompt once.
        const bool same_batch =
            open_ && key.turn == cur_.turn && key.phase == cur_.phase && (key.phase == 0 || key.step == cur_.step);
        if (!same_batch) {
            batch_ += open_ ? 1 : 0;
        }
        cur_ = key;
        open_ = true;
        rec_ = TraceRecord{};
        rec_.step = batch_;
        rec_.token = key.step;
        rec_.layer = static_cast<uint32_t>(key.layer);
    }

    void flush_record() {
        if (!open_) {
            return;
        }
        if (rec_.experts.size() != t_.header.n_expert_used) {
            throw fail("token " + std::to_string(cur_.step) + " of turn " + std::to_string(cur_.turn) + " at layer " +
                       std::to_string(cur_.layer) + " lists " + std::to_string(rec_.experts.size()) + " experts, not " +
                       std::to_string(t_.header.n_expert_used) + "; the trace is damaged (cut short?)");
        }
        t_.records.push_back(std::move(rec_));
        rec_ = TraceRecord{};
    }

    std::istream & in_;
    std::string where_;
    uint64_t line_no_ = 1;  // the magic line was read by the caller
    Trace t_;
    std::vector<char> known_;  // by layer number: has a '# layer=' line
    Columns c_;
    Key cur_;
    bool open_ = false;
    uint64_t batch_ = 0;
    TraceRecord rec_;
};

}  // namespace

Trace read_route_trace(std::istream & in, const std::string & path) {
    return RouteTraceReader(in, path).read();
}

}  // namespace epq
