// Tests of ReplyMemory: a remembered reply's generated ids take the place of
// its re-encoding in a chat prompt rendered once, and the ids are those of
// the former splice (the server's ReplyTokens, which rendered the prefix of
// the conversation before and through every reply again; kept here as the
// reference) for every family, with system messages anywhere, merged turns
// and ids that do not decode to the text.
#include <catch2/catch.hpp>
#include <map>

#include "chat/chat_template.h"
#include "engine/runtime/reply_memory.h"
#include "test_support.h"
#include "tokenizer_fixtures.h"

namespace {

using Remembered = std::map<std::string, std::vector<int>>;

bool has_at(const std::vector<int>& ids, size_t at, const std::vector<int>& part) {
    return at + part.size() <= ids.size() && std::equal(part.begin(), part.end(), ids.begin() + long(at));
}

// The former splice: for each remembered assistant message k, messages
// [0, k) rendered with the generation prompt and [0, k] without; the reply's
// own encoding replaced where the whole starts with the second, the second
// with the first, and the reply's encoding follows the first.
std::vector<int> reference_splice(const ChatTemplate& t, const Tokenizer& tok, std::span<const ChatMessage> messages,
                                  const Remembered& remembered) {
    std::vector<int> full = t.encode(tok, messages);
    struct Splice {
        size_t start, length;
        std::vector<int> ids;
    };
    std::vector<Splice> splices;
    for (size_t k = 1; k < messages.size(); k++) {
        const ChatMessage& m = messages[k];
        const auto it = remembered.find(m.content);
        if (m.role != ChatRole::ASSISTANT || m.content.empty() || it == remembered.end()) continue;
        if (tok.decode(it->second) != m.content) continue;
        std::vector<int> before, through;
        try {
            before = t.encode(tok, messages.first(k), true);
            through = t.encode(tok, messages.first(k + 1), false);
        } catch (const std::exception&) {
            continue;
        }
        const std::vector<int> text = tok.encode(m.content);
        if (!has_at(full, 0, through) || !has_at(through, 0, before) || !has_at(through, before.size(), text)) continue;
        splices.push_back({before.size(), text.size(), it->second});
    }
    for (auto s = splices.rbegin(); s != splices.rend(); ++s) {
        full.erase(full.begin() + long(s->start), full.begin() + long(s->start + s->length));
        full.insert(full.begin() + long(s->start), s->ids.begin(), s->ids.end());
    }
    return full;
}

// The text spelled as two encodings, split after its third character:
// decodes the same, and is usually not the tokenizer's own encoding.
std::vector<int> respelled(const Tokenizer& tok, const std::string& text) {
    std::vector<int> ids = tok.encode(text.substr(0, 3));
    const std::vector<int> rest = tok.encode(text.substr(3), false);
    ids.insert(ids.end(), rest.begin(), rest.end());
    return ids;
}

// The reply spans of a rendered prompt, with their messages' texts (as the
// server's chat_prompt_of passes them).
std::vector<ReplySpan> reply_spans(const ChatPrompt& prompt, std::span<const ChatMessage> messages) {
    std::vector<ReplySpan> out;
    for (const ChatSpan& s : prompt.spans)
        if (s.reply) out.push_back({s.begin, s.end, messages[size_t(s.message)].content});
    return out;
}

std::vector<int> spliced(const ReplyMemory& replies, const ChatTemplate& t, const Tokenizer& tok,
                         const std::vector<ChatMessage>& messages) {
    ChatPrompt prompt = t.render(tok, messages);
    std::vector<ReplySpan> spans = reply_spans(prompt, messages);
    return replies.splice(std::move(prompt.ids), spans, tok);
}

}  // namespace

TEST_CASE("earlier replies are carried by their generated ids, not a re-encoding", "[reply_memory]") {
    const Tokenizer& t = tokenizer_test::mistral();
    ChatTemplate mistral(ChatFamily::MISTRAL);
    // "Hello" spelled as two pieces: decodes the same, encodes differently.
    std::vector<int> generated = {t.piece_to_id("\xE2\x96\x81Hel"), t.piece_to_id("lo")};
    REQUIRE(generated[0] >= 0);
    REQUIRE(generated[1] >= 0);
    REQUIRE(t.decode(generated) == "Hello");
    REQUIRE(t.encode("Hello") != generated);
    std::vector<ChatMessage> chat = {{ChatRole::USER, "hi"}, {ChatRole::ASSISTANT, "Hello"}, {ChatRole::USER, "again"}};
    std::vector<int> plain = mistral.encode(t, chat);

    ReplyMemory replies;
    CHECK(spliced(replies, mistral, t, chat) == plain);  // nothing remembered yet
    replies.remember("Hello", generated);
    std::vector<int> ids = spliced(replies, mistral, t, chat);
    std::vector<int> before = mistral.encode(t, std::span(chat).first(1));
    std::vector<int> expected = before;
    expected.insert(expected.end(), generated.begin(), generated.end());
    std::vector<int> rest(plain.begin() + long(before.size() + t.encode("Hello").size()), plain.end());
    expected.insert(expected.end(), rest.begin(), rest.end());
    CHECK(ids == expected);
    CHECK(t.decode(ids) == t.decode(plain));

    // The spans follow: the reply's span holds the generated ids, and the
    // ids around it are the rendering's.
    const ChatPrompt rendered = mistral.render(t, chat);
    const std::vector<ReplySpan> before_splice = reply_spans(rendered, chat);
    std::vector<ReplySpan> spans = before_splice;
    const std::vector<int> carried = replies.splice(rendered.ids, spans, t);
    REQUIRE(spans.size() == 1);
    CHECK(spans[0].text == "Hello");
    CHECK(std::vector<int>(carried.begin() + long(spans[0].begin), carried.begin() + long(spans[0].end)) == generated);
    CHECK(std::vector<int>(carried.begin(), carried.begin() + long(spans[0].begin)) ==
          std::vector<int>(rendered.ids.begin(), rendered.ids.begin() + long(before_splice[0].begin)));
    CHECK(std::vector<int>(carried.begin() + long(spans[0].end), carried.end()) ==
          std::vector<int>(rendered.ids.begin() + long(before_splice[0].end), rendered.ids.end()));

    // A different text, or ids that do not decode to it, are left alone.
    std::vector<ChatMessage> other = {{ChatRole::USER, "hi"}, {ChatRole::ASSISTANT, "Hello!"}, {ChatRole::USER, "again"}};
    CHECK(spliced(replies, mistral, t, other) == mistral.encode(t, other));
    ReplyMemory wrong;
    wrong.remember("Hello", {t.piece_to_id("lo")});
    CHECK(spliced(wrong, mistral, t, chat) == plain);
}

TEST_CASE("one rendering splices exactly where rendering every prefix again did", "[reply_memory]") {
    const Tokenizer& tok = tokenizer_test::extended();
    const std::vector<std::vector<ChatMessage>> conversations = {
        {{ChatRole::USER, "hi"}, {ChatRole::ASSISTANT, "Hello there"}, {ChatRole::USER, "again"}},
        {{ChatRole::SYSTEM, "Be brief."},
         {ChatRole::USER, "Hi"},
         {ChatRole::ASSISTANT, "Hello, friend!"},
         {ChatRole::USER, "More?"},
         {ChatRole::ASSISTANT, "Sure thing"},
         {ChatRole::USER, "Bye"}},
        // A system message before the reply, after it, and both.
        {{ChatRole::USER, "a"}, {ChatRole::SYSTEM, "s"}, {ChatRole::ASSISTANT, "Hello there"}, {ChatRole::USER, "b"}},
        {{ChatRole::USER, "a"}, {ChatRole::ASSISTANT, "Hello there"}, {ChatRole::SYSTEM, "s"}, {ChatRole::USER, "b"}},
        {{ChatRole::SYSTEM, "s1"}, {ChatRole::USER, "a"}, {ChatRole::ASSISTANT, "Hello there"}, {ChatRole::SYSTEM, "s2"}, {ChatRole::USER, "b"}},
        // An empty system prompt after the reply adds nothing, unless one came before.
        {{ChatRole::USER, "a"}, {ChatRole::ASSISTANT, "Hello there"}, {ChatRole::SYSTEM, ""}, {ChatRole::USER, "b"}},
        {{ChatRole::SYSTEM, ""}, {ChatRole::USER, "a"}, {ChatRole::ASSISTANT, "Hello there"}, {ChatRole::SYSTEM, ""}, {ChatRole::USER, "b"}},
        // Replies joined with their neighbour; users joined.
        {{ChatRole::USER, "a"}, {ChatRole::ASSISTANT, "Hello there"}, {ChatRole::ASSISTANT, "Sure thing"}, {ChatRole::USER, "b"}},
        {{ChatRole::USER, "a"},
         {ChatRole::USER, "b"},
         {ChatRole::ASSISTANT, "Hello there"},
         {ChatRole::USER, "c"},
         {ChatRole::USER, "d"},
         {ChatRole::ASSISTANT, " spaced  out "},
         {ChatRole::USER, "e"}},
        // Ending with a reply.
        {{ChatRole::USER, "a"}, {ChatRole::ASSISTANT, "Hello there"}, {ChatRole::USER, "b"}, {ChatRole::ASSISTANT, "Sure thing"}},
    };
    std::map<ChatFamily, std::vector<size_t>> differ_from_plain;  // the conversations spliced
    for (ChatFamily family : {ChatFamily::MISTRAL, ChatFamily::CHATML, ChatFamily::LLAMA3, ChatFamily::PHI3}) {
        const ChatTemplate t(family);
        for (size_t c = 0; c < conversations.size(); c++) {
            INFO(chat_family_name(family) << " conversation " << c);
            const std::vector<ChatMessage>& messages = conversations[c];
            Remembered right, wrong;
            ReplyMemory right_replies, wrong_replies;
            for (const ChatMessage& m : messages) {
                if (m.role != ChatRole::ASSISTANT) continue;
                right[m.content] = respelled(tok, m.content);
                wrong[m.content] = tok.encode(m.content + "?");
                right_replies.remember(m.content, right[m.content]);
                wrong_replies.remember(m.content, wrong[m.content]);
            }
            const std::vector<int> plain = t.encode(tok, messages);
            CHECK(spliced(ReplyMemory(), t, tok, messages) == plain);
            const std::vector<int> ids = spliced(right_replies, t, tok, messages);
            CHECK(ids == reference_splice(t, tok, messages, right));
            CHECK(spliced(wrong_replies, t, tok, messages) == reference_splice(t, tok, messages, wrong));
            CHECK(spliced(wrong_replies, t, tok, messages) == plain);
            if (ids != plain) differ_from_plain[family].push_back(c);
        }
    }
    // Mistral splices where the system prompt stays and no reply is joined;
    // the other families never do (a reply is encoded with the text before it).
    CHECK(differ_from_plain == std::map<ChatFamily, std::vector<size_t>>{{ChatFamily::MISTRAL, {0, 1, 2, 5, 8, 9}}});
}

TEST_CASE("only the newest replies are remembered", "[reply_memory]") {
    const Tokenizer& tok = tokenizer_test::mistral();
    const ChatTemplate t(ChatFamily::MISTRAL);
    ReplyMemory replies;
    const std::vector<ChatMessage> chat = {{ChatRole::USER, "hi"}, {ChatRole::ASSISTANT, "Hello there"}, {ChatRole::USER, "again"}};
    replies.remember("Hello there", respelled(tok, "Hello there"));
    REQUIRE(spliced(replies, t, tok, chat) != t.encode(tok, chat));
    for (size_t i = 0; i < ReplyMemory::MAX_REPLIES; i++) replies.remember("reply " + std::to_string(i), {1});
    CHECK(spliced(replies, t, tok, chat) == t.encode(tok, chat));
}
