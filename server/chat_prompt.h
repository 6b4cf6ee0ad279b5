// Chat prompts that keep the model's own tokens for its earlier replies.
// A client sends a reply back as text; re-encoding that text does not always
// give the ids the model generated (SentencePiece has several spellings of
// most strings), and every token after the first difference falls out of the
// KV-cache prefix the engine can reuse. ReplyTokens remembers recent replies
// (text -> generated ids) and splices the ids back in place of the
// re-encoding when the text matches exactly and decodes to the same string,
// so a multi-turn chat does not re-run its history. Must not run the model.
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

class ReplyTokens {
public:
    // A finished chat reply: its text as sent to the client and the ids
    // generated for it. Thread-safe.
    void remember(const std::string& text, const std::vector<int>& tokens);

    // The chat template's encoding of messages, with each assistant message
    // that is a remembered reply carried by its generated ids. Falls back to
    // the plain encoding wherever the template does not place the reply's
    // text as one separately encoded segment. Throws MoeError as
    // ChatTemplate::encode does.
    std::vector<int> encode(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                            std::span<const ChatMessage> messages) const;

    static constexpr size_t MAX_REPLIES = 64;

private:
    mutable std::mutex mutex_;
    std::deque<std::pair<std::string, std::vector<int>>> replies_;  // newest last
};
