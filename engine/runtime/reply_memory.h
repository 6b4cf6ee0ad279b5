// Replies the session generated, remembered so that a later turn's prompt
// carries the model's own tokens for them. A client sends a reply back as
// text; re-encoding that text does not always give the ids the model
// generated (SentencePiece has several spellings of most strings), and every
// token after the first difference falls out of the KV-cache prefix the
// session can reuse. ReplyMemory remembers recent replies (text -> generated
// ids) and puts the ids in place of each span of a prompt that encodes a
// reply on its own (ReplySpan: the chat renderer marks them, chat/
// ChatSpan::reply) whose text matches exactly and which they decode to, so a
// multi-turn chat does not re-run its history. One pass over the prompt, no
// second rendering. Token ids and texts only: it knows nothing of chat
// templates or messages. Must not run the model.
#pragma once
#include <cstddef>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/text/tokenizer.h"

// Tokens [begin, end) of a prompt that encode `text`, a reply, on its own.
struct ReplySpan {
    size_t begin = 0, end = 0;
    std::string_view text;
};

class ReplyMemory {
public:
    // A finished reply: its text as sent to the client and the ids generated
    // for it. Thread-safe.
    void remember(const std::string& text, const std::vector<int>& tokens);

    // ids with each span (in order, disjoint, within ids) whose text is a
    // remembered reply carried by its generated ids; each span's begin and
    // end move to where its ids now are. Thread-safe.
    std::vector<int> splice(std::vector<int> ids, std::span<ReplySpan> spans, const Tokenizer& tokenizer) const;

    static constexpr size_t MAX_REPLIES = 64;

private:
    mutable std::mutex mutex_;
    std::deque<std::pair<std::string, std::vector<int>>> replies_;  // newest last
};
