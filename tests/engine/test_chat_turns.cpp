// Chat turns through the Session: the model's chat renders a conversation
// once (its spans say where each message's tokens are), the session carries
// the reply it generated in an earlier turn by its generated ids
// (Session::carry_replies, as the server's chat_prompt_of calls it), and so
// the second turn of a chat reuses the first turn's KV cache.
#include <algorithm>
#include <catch2/catch.hpp>

#include "chat/model_chat.h"
#include "engine/runtime/session.h"
#include "test_support.h"

TEST_CASE("the second turn of a chat reuses the first turn's KV cache", "[chat]") {
    Session engine(load_model({test_model_dir("tiny"), 2}),
                   SessionOptions{.threads = 2, .ctx = 256, .max_batch = 512, .device = {}});
    const Tokenizer& tok = engine.model().tokenizer();
    std::string warning;
    const ModelChat chat(engine.model(), &warning);
    // A prompt as the server builds it: rendered once, replies carried.
    auto chat_prompt = [&](const std::vector<ChatMessage>& messages) {
        ChatPrompt p = chat.prompt(tok, ChatInput::of(messages));
        std::vector<ReplySpan> replies;
        for (const ChatSpan& s : p.spans)
            if (s.reply) replies.push_back({s.begin, s.end, messages[size_t(s.message)].content});
        p.ids = engine.carry_replies(std::move(p.ids), replies);
        return std::make_pair(p.ids, replies);
    };
    auto run = [&](const std::vector<int>& prompt) {
        GenerateRequest req;
        req.prompt = prompt;
        req.sampling.temperature = 0;
        req.max_tokens = 12;
        req.ignore_eos = true;
        return engine.generate(req, [](const TokenEvent&) { return true; });
    };

    const std::vector<ChatMessage> turn1 = {{ChatRole::USER, "Tell me a story."}};
    const auto [ids1, replies1] = chat_prompt(turn1);
    CHECK(replies1.empty());
    CHECK(ids1 == chat.builtin().encode(tok, turn1));
    const ChatPrompt prompt1{ids1, {}};
    const GenerateResult reply = run(prompt1.ids);
    REQUIRE(reply.n_cached == 0);
    REQUIRE(reply.finish_reason == FinishReason::LENGTH);
    REQUIRE(tok.decode(reply.tokens) == reply.text);
    // The reply's text encodes to other ids than the model generated, so
    // without the engine's splice the cache would stop matching inside it.
    const std::vector<int> reencoded = tok.encode(reply.text);
    const size_t same =
        size_t(std::mismatch(reencoded.begin(), reencoded.end(), reply.tokens.begin(), reply.tokens.end()).first -
               reencoded.begin());
    REQUIRE(same + 1 < reply.tokens.size());

    const std::vector<ChatMessage> turn2 = {turn1[0], {ChatRole::ASSISTANT, reply.text}, {ChatRole::USER, "Say it shorter."}};
    // The model's rendering alone re-encodes the reply's text; the session
    // remembered the reply it generated and carries its ids.
    const ChatPrompt rendered2 = chat.prompt(tok, ChatInput::of(turn2));
    CHECK(rendered2.ids == chat.builtin().encode(tok, turn2));
    const auto [ids2, replies] = chat_prompt(turn2);
    const ChatPrompt prompt2{ids2, {}};

    // One rendering says where every message's tokens are: the spans cover
    // the ids in order, and message 1 is one reply span; carried, it holds
    // the generated ids right after the first turn's prompt.
    size_t at = 0;
    int reply_message = -1;
    for (const ChatSpan& s : rendered2.spans) {
        CHECK(s.begin == at);
        at = s.end;
        if (s.reply) reply_message = s.message;
    }
    CHECK(at == rendered2.ids.size());
    REQUIRE(replies.size() == 1);
    CHECK(reply_message == 1);
    CHECK(replies[0].begin == prompt1.ids.size());
    CHECK(std::vector<int>(prompt2.ids.begin(), prompt2.ids.begin() + long(prompt1.ids.size())) == prompt1.ids);
    CHECK(std::vector<int>(prompt2.ids.begin() + long(replies[0].begin), prompt2.ids.begin() + long(replies[0].end)) ==
          reply.tokens);

    // The first turn's prompt and every generated token but the last (sampled,
    // never run) are reused; the re-encoded conversation would have lost the
    // reply from its first re-encoded difference on.
    CHECK(run(prompt2.ids).n_cached == int(prompt1.ids.size() + reply.tokens.size()) - 1);
    REQUIRE(run(prompt1.ids).tokens == reply.tokens);
    CHECK(run(chat.builtin().encode(tok, turn2)).n_cached == int(prompt1.ids.size() + same));
}
