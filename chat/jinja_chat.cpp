// JinjaChat: a tokenizer_config.json's chat template(s) and special tokens,
// rendered as transformers' apply_chat_template renders them (see
// jinja_chat.h).
#include "chat/jinja_chat.h"

#include "base/errors.h"
#include "base/files.h"

namespace {

const char* const SPECIAL_TOKENS[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                      "pad_token", "cls_token", "mask_token"};

// A token written as a string or as an AddedToken object {"content": ...};
// nullopt for null.
std::optional<std::string> token_text(const nlohmann::json& v, const std::string& where, const std::string& key) {
    if (v.is_null()) return std::nullopt;
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object()) {
        auto c = v.find("content");
        if (c != v.end() && c->is_string()) return c->get<std::string>();
    }
    throw MoeError(where + ": " + key + ": expected a string or an object with a string \"content\"");
}

void collect_special_tokens(const nlohmann::json& config, const std::string& where, nlohmann::ordered_json& out) {
    if (!config.is_object()) return;
    for (const char* key : SPECIAL_TOKENS) {
        auto it = config.find(key);
        if (it == config.end() || out.contains(key)) continue;
        if (auto t = token_text(*it, where, key)) out[key] = *t;
    }
    auto extra = config.find("additional_special_tokens");
    if (extra != config.end() && !extra->is_null() && !out.contains("additional_special_tokens")) {
        if (!extra->is_array()) throw MoeError(where + ": additional_special_tokens: expected a list");
        nlohmann::ordered_json list = nlohmann::ordered_json::array();
        for (size_t i = 0; i < extra->size(); ++i) {
            if (auto t = token_text((*extra)[i], where, "additional_special_tokens[" + std::to_string(i) + "]"))
                list.push_back(*t);
        }
        out["additional_special_tokens"] = list;
    }
}

}  // namespace

JinjaChat::JinjaChat(std::string_view source, const std::string& where) : default_(JinjaTemplate(source, where)) {}

std::optional<JinjaChat> JinjaChat::from_config(const nlohmann::json& config, const std::string& where,
                                                const nlohmann::json& special_tokens_map) {
    if (!config.is_object()) throw MoeError(where + ": expected a JSON object");
    auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) return std::nullopt;
    JinjaChat chat;
    if (it->is_string()) {
        chat.default_.emplace(it->get<std::string>(), where + " chat_template");
    } else if (it->is_array()) {
        for (size_t i = 0; i < it->size(); ++i) {
            const nlohmann::json& entry = (*it)[i];
            std::string key = "chat_template[" + std::to_string(i) + "]";
            if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
                !entry.contains("template") || !entry["template"].is_string()) {
                throw MoeError(where + ": " + key + ": expected an object with string fields name and template");
            }
            std::string name = entry["name"].get<std::string>();
            if (name == "default")
                chat.default_.emplace(entry["template"].get<std::string>(), where + " chat_template \"default\"");
            if (name == "tool_use")
                chat.tool_use_.emplace(entry["template"].get<std::string>(), where + " chat_template \"tool_use\"");
        }
        if (!chat.default_ && !chat.tool_use_)
            throw MoeError(where + ": chat_template: the list has neither a \"default\" nor a \"tool_use\" template");
    } else {
        throw MoeError(where + ": chat_template: expected a string or a list of {name, template}");
    }
    collect_special_tokens(config, where, chat.special_tokens_);
    collect_special_tokens(special_tokens_map, "special_tokens_map.json", chat.special_tokens_);
    return chat;
}

std::optional<JinjaChat> JinjaChat::from_model_dir(const std::filesystem::path& dir) {
    std::filesystem::path config_path = dir / "tokenizer_config.json";
    std::filesystem::path map_path = dir / "special_tokens_map.json";
    std::filesystem::path jinja_path = dir / "chat_template.jinja";
    nlohmann::json config = file_exists(config_path) ? file_read_json(config_path) : nlohmann::json::object();
    nlohmann::json map = file_exists(map_path) ? file_read_json(map_path) : nlohmann::json();
    std::optional<JinjaChat> chat = from_config(config, config_path.string(), map);
    if (chat || !file_exists(jinja_path)) return chat;
    JinjaChat from_file(file_read_text(jinja_path), jinja_path.string());
    collect_special_tokens(config, config_path.string(), from_file.special_tokens_);
    collect_special_tokens(map, map_path.string(), from_file.special_tokens_);
    return from_file;
}

std::string JinjaChat::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                              bool add_generation_prompt, const nlohmann::ordered_json& extras,
                              const JinjaRenderOptions& options) const {
    if (!messages.is_array()) throw MoeError("chat template: messages must be a JSON array");
    if (!tools.is_null() && !tools.is_array()) throw MoeError("chat template: tools must be null or a JSON array");
    if (!extras.is_object()) throw MoeError("chat template: extra variables must be a JSON object");
    JinjaChatInput input;
    input.messages = messages;
    input.tools = tools;
    input.add_generation_prompt = add_generation_prompt;
    // transformers: {**special_tokens_map, **kwargs}: a request's own variable wins.
    input.extras = special_tokens_;
    for (auto it = extras.begin(); it != extras.end(); ++it) input.extras[it.key()] = it.value();
    // transformers takes "tool_use" whenever tools are given (not None).
    const std::optional<JinjaTemplate>& tmpl = tools.is_array() && tool_use_ ? tool_use_ : default_;
    if (!tmpl)
        throw MoeError(
            "chat template: the model's template list has no \"default\" template (only \"tool_use\", for requests "
            "with tools)");
    return jinja_render_chat(*tmpl, input, options);
}
