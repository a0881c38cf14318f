#include "synth/vocab.h"

#include "util/error.h"

#include "gguf.h"

#include <climits>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <unistd.h>

#ifndef EPQ_BUILD_TEMPLATE_DIR
#define EPQ_BUILD_TEMPLATE_DIR ""
#endif
#ifndef EPQ_BUILD_VOCAB_DIR
#define EPQ_BUILD_VOCAB_DIR ""
#endif

namespace epq {

namespace {

bool file_exists(const std::string & p) {
    return access(p.c_str(), R_OK) == 0;
}

std::string exe_dir() {
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) {
        return "";
    }
    std::string p(buf, static_cast<size_t>(n));
    return p.substr(0, p.rfind('/'));
}

std::vector<std::string> available(const std::vector<std::string> & dirs) {
    std::vector<std::string> names;
    for (const auto & d : dirs) {
        DIR * dir = opendir(d.c_str());
        if (!dir) {
            continue;
        }
        while (dirent * e = readdir(dir)) {
            std::string f = e->d_name;
            const std::string pre = "ggml-vocab-", suf = ".gguf";
            if (f.size() > pre.size() + suf.size() && f.compare(0, pre.size(), pre) == 0 &&
                f.compare(f.size() - suf.size(), suf.size(), suf) == 0) {
                names.push_back(f.substr(pre.size(), f.size() - pre.size() - suf.size()));
            }
        }
        closedir(dir);
        if (!names.empty()) {
            break;
        }
    }
    return names;
}

}  // namespace

void Vocab::CtxFree::operator()(gguf_context * c) const {
    gguf_free(c);
}

std::vector<std::string> vocab_search_dirs() {
    std::vector<std::string> dirs;
    if (const char * env = std::getenv("EPQ_VOCAB_DIR"); env && *env) {
        dirs.emplace_back(env);
    }
    const std::string exe = exe_dir();
    if (!exe.empty()) {
        dirs.push_back(exe + "/../share/epq/vocab");
    }
    if (*EPQ_BUILD_VOCAB_DIR) {
        dirs.emplace_back(EPQ_BUILD_VOCAB_DIR);
    }
    return dirs;
}

std::string load_chat_template(const std::string & file) {
    std::vector<std::string> dirs;
    if (const std::string exe = exe_dir(); !exe.empty()) {
        dirs.push_back(exe + "/../share/epq/templates");
    }
    if (*EPQ_BUILD_TEMPLATE_DIR) {
        dirs.emplace_back(EPQ_BUILD_TEMPLATE_DIR);
    }
    for (const auto & d : dirs) {
        std::ifstream in(d + "/" + file, std::ios::binary);
        if (in) {
            std::ostringstream text;
            text << in.rdbuf();
            return text.str();
        }
    }
    throw Error("chat template " + file +
                " not found beside the binary (share/epq/templates); rebuild epq so the "
                "build installs the pinned tree's templates");
}

Vocab Vocab::load(const std::string & name) {
    const auto dirs = vocab_search_dirs();
    std::string path;
    for (const auto & d : dirs) {
        const std::string p = d + "/ggml-vocab-" + name + ".gguf";
        if (file_exists(p)) {
            path = p;
            break;
        }
    }
    if (path.empty()) {
        std::string where, names;
        for (const auto & d : dirs) {
            where += (where.empty() ? "" : ", ") + d;
        }
        for (const auto & n : available(dirs)) {
            names += (names.empty() ? "" : ", ") + n;
        }
        throw Error(
            "tokenizer vocabulary '" + name + "' not found (looked for ggml-vocab-" + name + ".gguf in " + where +
            "); " +
            (names.empty() ? "rebuild epq so the build installs them, or set EPQ_VOCAB_DIR" : "available: " + names));
    }
    Vocab v;
    v.name_ = name;
    gguf_init_params params{true, nullptr};
    v.ctx_.reset(gguf_init_from_file(path.c_str(), params));
    if (!v.ctx_) {
        throw Error("cannot read tokenizer vocabulary " + path);
    }
    const int64_t id = gguf_find_key(v.ctx_.get(), "tokenizer.ggml.tokens");
    if (id < 0) {
        throw Error(path + " has no tokenizer.ggml.tokens");
    }
    v.n_tokens_ = static_cast<int64_t>(gguf_get_arr_n(v.ctx_.get(), id));
    return v;
}

void Vocab::copy_into(gguf_context * dst) const {
    // gguf_set_kv copies every key; take all, then drop what belongs to the vocabulary file's
    // own (unrelated) model.
    gguf_context * tmp = gguf_init_empty();
    gguf_set_kv(tmp, ctx_.get());
    for (int64_t i = gguf_get_n_kv(tmp) - 1; i >= 0; --i) {
        const std::string key = gguf_get_key(tmp, i);
        if (key.rfind("tokenizer.", 0) != 0) {
            gguf_remove_key(tmp, key.c_str());
        }
    }
    gguf_set_kv(dst, tmp);
    gguf_free(tmp);

    const int64_t tokens = gguf_find_key(dst, "tokenizer.ggml.tokens");
    for (size_t i = 0; i < gguf_get_arr_n(dst, tokens); ++i) {
        if (std::string(gguf_get_arr_str(dst, tokens, i)) == "<|im_end|>") {
            gguf_set_val_u32(dst, "tokenizer.ggml.eos_token_id", static_cast<uint32_t>(i));
            break;
        }
    }
    if (gguf_find_key(dst, "tokenizer.ggml.pre") < 0 && name_ == "gpt-neox") {
        // OLMoE's tokenizer is GPT-NeoX's with the GPT-2 pre-tokenizer, which llama.cpp calls "olmo".
        gguf_set_val_str(dst, "tokenizer.ggml.pre", "olmo");
    }
}

}  // namespace epq
