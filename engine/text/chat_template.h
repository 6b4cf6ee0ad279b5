// Chat templates: the family is detected from the chat_template in
// tokenizer_config.json and rendered by a built-in renderer (no Jinja
// interpreter). Rendering yields segments: special tokens as ids, text encoded
// separately with SentencePiece's dummy prefix, exactly as Mistral's own
// library tokenizes ("</s>" then "▁[INST]" = 733 16289 28793).
#pragma once
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "engine/text/tokenizer.h"

struct ChatMessage {
    std::string role;     // "system", "user" or "assistant"
    std::string content;
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
    // Detects the family of a Jinja template source; false when unknown.
    static bool detect(const std::string& jinja, ChatFamily* family);

    ChatFamily family() const { return family_; }

    // Renders + tokenizes messages (BOS first). With add_generation_prompt the
    // result ends where the assistant's reply begins. Throws MoeError for an
    // unknown role, an empty conversation or an order the family forbids.
    std::vector<int> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                            bool add_generation_prompt = true) const;

    // Plain-text rendering with special tokens spelled out, for display/debug.
    std::string render_text(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;

private:
    ChatFamily family_;
};
