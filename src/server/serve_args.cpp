#include "server/serve_args.h"

#include "util/error.h"

#include <cstring>
#include <sstream>

namespace epq::server {

namespace {

enum class Kind { text, number, flag };

struct Spec {
    const char * name;
    Kind kind;
};

// llama-server has none of these names: they can be taken out without hiding one of its flags.
constexpr Spec kSpecs[] = {
    {"--arena", Kind::text},          {"--policy", Kind::text},         {"--prefetch", Kind::text},
    {"--read-threads", Kind::number}, {"--preload", Kind::flag},        {"--no-pager", Kind::flag},
    {"--trace", Kind::text},          {"--decode-streams", Kind::text}, {"--repacked-experts", Kind::text},
};

const Spec * find_spec(const std::string & arg, std::string & inline_value, bool & has_inline) {
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    for (const Spec & s : kSpecs) {
        if (name == s.name) {
            has_inline = eq != std::string::npos;
            inline_value = has_inline ? arg.substr(eq + 1) : "";
            return &s;
        }
    }
    return nullptr;
}

void apply(PagerFlags & f, const std::string & name, const std::string & value) {
    if (name == "--arena") {
        f.arena = value;
    } else if (name == "--policy") {
        f.policy = value;
    } else if (name == "--prefetch") {
        f.prefetch = value;
    } else if (name == "--trace") {
        f.trace = value;
    } else if (name == "--repacked-experts") {
        f.repacked_experts = value;
    } else if (name == "--read-threads") {
        char * end = nullptr;
        const long n = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || n < 1 || n > 64) {
            throw Error("--read-threads must be 1..64; got '" + value + "'");
        }
        f.read_threads = static_cast<int>(n);
    } else if (name == "--decode-streams") {
        char * end = nullptr;
        const long n = std::strtol(value.c_str(), &end, 10);
        if (value == "auto") {
            f.decode_streams = 0;
        } else if (value == "all") {
            f.decode_streams = kAllDecodeStreams;
        } else if (value.empty() || *end != '\0' || n < 1 || n > 4096) {
            throw Error("--decode-streams must be auto, all or a number of requests (1..4096); got '" + value + "'");
        } else {
            f.decode_streams = static_cast<int>(n);
        }
    } else if (name == "--preload") {
        f.preload = true;
    } else if (name == "--no-pager") {
        f.no_pager = true;
    }
}

// Walks `args`, calling `pager(name, value, raw)` for each pager flag and `other(arg)` for the rest.
template <typename P, typename O>
void walk(const std::vector<std::string> & args, P pager, O other) {
    for (size_t i = 0; i < args.size(); ++i) {
        std::string value;
        bool has_inline = false;
        const Spec * s = find_spec(args[i], value, has_inline);
        if (!s) {
            other(args[i]);
            continue;
        }
        std::vector<std::string> raw{args[i]};
        if (s->kind == Kind::flag) {
            if (has_inline) {
                throw Error(std::string(s->name) + " takes no value");
            }
        } else if (!has_inline) {
            if (i + 1 >= args.size()) {
                throw Error(std::string(s->name) + " needs a value");
            }
            value = args[++i];
            raw.push_back(value);
        }
        pager(std::string(s->name), value, raw);
    }
}

}  // namespace

SplitArgs split_serve_args(const std::vector<std::string> & args) {
    SplitArgs out;
    walk(
        args,
        [&](const std::string & name, const std::string & value, const std::vector<std::string> &) {
            apply(out.pager, name, value);
        },
        [&](const std::string & a) {
            out.help |= a == "-h" || a == "--help" || a == "--usage";
            out.llama.push_back(a);
        });
    return out;
}

std::vector<std::string> pager_args_of(const std::vector<std::string> & args) {
    std::vector<std::string> out;
    walk(
        args,
        [&](const std::string &, const std::string &, const std::vector<std::string> & raw) {
            out.insert(out.end(), raw.begin(), raw.end());
        },
        [](const std::string &) {});
    return out;
}

std::string encode_pager_flags(const std::vector<std::string> & pager_args) {
    std::string s;
    for (const auto & a : pager_args) {
        if (a.find('\t') != std::string::npos || a.find('\n') != std::string::npos) {
            throw Error("a pager flag's value cannot hold a tab or a newline: '" + a + "'");
        }
        s += (s.empty() ? "" : "\t") + a;
    }
    return s;
}

std::vector<std::string> decode_pager_flags(const char * env) {
    std::vector<std::string> out;
    if (!env || !*env) {
        return out;
    }
    std::stringstream ss(env);
    for (std::string a; std::getline(ss, a, '\t');) {
        out.push_back(a);
    }
    return out;
}

std::string pager_flags_help() {
    return "epq serve: llama.cpp's llama-server with the pager. Every llama-server flag below works as in\n"
           "llama-server; these are epq's own (routed experts are read from disk into a RAM arena):\n"
           "  --arena SIZE|auto   RAM for experts: a size (4G, 512M) or auto (available memory minus the\n"
           "                      dense weights, KV cache of every slot, prompt cache, draft model,\n"
           "                      projector, compute buffers and headroom) (default: auto)\n"
           "  --policy NAME       arena eviction: " +
           run_policy_names() + " (default: " + kDefaultPolicy +
           ")\n"
           "  --prefetch auto|on|off\n"
           "                      read the experts the next layer's router picks early (default: auto)\n"
           "  --read-threads N    expert reads in flight (default: 4)\n"
           "  --preload           fill the arena with experts before serving\n"
           "  --repacked-experts auto|FILE|none\n"
           "                      experts rewritten once in ggml's repacked layout (epq repack): auto\n"
           "                      reads MODEL.epq-repacked when it is there and made for this CPU, so a\n"
           "                      partial arena runs stock's default layout (default: auto)\n"
           "  --no-pager          run the model as stock llama-server does (mmap), for comparison\n"
           "  --trace FILE        record every (token, layer, experts) for epq simulate\n"
           "  --decode-streams N|auto|all\n"
           "                      requests that generate at once; later ones wait in arrival order. auto:\n"
           "                      every slot when the arena holds every expert, otherwise as many as\n"
           "                      the arena holds the working experts of; all: every slot, as\n"
           "                      llama-server (default: auto)\n"
           "The pager's live view is at /epq/ beside llama.cpp's web UI; its counters at /epq/stats\n"
           "(JSON) and /epq/metrics (Prometheus).\n\n";
}

}  // namespace epq::server
