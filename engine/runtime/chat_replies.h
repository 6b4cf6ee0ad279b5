// Chat replies the engine generated, remembered so that a later turn's prompt
// carries the model's own tokens for them. A client sends a reply back as
// text; re-encoding that text does not always give the ids the model
// generated (SentencePiece has several spellings of most strings), and every
// token after the first difference falls out of the KV-cache prefix the engine
// can reuse. ChatReplies remembers recent replies (text -> generated ids) and
// puts the ids in place of each reply span of a rendered prompt
// (ChatSpan::reply) whose text matches exactly and which they decode to, so a
// multi-turn chat does not re-run its history. One pass over the prompt, no
// second rendering. Must not run the model.
#pragma once
#include <cstddef>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

class ChatReplies {
public:
    // A finished chat reply: its text as sent to the client and the ids
    // generated for it. Thread-safe.
    void remember(const std::string& text, const std::vector<int>& tokens);

    // prompt (rendered from messages) with each reply span that is a
    // remembered reply carried by its generated ids; the spans follow.
    // Thread-safe.
    ChatPrompt splice(ChatPrompt prompt, std::span<const ChatMessage> messages, const Tokenizer& tokenizer) const;

    static constexpr size_t MAX_REPLIES = 64;

private:
    mutable std::mutex mutex_;
    std::deque<std::pair<std::string, std::vector<int>>> replies_;  // newest last
};
