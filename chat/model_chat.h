// A model's chat rendering: its built-in template family (ChatTemplate) and
// its Jinja chat_template (JinjaChat) when it has one, and which of the two
// renders a request. A Jinja template renders by default, and its text is
// tokenized with the model's rules: the special tokens it writes become
// their ids (SpecialTokens::PARSE), no BOS is added (templates write their
// own, as transformers' apply_chat_template leaves it). A special token's
// text inside the request's own strings (message content, tool results,
// tools, template variables) stays text: it is replaced by a private-use
// placeholder (U+10FFFD U+10FFxx) before rendering and tokenized as plain
// text after (unlike apply_chat_template, which parses it). Exception: a
// template the built-in detection knows as Mistral's renders plain
// conversations (no tools, tool messages or tool calls, no template
// variables, a generation prompt) with the built-in renderer, whose ids are
// mistral-common's; its Jinja template renders the rest. Models without a
// template use the built-in renderer. Built once per model by the server
// (chat requests), the CLI and `moe-server tokenize --chat`. Must not run the model.
//
// JinjaChat, a model's Jinja chat template as Hugging Face applies it: the template of
// tokenizer_config.json (a string, or a list of named templates: "default",
// and "tool_use" when a request has tools (not null) and the list has one,
// as transformers picks) or else the folder's chat_template.jinja, with the
// tokenizer's special tokens (bos_token, eos_token, unk_token, pad_token,
// sep_token, cls_token, mask_token, additional_special_tokens; from
// tokenizer_config.json, else special_tokens_map.json) as template variables.
// Its render() gives the prompt text; ModelChat tokenizes it.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/jinja.h"
#include "chat/tool_calls.h"
#include "engine/model/model.h"
#include "engine/model/model_source.h"
#include "engine/text/tokenizer.h"

class JinjaChat {
public:
    // From a model folder; nullopt when it has no template. MoeError naming
    // the file and key for a malformed config or template.
    static std::optional<JinjaChat> from_model_dir(const std::filesystem::path& dir);
    // From a parsed tokenizer_config.json (`where` names it in errors), and
    // optionally special_tokens_map.json's tokens for those the config lacks;
    // nullopt when the config has no chat_template.
    static std::optional<JinjaChat> from_config(const nlohmann::json& config, const std::string& where,
                                                const nlohmann::json& special_tokens_map = nlohmann::json());
    // From template text alone (a GGUF's tokenizer.chat_template, a file).
    JinjaChat(std::string_view source, const std::string& where);

    // messages: the request's JSON array of messages (OpenAI shape); tools:
    // null or an array; extras: an object of more variables
    // (enable_thinking, ...), which may not shadow messages, tools,
    // documents or add_generation_prompt. MoeError on a template error.
    std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                       bool add_generation_prompt,
                       const nlohmann::ordered_json& extras = nlohmann::ordered_json::object(),
                       const JinjaRenderOptions& options = {}) const;

    // The source of the template a request with tools renders with ("tool_use" when the list has one).
    const std::string& tools_template_source() const { return (tool_use_ ? *tool_use_ : *default_).source(); }
    // The special tokens, by name (strings, additional_special_tokens a list).
    const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
    // Sets a special token's variable (a GGUF's bos_token / eos_token, whose
    // template text comes without a tokenizer_config.json).
    void set_special_token(const std::string& name, const std::string& text) { special_tokens_[name] = text; }

private:
    JinjaChat() = default;
    std::optional<JinjaTemplate> default_, tool_use_;
    nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

// The folder's chat template (ChatTemplate::from_model_dir, which sets
// *warning when it falls back), or Mistral's built-in one (no warning).
ChatTemplate model_source_chat_template(const ModelSource& source, std::string* warning);

// The model's Jinja chat template, rendered by chat/jinja*.h: a
// folder's tokenizer_config.json chat_template (or chat_template.jinja), a
// GGUF file's tokenizer.chat_template with the tokenizer's BOS/EOS pieces as
// bos_token / eos_token; nullopt for a synthetic source or a model without
// one. *origin names where it came from ("tokenizer_config.json",
// "chat_template.jinja", "GGUF tokenizer.chat_template"). MoeError naming the
// file for a malformed config or a template that does not parse.
std::optional<JinjaChat> model_source_jinja_chat(const ModelSource& source, const Tokenizer& tokenizer,
                                                 std::string* origin);

class ModelChat {
public:
    // Loads both. *warning: the built-in detection's fallback note (cleared
    // when a Jinja template renders instead), or a Jinja template that does
    // not parse (the built-in renderer then renders every chat).
    ModelChat(const ModelSource& source, const Tokenizer& tokenizer, std::string* warning);
    // The same for a loaded model (its source and tokenizer).
    ModelChat(const Model& model, std::string* warning) : ModelChat(model.source(), model.tokenizer(), warning) {}

    const ChatTemplate& builtin() const { return builtin_; }
    bool has_jinja() const { return jinja_.has_value(); }
    // Whether the Jinja template renders this request.
    bool uses_jinja(const ChatInput& chat) const;
    // The Jinja rendering: one span (message -1), so no reply is carried by
    // its generated ids. With the built-in renderer: ChatTemplate::render.
    // ChatTemplateError for a Jinja template's error; MoeError as
    // ChatTemplate::render throws. Thread-safe (const).
    ChatPrompt prompt(const Tokenizer& tokenizer, const ChatInput& chat) const;
    // The prompt text: the Jinja rendering, or the built-in renderer's text
    // with special tokens spelled out.
    std::string text(const ChatInput& chat) const;
    // For the UI: "jinja (tokenizer_config.json)", "jinja (GGUF
    // tokenizer.chat_template)", "mistral (built-in; jinja
    // (tokenizer_config.json) for tools)", "chatml (built-in)" ...
    std::string name() const;
    // The tool-call format of the template that renders tools (the NONE row
    // without a Jinja template or a format tools_calls.h knows), and the id
    // of its trigger when that is a control token (-1: none).
    const ToolCallFormat& tool_format() const { return *tool_format_; }
    int tool_trigger_token() const { return tool_trigger_; }

private:
    // The Jinja rendering, with the special tokens' texts in the request's
    // own strings replaced by placeholders (*found: those texts by index).
    std::string render_jinja(const ChatInput& chat, std::vector<std::string>* found) const;

    ChatTemplate builtin_;
    std::optional<JinjaChat> jinja_;
    std::string origin_;
    bool builtin_plain_ = false;         // a Mistral template: plain chats by the built-in renderer
    std::vector<std::string> specials_;  // the special added tokens' texts, longest first
    const ToolCallFormat* tool_format_;
    int tool_trigger_ = -1;
};
