// Fuzzes a tool call's `arguments` (a JSON text inside a JSON string) through
// the request parser (server/openai.h): the input, made valid UTF-8,
// is the arguments string of an assistant message's tool call in a chat body
// for /v1/chat/completions, /tokenize and /apply-template. Each must parse
// (the arguments into the value their text holds) or be refused with an
// ApiError of status 4xx that serialises; the chat's text count must cover
// the arguments. The input is also parsed alone by
// json_parse_bounded (base/json_bounded.h) under small limits and, when it
// is accepted, must equal nlohmann's own parse (ordered and not), so the one
// parser of the program builds what nlohmann builds, duplicate keys included.
#include <cstdlib>

#include "base/json_bounded.h"
#include "base/utf8.h"
#include "fuzz_support.h"
#include "server/openai.h"

namespace {

void refused(const ApiError& e) {
    if (e.status < 400 || e.status > 499) std::abort();
    if (json_dump(api_error_json(e)).empty()) std::abort();
}

template <class Json>
void same_as_nlohmann(const std::string& text) {
    static constexpr JsonLimits LIMITS = {8192, 32, 4096, 256, 4096};
    Json mine;
    try {
        mine = json_parse_bounded<Json>(text, LIMITS, "arguments");
    } catch (const JsonError& e) {
        if (std::string(e.what()).find('\n') != std::string::npos) std::abort();
        return;
    }
    const Json theirs = Json::parse(text, nullptr, false);
    if (theirs.is_discarded() || mine != theirs || mine.dump() != theirs.dump()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string arguments = utf8_sanitize(fuzz_text(data, size));
    same_as_nlohmann<nlohmann::json>(arguments);
    same_as_nlohmann<nlohmann::ordered_json>(arguments);

    nlohmann::ordered_json body = {
        {"messages",
         {{{"role", "user"}, {"content", "What is the weather?"}},
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls",
            {{{"id", "call_1"},
              {"type", "function"},
              {"function", {{"name", "get_weather"}, {"arguments", arguments}}}}}}},
          {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}}},
        {"max_tokens", 4}};
    fuzz_expect<ApiError>(
        [&] {
            const nlohmann::ordered_json j = parse_json_body(body.dump());
            const ChatRequest chat = chat_request_parse(j, 4096);
            const auto& args = chat.chat.messages_json[1]["tool_calls"][0]["function"]["arguments"];
            // The text is parsed (the value it holds, whatever its type), or refused.
            if (args != json_parse_bounded<nlohmann::ordered_json>(arguments, JSON_BODY_LIMITS, "arguments"))
                std::abort();
            if (chat_input_bytes(chat.chat) < args.dump().size() / 2) std::abort();
            tokenize_request_parse(j);
            chat_input_parse(j);
        },
        refused);
    return 0;
}
