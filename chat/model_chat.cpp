// ModelChat: which template renders a chat request, and the Jinja path's
// tokenization (see model_chat.h).
//
// JinjaChat: a tokenizer_config.json's chat template(s) and special tokens,
// rendered as transformers' apply_chat_template renders them.
#include "chat/model_chat.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "base/errors.h"
#include "base/files.h"
#include "base/utf8.h"
#include "engine/formats/gguf.h"
#include "engine/model/synth_model.h"
#include "engine/text/work_budget.h"

namespace {

// A special token's text found in a request's own strings is replaced, before
// rendering, by U+10FFFD and U+10FF00 + its index among those found, and
// tokenized as plain text afterwards: only what the template writes becomes
// a special id.
constexpr char32_t MARK = 0x10FFFD, FIRST = 0x10FF00;
constexpr size_t MAX_FOUND = 0xFD;

const std::string& mark() {
    static const std::string m = [] {
        std::string s;
        utf8_append(s, MARK);
        return s;
    }();
    return m;
}

std::string placeholder(size_t k) {
    std::string s = mark();
    utf8_append(s, FIRST + char32_t(k));
    return s;
}

// k of the character after a mark (4 bytes of UTF-8); SIZE_MAX for another one.
size_t placeholder_index(std::string_view c) {
    const Utf8Char d = utf8_decode(c);
    return d.status == Utf8Status::VALID && d.cp >= FIRST && d.cp < FIRST + MAX_FOUND ? size_t(d.cp - FIRST) : SIZE_MAX;
}

// Replaces the special tokens' texts (longest first) in every string value.
void escape_specials(nlohmann::ordered_json& v, const std::vector<std::string>& specials,
                     std::vector<std::string>& found) {
    if (v.is_array() || v.is_object()) {
        for (auto& x : v) escape_specials(x, specials, found);
        return;
    }
    if (!v.is_string()) return;
    std::string& text = v.get_ref<std::string&>();
    for (const std::string& special : specials) {
        size_t at = text.find(special);
        if (at == std::string::npos) continue;
        auto it = std::find(found.begin(), found.end(), special);
        if (it == found.end()) {
            if (found.size() == MAX_FOUND)
                throw MoeError("chat template: too many kinds of special tokens in the text");
            found.push_back(special);
            it = found.end() - 1;
        }
        const std::string ph = placeholder(size_t(it - found.begin()));
        for (; at != std::string::npos; at = text.find(special, at + ph.size())) text.replace(at, special.size(), ph);
    }
}

}  // namespace

ModelChat::ModelChat(const ModelSource& source, const Tokenizer& tokenizer, std::string* warning)
    : builtin_(model_source_chat_template(source, warning)), tool_format_(&tool_call_format(ToolCallFamily::NONE)) {
    for (const AddedToken& t : tokenizer.added_tokens())
        if (t.special && !t.content.empty()) specials_.push_back(t.content);
    std::sort(specials_.begin(), specials_.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    const bool recognised = warning->empty();
    try {
        jinja_ = model_source_jinja_chat(source, tokenizer, &origin_);
    } catch (const MoeError& e) {
        *warning += (warning->empty() ? "" : "; ") + std::string(e.what()) + "; chats use the " +
                    chat_family_name(builtin_.family()) + " built-in renderer";
        return;
    }
    if (!jinja_) return;
    tool_format_ = &tool_call_format_detect(jinja_->tools_template_source());
    tool_trigger_ = tool_call_trigger_token(*tool_format_, tokenizer);
    if (!recognised) warning->clear();  // the Jinja template renders what detection did not know
    builtin_plain_ = recognised && builtin_.family() == ChatFamily::MISTRAL;
}

bool ModelChat::uses_jinja(const ChatInput& chat) const {
    if (!jinja_) return false;
    if (!builtin_plain_) return true;
    if (!chat.tools.empty() || !chat.extras.empty() || !chat.add_generation_prompt) return true;
    for (const ChatMessage& m : chat.messages)
        if (m.role == ChatRole::TOOL) return true;
    for (const auto& m : chat.messages_json)
        if (m.is_object() && m.contains("tool_calls") && !m["tool_calls"].empty()) return true;
    return false;
}

std::string ModelChat::render_jinja(const ChatInput& chat, std::vector<std::string>* found) const {
    try {
        nlohmann::ordered_json messages = chat.messages_json, tools = chat.tools, extras = chat.extras;
        escape_specials(messages, specials_, *found);
        escape_specials(tools, specials_, *found);
        escape_specials(extras, specials_, *found);
        return jinja_->render(messages, tools, chat.add_generation_prompt, extras);
    } catch (const WorkBudgetError& e) {
        if (e.end == WorkEnd::STOPPED) throw;  // the server's stop, not the template's fault
        throw ChatTemplateError(e.what());
    } catch (const MoeError& e) {
        throw ChatTemplateError(e.what());
    }
}

ChatPrompt ModelChat::prompt(const Tokenizer& tokenizer, const ChatInput& chat) const {
    if (!uses_jinja(chat)) return builtin_.render(tokenizer, chat.messages, chat.add_generation_prompt);
    std::vector<std::string> found;
    const std::string text = render_jinja(chat, &found);
    ChatPrompt prompt;
    // The template's text with its special tokens as ids; the request's own
    // special-token texts (placeholders) as plain text.
    size_t from = 0;
    while (from < text.size()) {
        const size_t at = found.empty() ? std::string::npos : text.find(mark(), from);
        const size_t end = at == std::string::npos ? text.size() : at;
        if (end > from) {
            const std::vector<int> ids =
                tokenizer.encode(std::string_view(text).substr(from, end - from), from == 0, SpecialTokens::PARSE);
            prompt.ids.insert(prompt.ids.end(), ids.begin(), ids.end());
        }
        if (at == std::string::npos) break;
        const size_t k = at + 8 <= text.size() ? placeholder_index(std::string_view(text).substr(at + 4, 4)) : SIZE_MAX;
        if (k < found.size() && text.compare(at, 8, placeholder(k)) == 0) {
            const std::vector<int> ids = tokenizer.encode(found[k], at == 0, SpecialTokens::AS_TEXT);
            prompt.ids.insert(prompt.ids.end(), ids.begin(), ids.end());
            from = at + 8;
        } else {  // a mark the request itself wrote: plain text
            const std::vector<int> ids = tokenizer.encode(mark(), at == 0, SpecialTokens::AS_TEXT);
            prompt.ids.insert(prompt.ids.end(), ids.begin(), ids.end());
            from = at + mark().size();
        }
    }
    prompt.spans.push_back({0, prompt.ids.size(), -1, false});
    return prompt;
}

std::string ModelChat::text(const ChatInput& chat) const {
    if (uses_jinja(chat)) {
        std::vector<std::string> found;
        std::string text = render_jinja(chat, &found);
        for (size_t k = 0; k < found.size(); k++) {
            const std::string ph = placeholder(k);
            for (size_t at = text.find(ph); at != std::string::npos; at = text.find(ph, at + found[k].size()))
                text.replace(at, ph.size(), found[k]);
        }
        return text;
    }
    return builtin_.render_text(chat.messages, chat.add_generation_prompt);
}

std::string ModelChat::name() const {
    const std::string family = chat_family_name(builtin_.family());
    if (!jinja_) return family + " (built-in)";
    const std::string jinja = "jinja (" + origin_ + ")";
    return builtin_plain_ ? family + " (built-in; " + jinja + " for tools)" : jinja;
}

ChatTemplate model_source_chat_template(const ModelSource& s, std::string* warning) {
    if (s.gguf) return chat_template_from_gguf(GgufFile(s.dir).metadata(), s.dir.string(), warning);
    if (!s.synthetic) return ChatTemplate::from_model_dir(s.dir, warning);
    const ModelConfig config = synth_preset(s.preset);
    if (synth_uses_standin_tokenizer(config))
        return ChatTemplate::from_jinja(synth_chat_template(config), model_source_id(s), warning);
    if (warning) warning->clear();
    return ChatTemplate(ChatFamily::MISTRAL);
}

std::optional<JinjaChat> model_source_jinja_chat(const ModelSource& s, const Tokenizer& tokenizer,
                                                 std::string* origin) {
    if (s.synthetic) {
        const ModelConfig config = synth_preset(s.preset);
        if (!synth_uses_standin_tokenizer(config)) return std::nullopt;
        JinjaChat chat(synth_chat_template(config), model_source_id(s) + " chat template");
        if (tokenizer.eos_id() >= 0) chat.set_special_token("eos_token", tokenizer.id_to_piece(tokenizer.eos_id()));
        *origin = "synth-model preset";
        return chat;
    }
    if (s.gguf) {
        const GgufFile gguf(s.dir);
        const std::optional<std::string_view> text = gguf.metadata().find_string("tokenizer.chat_template");
        if (!text || text->empty()) return std::nullopt;
        JinjaChat chat(*text, s.dir.string() + " tokenizer.chat_template");
        if (tokenizer.bos_id() >= 0) chat.set_special_token("bos_token", tokenizer.id_to_piece(tokenizer.bos_id()));
        if (tokenizer.eos_id() >= 0) chat.set_special_token("eos_token", tokenizer.id_to_piece(tokenizer.eos_id()));
        *origin = "GGUF tokenizer.chat_template";
        return chat;
    }
    std::optional<JinjaChat> chat = JinjaChat::from_model_dir(s.dir);
    if (!chat) return chat;
    const std::filesystem::path config_path = s.dir / "tokenizer_config.json";
    const bool in_config = file_exists(config_path) && file_read_json(config_path).contains("chat_template");
    *origin = in_config ? "tokenizer_config.json" : "chat_template.jinja";
    return chat;
}

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
