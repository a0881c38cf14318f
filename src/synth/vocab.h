// Real tokenizers for synthetic models: the ggml-vocab-*.gguf files of the pinned llama.cpp
// tree, installed beside the epq binary by the build.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct gguf_context;

namespace epq {

// Where ggml-vocab-<name>.gguf files are looked for, in order: $EPQ_VOCAB_DIR,
// <binary>/../share/epq/vocab, and the build tree's copy of the pinned llama.cpp models/.
std::vector<std::string> vocab_search_dirs();

// The text of a chat template of the pinned llama.cpp tree (models/templates/<file>, the Jinja
// templates real models ship), installed beside the binary by the build. Throws epq::Error.
std::string load_chat_template(const std::string & file);

class Vocab {
public:
    // Throws epq::Error listing the places searched and the vocabularies found.
    static Vocab load(const std::string & name);

    const std::string & name() const { return name_; }
    int64_t n_tokens() const { return n_tokens_; }
    // Copies every tokenizer.* key into `dst`, adapted to a chat model: the end-of-sequence
    // token becomes <|im_end|> where the vocabulary has it.
    void copy_into(gguf_context * dst) const;

private:
    struct CtxFree {
        void operator()(gguf_context * c) const;
    };
    std::string name_;
    std::unique_ptr<gguf_context, CtxFree> ctx_;
    int64_t n_tokens_ = 0;
};

}  // namespace epq
