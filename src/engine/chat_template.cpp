#include "engine/chat_template.h"

#include "util/error.h"

#include "chat.h"

namespace epq {

struct ChatTemplate::Impl {
    common_chat_templates_ptr tmpls;
};

ChatTemplate::ChatTemplate(const llama_model * model, const std::string & override_template)
    : impl_(std::make_unique<Impl>()) {
    try {
        impl_->tmpls = common_chat_templates_init(model, override_template);
    } catch (const std::exception & e) {
        throw Error(std::string("the chat template cannot be used: ") + e.what());
    }
    if (!impl_->tmpls) {
        throw Error("the chat template cannot be used");
    }
}

ChatTemplate::~ChatTemplate() = default;

std::string ChatTemplate::render(const std::vector<std::pair<std::string, std::string>> & msgs,
                                 bool add_assistant) const {
    common_chat_templates_inputs in;
    for (const auto & [role, content] : msgs) {
        common_chat_msg m;
        m.role = role;
        m.content = content;
        in.messages.push_back(std::move(m));
    }
    in.add_generation_prompt = add_assistant;
    in.use_jinja = true;
    try {
        return common_chat_templates_apply(impl_->tmpls.get(), in).prompt;
    } catch (const std::exception & e) {
        throw Error(std::string("the chat template failed on this conversation: ") + e.what());
    }
}

}  // namespace epq
