// ModelChat: which template renders a chat request, and the Jinja path's
// tokenization (see model_chat.h).
#include "engine/model/model_chat.h"

ModelChat::ModelChat(const ModelSource& source, const Tokenizer& tokenizer, std::string* warning)
    : builtin_(model_source_chat_template(source, warning)) {
    const bool recognised = warning->empty();
    try {
        jinja_ = model_source_jinja_chat(source, tokenizer, &origin_);
    } catch (const MoeError& e) {
        *warning += (warning->empty() ? "" : "; ") + std::string(e.what()) + "; chats use the " +
                    chat_family_name(builtin_.family()) + " built-in renderer";
        return;
    }
    if (!jinja_) return;
    if (!recognised) warning->clear();  // the Jinja template renders what detection did not know
    builtin_plain_ = recognised && builtin_.family() == ChatFamily::MISTRAL;
}

bool ModelChat::uses_jinja(const ChatInput& chat) const {
    if (!jinja_) return false;
    if (!builtin_plain_) return true;
    if (!chat.tools.empty() || !chat.extras.empty() || !chat.add_generation_prompt) return true;
    for (const ChatMessage& m : chat.messages)
        if (m.role != "system" && m.role != "user" && m.role != "assistant") return true;
    for (const auto& m : chat.messages_json)
        if (m.is_object() && m.contains("tool_calls") && !m["tool_calls"].empty()) return true;
    return false;
}

std::string ModelChat::render_jinja(const ChatInput& chat) const {
    try {
        return jinja_->render(chat.messages_json, chat.tools, chat.add_generation_prompt, chat.extras);
    } catch (const MoeError& e) {
        throw ChatTemplateError(e.what());
    }
}

ChatPrompt ModelChat::prompt(const Tokenizer& tokenizer, const ChatInput& chat) const {
    if (!uses_jinja(chat)) return builtin_.render(tokenizer, chat.messages, chat.add_generation_prompt);
    ChatPrompt prompt;
    prompt.ids = tokenizer.encode(render_jinja(chat), true, SpecialTokens::PARSE);
    prompt.spans.push_back({0, prompt.ids.size(), -1, false});
    return prompt;
}

std::string ModelChat::text(const ChatInput& chat) const {
    if (uses_jinja(chat)) return render_jinja(chat);
    return builtin_.render_text(chat.messages, chat.add_generation_prompt);
}

std::string ModelChat::name() const {
    const std::string family = chat_family_name(builtin_.family());
    if (!jinja_) return family + " (built-in)";
    const std::string jinja = "jinja (" + origin_ + ")";
    return builtin_plain_ ? family + " (built-in; " + jinja + " for tools)" : jinja;
}
