// A model's Jinja chat template as Hugging Face applies it: the template of
// tokenizer_config.json (a string, or a list of named templates: "default",
// and "tool_use" when a request has tools (not null) and the list has one,
// as transformers picks) or else the folder's chat_template.jinja, with the
// tokenizer's special tokens (bos_token, eos_token, unk_token, pad_token,
// sep_token, cls_token, mask_token, additional_special_tokens; from
// tokenizer_config.json, else special_tokens_map.json) as template variables.
// render() gives the prompt text; tokenizing it and wiring it into the engine
// and server is not here. The built-in renderers of chat_template.* stay as
// they are.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "chat/jinja.h"

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
