// Reply-token splicing for chat prompts (see chat_prompt.h).
#include "server/chat_prompt.h"

#include <algorithm>
#include <optional>

namespace {

bool has_at(const std::vector<int>& ids, size_t at, const std::vector<int>& part) {
    return at + part.size() <= ids.size() && std::equal(part.begin(), part.end(), ids.begin() + at);
}

}  // namespace

void ReplyTokens::remember(const std::string& text, const std::vector<int>& tokens) {
    if (text.empty() || tokens.empty()) return;
    std::lock_guard lock(mutex_);
    std::erase_if(replies_, [&](const auto& r) { return r.first == text; });
    replies_.emplace_back(text, tokens);
    if (replies_.size() > MAX_REPLIES) replies_.pop_front();
}

std::vector<int> ReplyTokens::encode(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                                     std::span<const ChatMessage> messages) const {
    std::vector<int> full = chat_template.encode(tokenizer, messages);
    auto lookup = [&](const std::string& text) -> std::optional<std::vector<int>> {
        std::lock_guard lock(mutex_);
        for (auto it = replies_.rbegin(); it != replies_.rend(); ++it)
            if (it->first == text) return it->second;
        return std::nullopt;
    };

    // Where each spliceable reply sits in `full`: (start, length of its
    // re-encoding, generated ids). Found in order, replaced back to front.
    struct Splice {
        size_t start, length;
        std::vector<int> ids;
    };
    std::vector<Splice> splices;
    for (size_t k = 1; k < messages.size(); k++) {
        const ChatMessage& m = messages[k];
        if (m.role != "assistant" || m.content.empty()) continue;
        std::optional<std::vector<int>> ids = lookup(m.content);
        if (!ids || tokenizer.decode(*ids) != m.content) continue;
        std::vector<int> before, through;
        try {
            before = chat_template.encode(tokenizer, messages.first(k), true);
            through = chat_template.encode(tokenizer, messages.first(k + 1), false);
        } catch (const std::exception&) {
            continue;  // a prefix this family cannot render on its own
        }
        std::vector<int> text = tokenizer.encode(m.content);
        // The template must render the conversation prefix-stably and put the
        // reply's text right after the generation prompt, encoded on its own.
        if (!has_at(full, 0, through) || !has_at(through, 0, before) || !has_at(through, before.size(), text)) continue;
        splices.push_back({before.size(), text.size(), std::move(*ids)});
    }
    for (auto it = splices.rbegin(); it != splices.rend(); ++it) {
        full.erase(full.begin() + long(it->start), full.begin() + long(it->start + it->length));
        full.insert(full.begin() + long(it->start), it->ids.begin(), it->ids.end());
    }
    return full;
}
