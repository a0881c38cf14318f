// A conversation rendered by the model's chat template through llama.cpp's common chat code
// (Jinja, as llama-server renders it): `epq chat` sees what a real model's template gives.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

struct llama_model;

namespace epq {

class ChatTemplate {
public:
    // `override_template`: a template's text (--chat-template-file) or a built-in name
    // (--chat-template); empty: the model's own, or ChatML when it has none. Throws epq::Error
    // when llama.cpp cannot parse it.
    ChatTemplate(const llama_model * model, const std::string & override_template);
    ~ChatTemplate();
    ChatTemplate(const ChatTemplate &) = delete;
    ChatTemplate & operator=(const ChatTemplate &) = delete;

    // (role, content) messages as the prompt text; with `add_assistant`, ending where the
    // assistant's reply begins.
    std::string render(const std::vector<std::pair<std::string, std::string>> & msgs, bool add_assistant) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace epq
