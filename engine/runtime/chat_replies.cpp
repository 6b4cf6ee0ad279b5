// Remembered chat replies and their splice into a rendered prompt (see
// chat_replies.h).
#include "engine/runtime/chat_replies.h"

#include <algorithm>

void ChatReplies::remember(const std::string& text, const std::vector<int>& tokens) {
    if (text.empty() || tokens.empty()) return;
    std::lock_guard lock(mutex_);
    std::erase_if(replies_, [&](const auto& r) { return r.first == text; });
    replies_.emplace_back(text, tokens);
    if (replies_.size() > MAX_REPLIES) replies_.pop_front();
}

ChatPrompt ChatReplies::splice(ChatPrompt prompt, std::span<const ChatMessage> messages,
                               const Tokenizer& tokenizer) const {
    // The generated ids for each reply span, found under the lock (replies_
    // holds each text once); empty where none is remembered.
    std::vector<std::vector<int>> generated(prompt.spans.size());
    bool any = false;
    {
        std::lock_guard lock(mutex_);
        for (size_t s = 0; s < prompt.spans.size(); s++) {
            if (!prompt.spans[s].reply) continue;
            const std::string& text = messages[size_t(prompt.spans[s].message)].content;
            const auto it =
                std::find_if(replies_.begin(), replies_.end(), [&](const auto& r) { return r.first == text; });
            if (it == replies_.end()) continue;
            generated[s] = it->second;
            any = true;
        }
    }
    if (!any) return prompt;
    ChatPrompt out;
    out.ids.reserve(prompt.ids.size());
    out.spans.reserve(prompt.spans.size());
    for (size_t s = 0; s < prompt.spans.size(); s++) {
        ChatSpan span = prompt.spans[s];
        const std::vector<int>& ids = generated[s];
        // Ids that do not decode to the text would change what the model reads.
        const bool use = !ids.empty() && tokenizer.decode(ids) == messages[size_t(span.message)].content;
        const auto from = prompt.ids.begin() + long(span.begin);
        span.begin = out.ids.size();
        if (use)
            out.ids.insert(out.ids.end(), ids.begin(), ids.end());
        else
            out.ids.insert(out.ids.end(), from, prompt.ids.begin() + long(span.end));
        span.end = out.ids.size();
        out.spans.push_back(span);
    }
    return out;
}
