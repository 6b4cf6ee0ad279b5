// Chat templates: the family is detected from a model's Jinja chat_template
// (tokenizer_config.json's, or a GGUF's tokenizer.chat_template through
// engine/text/gguf_tokenizer.h) and rendered by a built-in renderer (no Jinja
// interpreter). Rendering yields segments: special tokens as ids, text encoded
// separately with SentencePiece's dummy prefix, exactly as Mistral's own
// library tokenizes ("</s>" then "▁[INST]" = 733 16289 28793). render() says
// which tokens came from which message, and where an assistant reply sits
// as its own segment, so a caller can put the ids a model generated for it
// back in place (engine/runtime/chat_replies.h) without rendering again.
#pragma once
#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/errors.h"
#include "engine/formats/gguf.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/tokenizer.h"

// A message's role, parsed once where a chat comes in (OpenAI's
// "developer" is SYSTEM). The built-in renderers know SYSTEM, USER and
// ASSISTANT; TOOL messages only a Jinja template renders.
enum class ChatRole : uint8_t { SYSTEM, USER, ASSISTANT, TOOL };
const char* chat_role_name(ChatRole role);  // "system", "user", "assistant", "tool"
// The role a message names: system, developer, user, assistant or tool;
// nullopt for any other word.
std::optional<ChatRole> chat_role_parse(std::string_view name);

struct ChatMessage {
    ChatRole role = ChatRole::USER;
    std::string content;
};

// A chat request as a template sees it: the messages' text (for the built-in
// renderers and for reply reuse) and, for a model's Jinja template, the
// messages exactly as the client sent them (content strings or parts,
// tool_calls, name, reasoning_content ...; key order kept for tojson), the
// tools (null when none) and extra template variables (chat_template_kwargs,
// enable_thinking).
struct ChatInput {
    std::vector<ChatMessage> messages;
    nlohmann::ordered_json messages_json = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;  // null or an array
    nlohmann::ordered_json extras = nlohmann::ordered_json::object();
    bool add_generation_prompt = true;  // false: the last (assistant) message is continued

    // Plain role/content messages (a CLI's --user, a benchmark's turns), the
    // JSON a client would send for them alongside.
    static ChatInput of(std::vector<ChatMessage> messages);
};

// A model's Jinja template failed on a request (raise_exception, an unknown
// filter, a type error, a limit): the request's fault or the template's,
// never the server's.
class ChatTemplateError : public MoeError {
public:
    using MoeError::MoeError;
};

// One segment of a rendered conversation: a special token or one encoded text.
struct ChatSpan {
    size_t begin = 0, end = 0;  // tokens [begin, end) of ChatPrompt::ids
    int message = -1;           // the message whose turn it renders (joined turns: the first); -1: none
    // An assistant reply where its own generation left it: exactly the
    // message's content, encoded on its own, right after the tokens the
    // messages before it render to with the generation prompt. Ids a model
    // generated for that text may stand here instead.
    bool reply = false;
};

// A conversation rendered and tokenized once: the ids, and their segments in
// order (they cover ids exactly).
struct ChatPrompt {
    std::vector<int> ids;
    std::vector<ChatSpan> spans;
};

enum class ChatFamily { MISTRAL, CHATML, LLAMA3, PHI3 };

const char* chat_family_name(ChatFamily family);

class ChatTemplate {
public:
    explicit ChatTemplate(ChatFamily family = ChatFamily::MISTRAL) : family_(family) {}

    // Reads chat_template from <dir>/tokenizer_config.json. A missing file or
    // template falls back to MISTRAL and sets *warning; an unrecognised
    // template also falls back with a warning naming what was seen.
    static ChatTemplate from_model_dir(const std::filesystem::path& dir, std::string* warning);
    // The family of a Jinja template found at `where` under `key` (a
    // tokenizer_config.json's chat_template, a GGUF's tokenizer.chat_template).
    // An empty or unrecognised template falls back to MISTRAL and sets
    // *warning ("WHERE: KEY not recognised ..."); a recognised one clears it.
    static ChatTemplate from_jinja(std::string_view jinja, const std::string& where, std::string* warning,
                                   std::string_view key = "chat_template");
    // Detects the family of a Jinja template source; false when unknown.
    static bool detect(const std::string& jinja, ChatFamily* family);

    ChatFamily family() const { return family_; }

    // Renders + tokenizes messages (BOS first), once. With
    // add_generation_prompt the result ends where the assistant's reply
    // begins. Throws MoeError for an unknown role, an empty conversation or an
    // order the family forbids. Thread-safe (const).
    ChatPrompt render(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                      bool add_generation_prompt = true) const;
    // The ids of render().
    std::vector<int> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                            bool add_generation_prompt = true) const;

    // Plain-text rendering with special tokens spelled out, for display/debug.
    std::string render_text(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;

private:
    ChatFamily family_;
};

// ChatTemplate::from_jinja of tokenizer.chat_template (absent: MISTRAL with a
// warning naming the key).
ChatTemplate chat_template_from_gguf(const GgufMetadata& metadata, std::string_view source, std::string* warning);
