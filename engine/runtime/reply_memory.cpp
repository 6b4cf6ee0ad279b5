// Remembered replies and their splice into a prompt (see reply_memory.h).
#include "engine/runtime/reply_memory.h"

#include <algorithm>

void ReplyMemory::remember(const std::string& text, const std::vector<int>& tokens) {
    if (text.empty() || tokens.empty()) return;
    std::lock_guard lock(mutex_);
    std::erase_if(replies_, [&](const auto& r) { return r.first == text; });
    replies_.emplace_back(text, tokens);
    if (replies_.size() > MAX_REPLIES) replies_.pop_front();
}

std::vector<int> ReplyMemory::splice(std::vector<int> ids, std::span<ReplySpan> spans,
                                     const Tokenizer& tokenizer) const {
    // The generated ids for each span, found under the lock (replies_ holds
    // each text once); empty where none is remembered.
    std::vector<std::vector<int>> generated(spans.size());
    bool any = false;
    {
        std::lock_guard lock(mutex_);
        for (size_t s = 0; s < spans.size(); s++) {
            const auto it =
                std::find_if(replies_.begin(), replies_.end(), [&](const auto& r) { return r.first == spans[s].text; });
            if (it == replies_.end()) continue;
            generated[s] = it->second;
            any = true;
        }
    }
    if (!any) return ids;
    std::vector<int> out;
    out.reserve(ids.size());
    size_t copied = 0;  // ids before this are in out
    for (size_t s = 0; s < spans.size(); s++) {
        ReplySpan& span = spans[s];
        out.insert(out.end(), ids.begin() + long(copied), ids.begin() + long(span.begin));
        const std::vector<int>& mine = generated[s];
        // Ids that do not decode to the text would change what the model reads.
        const bool use = !mine.empty() && tokenizer.decode(mine) == span.text;
        const size_t begin = out.size();
        if (use)
            out.insert(out.end(), mine.begin(), mine.end());
        else
            out.insert(out.end(), ids.begin() + long(span.begin), ids.begin() + long(span.end));
        copied = span.end;
        span.begin = begin;
        span.end = out.size();
    }
    out.insert(out.end(), ids.begin() + long(copied), ids.end());
    return out;
}
