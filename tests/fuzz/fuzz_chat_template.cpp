// Fuzzes the chat-template renderer with the real Mistral tokenizer
// (chat/chat_template.h). Input: a family byte, a flags byte, then
// messages separated by 0x1e, each a role byte and its content. Rendering
// must succeed or throw MoeError; its spans must cover the ids exactly and
// every id must be in the vocabulary.
#include <cstdlib>
#include <vector>

#include "base/errors.h"
#include "chat/chat_template.h"
#include "fuzz_support.h"

namespace {

void check(const ChatPrompt& p, const std::vector<int>& ids) {
    if (p.ids != ids) std::abort();
    size_t at = 0;
    for (const ChatSpan& s : p.spans) {
        if (s.begin != at || s.end < s.begin) std::abort();
        at = s.end;
    }
    if (at != p.ids.size()) std::abort();
    for (int id : p.ids)
        if (id < 0 || id >= fuzz_tokenizer_model().vocab_size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    static const ChatRole roles[] = {ChatRole::SYSTEM, ChatRole::USER, ChatRole::ASSISTANT, ChatRole::TOOL};
    ChatTemplate tmpl(static_cast<ChatFamily>(data[0] % 4));
    bool generation_prompt = data[1] & 1;
    std::vector<ChatMessage> messages;
    std::string rest = fuzz_text(data + 2, size - 2);
    for (size_t pos = 0; pos <= rest.size() && !rest.empty();) {
        size_t end = rest.find('\x1e', pos);
        if (end == std::string::npos) end = rest.size();
        if (end > pos)
            messages.push_back({roles[static_cast<unsigned char>(rest[pos]) % 4], rest.substr(pos + 1, end - pos - 1)});
        pos = end + 1;
    }
    fuzz_expect<MoeError>(
        [&] {
            ChatPrompt p = tmpl.render(fuzz_tokenizer_model(), messages, generation_prompt);
            check(p, tmpl.encode(fuzz_tokenizer_model(), messages, generation_prompt));
            tmpl.render_text(messages, generation_prompt);
        },
        [](const MoeError&) {});
    return 0;
}
