// Chat templates: detects the family of a model's Jinja chat_template by its
// markers and renders messages with a built-in renderer per family, as a list
// of parts (BOS/EOS, special markers, plain text) that encode() turns into ids
// and render_text() into display text, so the two never disagree. It must not
// interpret Jinja, parse HTTP/OpenAI JSON, or let message text become special
// ids (text is always encoded as plain text).
//
// MISTRAL follows mistral-common's v1 instruct tokenizer (its reference ids are
// checked in the tests) and the rules of its chat_template_v1_spm.jinja:
// system messages are pulled out and joined with "\n\n", consecutive messages
// of one role are joined with "\n\n", the conversation must start with a user
// message, the system prompt goes before the first user message. Each user
// turn is the text "[INST] " + content + " [/INST]" and each assistant reply
// its content, every one encoded as its own segment with the dummy prefix;
// EOS follows each reply. The prompt already ends where the reply begins, so
// add_generation_prompt changes nothing. A reply is a reply span (ChatSpan)
// when it is one message, not joined with a neighbour, and no system message
// after it changes the system prompt: then the tokens before it are exactly
// the prompt that asked for it.
//
// CHATML, LLAMA3 and PHI3 follow the usual Hugging Face templates. Their
// markers must exist in the vocabulary as pieces; the text between markers is
// encoded without the dummy prefix (these formats come from tokenizers that
// have none, so "<|im_start|>user" is not "<|im_start|> user"). They start with
// BOS (LLAMA3: <|begin_of_text|>) when the tokenizer adds one
// (Tokenizer::prompt_bos; Qwen's adds none; render_text always shows "<s>").
// PHI3 is the Phi-3.5 form; without the generation prompt it ends after the
// last message's "<|end|>\n".
// Their replies are encoded together with the text before them (role,
// newlines), so they have no reply spans.
#include "chat/chat_template.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <system_error>

#include "base/errors.h"
#include "base/files.h"

const char* chat_role_name(ChatRole role) {
    switch (role) {
    case ChatRole::SYSTEM: return "system";
    case ChatRole::USER: return "user";
    case ChatRole::ASSISTANT: return "assistant";
    case ChatRole::TOOL: return "tool";
    }
    return "?";
}

std::optional<ChatRole> chat_role_parse(std::string_view name) {
    if (name == "system" || name == "developer") return ChatRole::SYSTEM;
    if (name == "user") return ChatRole::USER;
    if (name == "assistant") return ChatRole::ASSISTANT;
    if (name == "tool") return ChatRole::TOOL;
    return std::nullopt;
}

namespace {

enum class PartKind { BOS, EOS, MARKER, TEXT };

struct ChatPart {
    PartKind kind;
    std::string text;    // MARKER: the piece; TEXT: plain text
    int message = -1;    // ChatSpan::message
    bool reply = false;  // ChatSpan::reply
};

std::string role_list_error(size_t index, ChatRole role) {
    return "chat message " + std::to_string(index) + ": unknown role '" + chat_role_name(role) +
           "' (expected system, user or assistant)";
}

void check_roles(std::span<const ChatMessage> messages) {
    if (messages.empty()) throw MoeError("chat messages: the conversation is empty");
    for (size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role == ChatRole::TOOL) throw MoeError(role_list_error(i, messages[i].role));
    }
}

std::vector<ChatPart> mistral_parts(std::span<const ChatMessage> messages) {
    // A turn: neighbouring messages of one role (system messages removed), joined.
    struct Turn {
        ChatRole role;
        std::string content;
        int message = 0;         // its first message
        int n_messages = 1;      // messages joined into it
        size_t system_size = 0;  // of the system prompt as it stood at its first message
    };
    std::string system;
    bool have_system = false;
    std::vector<Turn> turns;
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == ChatRole::SYSTEM) {
            system += (have_system ? "\n\n" : "") + m.content;
            have_system = true;
        } else if (!turns.empty() && turns.back().role == m.role) {
            turns.back().content += "\n\n" + m.content;
            turns.back().n_messages++;
        } else {
            turns.push_back({m.role, m.content, int(i), 1, system.size()});
        }
    }
    if (turns.empty()) throw MoeError("chat messages: no user message (Mistral template)");
    if (turns.front().role != ChatRole::USER)
        throw MoeError(std::string("chat messages: the conversation must start with a user message, got ") +
                       chat_role_name(turns.front().role) +
                       " (Mistral template)");

    std::vector<ChatPart> parts{{PartKind::BOS, {}}};
    for (size_t i = 0; i < turns.size(); ++i) {
        const Turn& turn = turns[i];
        if (turn.role == ChatRole::USER) {
            const std::string prefix = i == 0 && !system.empty() ? system + "\n\n" : "";
            parts.push_back({PartKind::TEXT, "[INST] " + prefix + turn.content + " [/INST]", turn.message});
        } else {
            if (turn.content.empty())
                throw MoeError("chat messages: assistant message content must be non-empty (Mistral template)");
            // The system prompt only grows, so an unchanged size means unchanged.
            const bool reply = turn.n_messages == 1 && turn.system_size == system.size();
            parts.push_back({PartKind::TEXT, turn.content, turn.message, reply});
            parts.push_back({PartKind::EOS, {}, turn.message});
        }
    }
    return parts;
}

std::vector<ChatPart> chatml_parts(std::span<const ChatMessage> messages, bool add_generation_prompt) {
    std::vector<ChatPart> parts{{PartKind::BOS, {}}};
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        parts.push_back({PartKind::MARKER, "<|im_start|>", int(i)});
        parts.push_back({PartKind::TEXT, chat_role_name(m.role) + ("\n" + m.content), int(i)});
        parts.push_back({PartKind::MARKER, "<|im_end|>", int(i)});
        parts.push_back({PartKind::TEXT, "\n", int(i)});
    }
    if (add_generation_prompt) {
        parts.push_back({PartKind::MARKER, "<|im_start|>"});
        parts.push_back({PartKind::TEXT, "assistant\n"});
    }
    return parts;
}

// Jinja's trim: leading and trailing whitespace removed.
std::string trim(const std::string& s) {
    const char* ws = " \t\n\r\f\v";
    const size_t begin = s.find_first_not_of(ws);
    if (begin == std::string::npos) return {};
    return s.substr(begin, s.find_last_not_of(ws) - begin + 1);
}

std::vector<ChatPart> llama3_parts(std::span<const ChatMessage> messages, bool add_generation_prompt) {
    std::vector<ChatPart> parts{{PartKind::MARKER, "<|begin_of_text|>"}};
    auto header = [&](const std::string& role, int message) {
        parts.push_back({PartKind::MARKER, "<|start_header_id|>", message});
        parts.push_back({PartKind::TEXT, role, message});
        parts.push_back({PartKind::MARKER, "<|end_header_id|>", message});
    };
    for (size_t i = 0; i < messages.size(); ++i) {
        header(chat_role_name(messages[i].role), int(i));
        parts.push_back({PartKind::TEXT, "\n\n" + trim(messages[i].content), int(i)});
        parts.push_back({PartKind::MARKER, "<|eot_id|>", int(i)});
    }
    if (add_generation_prompt) {
        header("assistant", -1);
        parts.push_back({PartKind::TEXT, "\n\n"});
    }
    return parts;
}

std::vector<ChatPart> phi3_parts(std::span<const ChatMessage> messages, bool add_generation_prompt) {
    std::vector<ChatPart> parts{{PartKind::BOS, {}}};
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == ChatRole::SYSTEM && m.content.empty()) continue;  // as the template skips it
        parts.push_back({PartKind::MARKER, std::string("<|") + chat_role_name(m.role) + "|>", int(i)});
        parts.push_back({PartKind::TEXT, "\n" + m.content, int(i)});
        parts.push_back({PartKind::MARKER, "<|end|>", int(i)});
        parts.push_back({PartKind::TEXT, "\n", int(i)});
    }
    if (add_generation_prompt) {
        parts.push_back({PartKind::MARKER, "<|assistant|>"});
        parts.push_back({PartKind::TEXT, "\n"});
    }
    return parts;
}

std::vector<ChatPart> render_parts(ChatFamily family, std::span<const ChatMessage> messages,
                                   bool add_generation_prompt) {
    check_roles(messages);
    switch (family) {
    case ChatFamily::MISTRAL:
        return mistral_parts(messages);
    case ChatFamily::CHATML:
        return chatml_parts(messages, add_generation_prompt);
    case ChatFamily::LLAMA3:
        return llama3_parts(messages, add_generation_prompt);
    case ChatFamily::PHI3:
        return phi3_parts(messages, add_generation_prompt);
    }
    throw MoeError("chat template: unknown family");
}

// Ends the warning of a template that is absent or not recognised.
constexpr const char* FALLBACK_NOTE = "; using the built-in mistral template";

// Mistral encodes every text segment with SentencePiece's dummy prefix.
bool text_dummy_prefix(ChatFamily family) {
    return family == ChatFamily::MISTRAL;
}

}  // namespace

ChatInput ChatInput::of(std::vector<ChatMessage> messages) {
    ChatInput in;
    for (const ChatMessage& m : messages)
        in.messages_json.push_back({{"role", chat_role_name(m.role)}, {"content", m.content}});
    in.messages = std::move(messages);
    return in;
}

const char* chat_family_name(ChatFamily family) {
    switch (family) {
    case ChatFamily::MISTRAL:
        return "mistral";
    case ChatFamily::CHATML:
        return "chatml";
    case ChatFamily::LLAMA3:
        return "llama3";
    case ChatFamily::PHI3:
        return "phi3";
    }
    return "unknown";
}

bool ChatTemplate::detect(const std::string& jinja, ChatFamily* family) {
    auto has = [&](const char* marker) { return jinja.find(marker) != std::string::npos; };
    if (has("[INST]"))
        *family = ChatFamily::MISTRAL;
    else if (has("<|im_start|>"))
        *family = ChatFamily::CHATML;
    else if (has("<|start_header_id|>"))
        *family = ChatFamily::LLAMA3;
    else if (has("<|user|>") && has("<|end|>"))
        *family = ChatFamily::PHI3;
    else
        return false;
    return true;
}

ChatTemplate ChatTemplate::from_jinja(std::string_view jinja, const std::string& where, std::string* warning,
                                      std::string_view key) {
    std::string ignored;
    std::string& note = warning ? *warning : ignored;
    note.clear();
    if (jinja.empty()) {
        note = where + ": no " + std::string(key) + " found" + FALLBACK_NOTE;
        return ChatTemplate(ChatFamily::MISTRAL);
    }
    ChatFamily family = ChatFamily::MISTRAL;
    if (!detect(std::string(jinja), &family)) {
        note = where + ": " + std::string(key) +
               " not recognised (no [INST], <|im_start|>, <|start_header_id|> or "
               "<|user|>+<|end|> marker; it begins \"" +
               std::string(jinja.substr(0, 40)) + "\")" + FALLBACK_NOTE;
        for (char& c : note)
            if (c == '\n' || c == '\r') c = ' ';
    }
    return ChatTemplate(family);
}

ChatTemplate ChatTemplate::from_model_dir(const std::filesystem::path& dir, std::string* warning) {
    const std::filesystem::path config_path = dir / "tokenizer_config.json";
    const std::filesystem::path jinja_path = dir / "chat_template.jinja";  // newer HF layout
    std::error_code ec;
    std::string jinja, note;
    std::string where = config_path.string();
    if (std::filesystem::is_regular_file(config_path, ec)) {
        jinja = chat_template_from_config(file_read_json(config_path), where, &note);
    }
    if (!note.empty()) {  // a list of templates without "default"
        if (warning) *warning = note + FALLBACK_NOTE;
        return ChatTemplate(ChatFamily::MISTRAL);
    }
    if (jinja.empty() && std::filesystem::is_regular_file(jinja_path, ec)) {
        where = jinja_path.string();
        jinja = file_read_text(jinja_path);
    }
    return from_jinja(jinja, where, warning);
}

ChatPrompt ChatTemplate::render(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                bool add_generation_prompt) const {
    const std::vector<ChatPart> parts = render_parts(family_, messages, add_generation_prompt);
    const bool dummy_prefix = text_dummy_prefix(family_);
    ChatPrompt prompt;
    prompt.spans.reserve(parts.size());
    for (const ChatPart& part : parts) {
        const size_t begin = prompt.ids.size();
        switch (part.kind) {
        case PartKind::BOS:
        case PartKind::EOS: {
            const bool bos = part.kind == PartKind::BOS;
            // BOS as the tokenizer puts it before a prompt: none for one that
            // adds none (Qwen's ChatML starts with <|im_start|>); Mistral's
            // format is defined with it.
            const int id = bos ? tokenizer.prompt_bos() : tokenizer.eos_id();
            if (id < 0 && bos && family_ != ChatFamily::MISTRAL) break;
            if (id < 0)
                throw MoeError(std::string("chat template ") + chat_family_name(family_) + " needs " +
                               (bos ? "a BOS" : "an EOS") + " token, which the tokenizer lacks");
            prompt.ids.push_back(id);
            break;
        }
        case PartKind::MARKER: {
            const int id = tokenizer.piece_to_id(part.text);
            if (id < 0)
                throw MoeError(std::string("chat template ") + chat_family_name(family_) + " needs token " + part.text +
                               ", which the tokenizer lacks");
            prompt.ids.push_back(id);
            break;
        }
        case PartKind::TEXT: {
            const std::vector<int> text_ids = tokenizer.encode(part.text, dummy_prefix);
            prompt.ids.insert(prompt.ids.end(), text_ids.begin(), text_ids.end());
            break;
        }
        }
        prompt.spans.push_back({begin, prompt.ids.size(), part.message, part.reply});
    }
    return prompt;
}

std::vector<int> ChatTemplate::encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                      bool add_generation_prompt) const {
    return render(tokenizer, messages, add_generation_prompt).ids;
}

std::string ChatTemplate::render_text(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    const bool dummy_prefix = text_dummy_prefix(family_);
    std::string text;
    for (const ChatPart& part : render_parts(family_, messages, add_generation_prompt)) {
        switch (part.kind) {
        case PartKind::BOS:
            text += "<s>";
            break;
        case PartKind::EOS:
            text += "</s>";
            break;
        case PartKind::MARKER:
            text += part.text;
            break;
        case PartKind::TEXT:
            // The dummy prefix shows as the space SentencePiece puts before the segment.
            if (dummy_prefix && !part.text.empty()) text += ' ';
            text += part.text;
            break;
        }
    }
    return text;
}

ChatTemplate chat_template_from_gguf(const GgufMetadata& metadata, std::string_view source, std::string* warning) {
    const std::string_view jinja = metadata.find_string("tokenizer.chat_template").value_or(std::string_view());
    return ChatTemplate::from_jinja(jinja, std::string(source), warning, "tokenizer.chat_template");
}
