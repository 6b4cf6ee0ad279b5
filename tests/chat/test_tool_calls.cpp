// Tests of engine/text/tool_calls.*: family detection on every shared chat
// template; round trips through the real templates (an assistant tool_calls
// message of tests/support/jinja_conversations.json or of mistral-common's
// samples, rendered by the model's own template, is what the model would have
// generated: parsed back it gives the same calls, in one piece or split at
// every byte); Mistral v3's tool turns tokenized to their control ids, the
// trigger spliced back in from token ids; malformed calls staying content;
// the envelope grammars, which accept the calls the templates render,
// token by token through the grammar engine. That the Hermes, Qwen and Mistral templates render
// these conversations exactly as jinja2 does is test_jinja's check (every
// shared template x every conversation, mistral-common's samples included).
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/errors.h"
#include "chat/model_chat.h"
#include "chat/json_schema.h"
#include "chat/tool_calls.h"
#include "engine/text/grammar.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/tokenizer.h"
#include "test_support.h"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

const ToolCallFormat& HERMES = tool_call_format(ToolCallFamily::HERMES);
const ToolCallFormat& MISTRAL = tool_call_format(ToolCallFamily::MISTRAL);
const ToolCallFormat& LLAMA3 = tool_call_format(ToolCallFamily::LLAMA3);

fs::path mistral_v3_dir() {
    return shared_data_dir() / "tokenizers" / "mistral-7b-instruct-v0.3";
}

// The conversations with tools: jinja_conversations.json's and mistral-common's
// samples (*call* and get_weather_*: tools, assistant tool_calls, tool results).
std::vector<std::pair<std::string, ojson>> tool_conversations() {
    std::vector<std::pair<std::string, ojson>> out;
    ojson all = ojson::parse(read_file(fs::path(MOE_TESTS_SOURCE_DIR) / "support" / "jinja_conversations.json"));
    for (const ojson& c : all.at("cases")) {
        if (c.contains("tools") && c["tools"].is_array()) out.emplace_back(c.at("name").get<std::string>(), c);
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(shared_data_dir() / "reference" / "mistral-common")) {
        if (e.path().filename().string().ends_with("__sample.json")) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
        ojson sample = ojson::parse(read_file(f));
        if (sample.contains("tools") && !sample["tools"].empty()) out.emplace_back(f.filename().string(), sample);
    }
    REQUIRE(out.size() >= 5 + 5);  // parallel_calls, several_calls and the three get_weather ones
    // Qwen3's template cannot take a tool_calls message's content null (nor
    // can jinja2): "" there, which the other templates render alike.
    for (auto& [name, c] : out) {
        for (ojson& m : c["messages"]) {
            if (m.contains("tool_calls") && m.contains("content") && m["content"].is_null()) m["content"] = "";
        }
    }
    return out;
}

// The arguments as the parser gives them back: compact JSON text.
std::string compact_arguments(const ojson& args) {
    return (args.is_string() ? ojson::parse(args.get<std::string>()) : args).dump();
}

bool alnum_only(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
}

void check_id_style(const std::string& id, ToolCallIdStyle style) {
    INFO("id " << id);
    if (style == ToolCallIdStyle::ALNUM9) {
        CHECK(id.size() == 9);
        CHECK(alnum_only(id));
    } else {
        REQUIRE(id.starts_with("call_"));
        CHECK(id.size() == 29);
        CHECK(alnum_only(id.substr(5)));
    }
}

std::string describe(const ToolCallReply& r) {
    ojson j;
    j["content"] = r.content ? ojson(*r.content) : ojson();
    j["tool_calls"] = ojson::array();
    for (const ToolCall& c : r.calls) j["tool_calls"].push_back(tool_call_json(c));
    return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// The parser fed `pieces` one after another; checks that the events add up
// to the reply it reports, and returns that reply.
ToolCallReply parse_pieces(const ToolCallFormat& format, const std::vector<std::string>& pieces, uint64_t seed = 7) {
    ToolCallParser parser(format, seed);
    std::string content;
    std::vector<ToolCall> calls;
    auto take = [&](const std::vector<ToolCallEvent>& events) {
        for (const ToolCallEvent& e : events) {
            if (e.index >= 0) {
                CHECK(e.index == static_cast<int>(calls.size()));
                CHECK(e.content.empty());
                calls.push_back(e.call);
            } else {
                CHECK(!e.content.empty());
                content += e.content;
            }
        }
    };
    for (const std::string& p : pieces) take(parser.push(p));
    take(parser.finish());
    ToolCallReply r = parser.reply();
    CHECK(r.content.value_or("") == content);
    REQUIRE(r.calls.size() == calls.size());
    for (size_t i = 0; i < calls.size(); i++) CHECK(tool_call_json(r.calls[i]) == tool_call_json(calls[i]));
    return r;
}

// One-shot, every split into two pieces, and byte by byte all give one reply.
ToolCallReply parse_every_split(const ToolCallFormat& format, const std::string& text) {
    ToolCallReply whole = tool_calls_parse(format, text, 7);
    CHECK(describe(parse_pieces(format, {text})) == describe(whole));
    for (size_t i = 0; i <= text.size(); i++) {
        INFO("split at byte " << i);
        CHECK(describe(parse_pieces(format, {text.substr(0, i), text.substr(i)})) == describe(whole));
    }
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    CHECK(describe(parse_pieces(format, bytes)) == describe(whole));
    return whole;
}

struct TemplateCase {
    std::string name;
    fs::path path;  // a .jinja file, or a model folder (JinjaChat::from_model_dir)
    ToolCallFamily family;
    std::string end;  // the end-of-turn text the engine stops on (not parser input)
};

JinjaChat load_chat(const TemplateCase& t) {
    if (fs::is_directory(t.path)) return *JinjaChat::from_model_dir(t.path);
    JinjaChat chat(read_file(t.path), t.name);
    chat.set_special_token("bos_token", "<s>");
    chat.set_special_token("eos_token", "</s>");
    return chat;
}

bool has_tool_calls(const ojson& message) {
    return message.contains("tool_calls") && message["tool_calls"].is_array() && !message["tool_calls"].empty();
}

// What a template renders for the assistant message at `at` (a tool_calls
// one): the full render less the render of the messages before it with the
// generation prompt, cut at the end-of-turn text, without Qwen3's empty
// <think></think> (reasoning is split off before tool calls are parsed).
// Empty when the template refuses the conversation (Llama 3.1 takes one call
// per message) or when the prompt is not a prefix of the full render
// (Hermes-3 closes a tool result that ends the conversation differently).
std::string generated_text(const JinjaChat& chat, const ojson& conversation, size_t at, const std::string& end) {
    const ojson& messages = conversation.at("messages");
    ojson before = ojson::array();
    for (size_t i = 0; i < at; i++) before.push_back(messages[i]);
    ojson upto = before;
    upto.push_back(messages[at]);
    std::string prompt, full;
    try {
        prompt = chat.render(before, conversation.at("tools"), true);
        full = chat.render(upto, conversation.at("tools"), false);
    } catch (const MoeError&) {
        return "";
    }
    if (!full.starts_with(prompt)) return "";
    std::string text = full.substr(prompt.size());
    size_t cut = text.find(end);
    REQUIRE(cut != std::string::npos);
    text.resize(cut);
    if (text.starts_with("<think>")) text.erase(0, text.find_first_not_of(" \n", text.find("</think>") + 8));
    return text;
}

// The reply parsed from `text` holds the message's calls (and its content
// where the template writes it).
void check_calls(const ToolCallReply& r, const ojson& message, const ToolCallFormat& format, const std::string& text) {
    INFO("rendered reply: " << text);
    const ojson& want = message.at("tool_calls");
    REQUIRE(r.calls.size() == want.size());
    for (size_t i = 0; i < want.size(); i++) {
        CHECK(r.calls[i].name == want[i]["function"]["name"].get<std::string>());
        CHECK(r.calls[i].arguments == compact_arguments(want[i]["function"]["arguments"]));
        // Mistral's templates write the ids, and the parser keeps them.
        if (format.family == ToolCallFamily::MISTRAL)
            CHECK(r.calls[i].id == want[i]["id"].get<std::string>());
        else
            check_id_style(r.calls[i].id, format.id_style);
    }
    std::string content = message.contains("content") && message["content"].is_string() ? message["content"] : "";
    if (!content.empty() && text.find(content) != std::string::npos)
        CHECK(r.content == content);
    else
        CHECK(!r.content);
}

}  // namespace

TEST_CASE("tool-call formats: one row per family, detected from every shared template", "[tool_calls]") {
    const std::map<std::string, ToolCallFamily> want = {
        {"CohereForAI-c4ai-command-r-plus-tool_use", ToolCallFamily::NONE},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallFamily::HERMES},
        {"Qwen-Qwen2.5-7B-Instruct", ToolCallFamily::HERMES},
        {"Qwen-Qwen3-0.6B", ToolCallFamily::HERMES},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolCallFamily::NONE},
        {"google-gemma-2-2b-it", ToolCallFamily::NONE},
        {"meetkai-functionary-medium-v3.2", ToolCallFamily::NONE},
        {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFamily::LLAMA3},
        {"meta-llama-Llama-3.3-70B-Instruct", ToolCallFamily::LLAMA3},
        {"microsoft-Phi-3.5-mini-instruct", ToolCallFamily::NONE},
        {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFamily::MISTRAL},
        {"mixtral-8x7b-instruct-v0.1", ToolCallFamily::NONE},
    };
    // The 2026 families write tool calls in formats of their own, which the
    // table does not have yet (Qwen3.5's <function=..><parameter=..> and
    // GLM-4.5+'s <arg_key>/<arg_value> inside <tool_call>, Kimi-K2's and
    // DeepSeek-V3.1's section tokens, gpt-oss's harmony channels): listed so
    // that a new shared template still has to be placed, not checked.
    const std::set<std::string> not_yet = {"GLM-4.7-Flash", "Kimi-K2-Instruct", "Qwen3.5-4B",
                                           "deepseek-ai-DeepSeek-V3.1", "openai-gpt-oss-120b"};
    size_t seen = 0;
    for (const auto& e : fs::directory_iterator(shared_data_dir() / "chat_templates")) {
        if (e.path().extension() != ".jinja") continue;
        std::string name = e.path().stem().string();
        INFO("template " << name << " (a new shared template needs its family here)");
        if (not_yet.contains(name)) continue;
        REQUIRE(want.contains(name));
        CHECK(tool_call_format_detect(read_file(e.path())).family == want.at(name));
        seen++;
    }
    CHECK(seen == want.size());
    std::string v3 = ojson::parse(read_file(mistral_v3_dir() / "tokenizer_config.json")).at("chat_template");
    CHECK(tool_call_format_detect(v3).family == ToolCallFamily::MISTRAL);
    CHECK(tool_call_format_detect(
              read_file(shared_data_dir() / "reference" / "mistral-common" / "chat_template_v1.jinja"))
              .family == ToolCallFamily::NONE);

    // The table: each family once, NONE last; the rows say what the parser and grammar use.
    std::span<const ToolCallFormat> rows = tool_call_formats();
    REQUIRE(rows.size() == 4);
    CHECK(rows.back().family == ToolCallFamily::NONE);
    CHECK(&tool_call_format(ToolCallFamily::NONE) == &rows.back());
    CHECK(HERMES.trigger == "<tool_call>");
    CHECK(HERMES.close == "</tool_call>");
    CHECK(HERMES.args_key == "arguments");
    CHECK(MISTRAL.trigger == "[TOOL_CALLS]");
    CHECK(MISTRAL.array);
    CHECK(MISTRAL.id_style == ToolCallIdStyle::ALNUM9);
    CHECK(LLAMA3.args_key == "parameters");
    CHECK(!LLAMA3.multiple);
    CHECK(LLAMA3.object_at_start);
}

TEST_CASE("tool calls rendered by each family's template parse back to the same calls", "[tool_calls]") {
    fs::path templates = shared_data_dir() / "chat_templates";
    const std::vector<TemplateCase> cases = {
        {"qwen3", templates / "Qwen-Qwen3-0.6B.jinja", ToolCallFamily::HERMES, "<|im_end|>"},
        {"qwen2.5", templates / "Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFamily::HERMES, "<|im_end|>"},
        {"hermes3", templates / "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFamily::HERMES,
         "<|im_end|>"},
        {"llama3.1", templates / "meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFamily::LLAMA3, "<|eot_id|>"},
        {"llama3.3", templates / "meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFamily::LLAMA3, "<|eot_id|>"},
        {"nemo", templates / "mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFamily::MISTRAL, "</s>"},
        {"mistral-v3", mistral_v3_dir(), ToolCallFamily::MISTRAL, "</s>"},
    };
    std::map<std::string, int> checked;
    for (const TemplateCase& t : cases) {
        JinjaChat chat = load_chat(t);
        const ToolCallFormat& format = tool_call_format(t.family);
        for (const auto& [name, conversation] : tool_conversations()) {
            const ojson& messages = conversation.at("messages");
            for (size_t at = 0; at < messages.size(); at++) {
                if (!has_tool_calls(messages[at])) continue;
                INFO("template " << t.name << ", conversation " << name << ", message " << at);
                std::string text = generated_text(chat, conversation, at, t.end);
                if (text.empty()) continue;
                check_calls(parse_every_split(format, text), messages[at], format, text);
                checked[t.name]++;
            }
        }
    }
    // Every template round-trips several messages (Llama 3.1 only single calls; Hermes-3 not after a tool result).
    for (const TemplateCase& t : cases) {
        INFO("template " << t.name);
        CHECK(checked[t.name] >= 9);
    }
}

TEST_CASE("Mistral v3 tool turns tokenize to the control ids and parse back from token ids", "[tool_calls]") {
    // The control ids, from the tokenizer's own config.
    ojson config = ojson::parse(read_file(mistral_v3_dir() / "tokenizer_config.json"));
    std::map<std::string, int> control;
    for (const auto& [id, token] : config.at("added_tokens_decoder").items())
        control[token.at("content").get<std::string>()] = std::stoi(id);
    const std::vector<std::string> tool_tokens = {"[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                                                  "[TOOL_RESULTS]", "[/TOOL_RESULTS]"};

    Tokenizer hf = hf_tokenizer_load_dir(mistral_v3_dir());
    Tokenizer sp = Tokenizer::load(mistral_v3_dir() / "tokenizer.model.v3");
    JinjaChat chat = *JinjaChat::from_model_dir(mistral_v3_dir());
    CHECK(tool_call_trigger_token(MISTRAL, hf) == control.at("[TOOL_CALLS]"));
    CHECK(tool_call_trigger_token(MISTRAL, sp) == control.at("[TOOL_CALLS]"));
    CHECK(tool_call_trigger_token(HERMES, hf) == -1);  // no such token: plain text

    size_t samples = 0, calls = 0;
    for (const auto& [name, sample] : tool_conversations()) {
        if (!name.ends_with("__sample.json")) continue;
        INFO("sample " << name);
        // The whole conversation as ModelChat tokenizes a Jinja render: PARSE,
        // no BOS added. (The get_weather_full and _no_history samples, with
        // two system messages, are refused, by jinja2 too: test_jinja.)
        std::string text;
        try {
            text = chat.render(sample.at("messages"), sample.at("tools"), true);
        } catch (const MoeError& e) {
            CHECK(std::string(e.what()).find("must alternate") != std::string::npos);
            continue;
        }
        samples++;
        // Each tool result carries its tool_call_id into the prompt.
        for (const ojson& m : sample.at("messages")) {
            if (m.at("role") == "tool") {
                std::string call_id = m.at("tool_call_id");
                CHECK(text.find(std::string("\"call_id\": \"") + call_id + "\"}[/TOOL_RESULTS]") != std::string::npos);
            }
        }
        std::vector<int> ids = hf.encode(text, true, SpecialTokens::PARSE);
        // SentencePiece's own encoder (libsentencepiece) agrees with the tokenizer.json one.
        CHECK(sp.encode(text, true, SpecialTokens::PARSE) == ids);
        for (const std::string& piece : tool_tokens) {
            INFO("token " << piece);
            int id = control.at(piece);
            CHECK(hf.piece_to_id(piece) == id);
            CHECK(hf.is_control(id));
            CHECK(hf.token_bytes(id).empty());
            size_t in_text = 0;
            for (size_t p = text.find(piece); p != std::string::npos; p = text.find(piece, p + 1)) in_text++;
            CHECK(static_cast<size_t>(std::count(ids.begin(), ids.end(), id)) == in_text);
            if (piece != "[TOOL_CALLS]") CHECK(in_text >= 1);
        }
        CHECK(ids.front() == hf.bos_id());

        // Each assistant tool_calls message, generated as token ids: the
        // Detokenizer drops [TOOL_CALLS]; push_token splices it back.
        const ojson& messages = sample.at("messages");
        for (size_t at = 0; at < messages.size(); at++) {
            if (!has_tool_calls(messages[at])) continue;
            std::string reply = generated_text(chat, sample, at, "</s>");
            REQUIRE(reply.starts_with("[TOOL_CALLS]"));
            std::vector<int> reply_ids = hf.encode(reply, false, SpecialTokens::PARSE);
            REQUIRE(reply_ids.front() == control.at("[TOOL_CALLS]"));
            Detokenizer detok(hf);
            ToolCallParser parser(MISTRAL, 1, tool_call_trigger_token(MISTRAL, hf));
            std::string seen;
            for (int id : reply_ids) {
                std::string piece = detok.push(id);
                seen += piece;
                parser.push_token(id, piece);
            }
            parser.push(detok.flush());
            parser.finish();
            CHECK(seen.find("[TOOL_CALLS]") == std::string::npos);
            check_calls(parser.reply(), messages[at], MISTRAL, reply);
            calls += messages[at]["tool_calls"].size();
        }
    }
    CHECK(samples >= 3);
    CHECK(calls >= 6);
    // mistral-common's reference ids exist for no_tools only (test_jinja / test_chat_template compare them).
}

TEST_CASE("tool-call parser: content around calls, several calls, held-back triggers", "[tool_calls]") {
    SECTION("hermes: content, then two blocks") {
        std::string text =
            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
            "[1, 2]}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
        ToolCallReply r = parse_every_split(HERMES, text);
        CHECK(r.content == "Let me look.");
        REQUIRE(r.calls.size() == 2);
        CHECK(r.calls[0].name == "get_weather");
        CHECK(r.calls[0].arguments == R"({"city":"Paris","days":[1,2]})");
        CHECK(r.calls[1].arguments == "{}");
        CHECK(r.calls[0].id != r.calls[1].id);
        check_id_style(r.calls[1].id, ToolCallIdStyle::OPENAI);
        // Text after the calls is content; the whitespace next to a call is not.
        r = parse_every_split(HERMES, text + "\n\nDone.");
        CHECK(r.content == "Let me look.Done.");
        // No close tag: the call stands.
        r = parse_every_split(HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"}\"}}");
        REQUIRE(r.calls.size() == 1);
        CHECK(r.calls[0].arguments == R"({"a":"}"})");
        CHECK(!r.content);
    }
    SECTION("mistral: an array, string arguments, a kept and a made id") {
        ToolCallReply r = parse_every_split(
            MISTRAL,
            R"([TOOL_CALLS] [{"name": "a", "arguments": {"x": 1.5, "s": "é\n"}, "id": "abcDEF123"}, {"name": "b", "arguments": "{\"y\": null}", "id": "no"}])");
        REQUIRE(r.calls.size() == 2);
        CHECK(!r.content);
        CHECK(r.calls[0].id == "abcDEF123");
        CHECK(r.calls[0].arguments == "{\"x\":1.5,\"s\":\"é\\n\"}");
        CHECK(r.calls[1].arguments == R"({"y":null})");
        check_id_style(r.calls[1].id, ToolCallIdStyle::ALNUM9);
    }
    SECTION("llama3: the whole reply, with or without <|python_tag|>") {
        for (std::string prefix : {"", "\n ", "<|python_tag|>"}) {
            ToolCallReply r = parse_every_split(LLAMA3, prefix + R"({"name": "f", "parameters": {"q": "x"}})");
            REQUIRE(r.calls.size() == 1);
            CHECK(r.calls[0].arguments == R"({"q":"x"})");
            CHECK(!r.content);
        }
        // '{' later in a reply is text.
        std::string text = R"(Use {"name": "f", "parameters": {}} to call.)";
        ToolCallReply r = parse_every_split(LLAMA3, text);
        CHECK(r.calls.empty());
        CHECK(r.content == text);
    }
    SECTION("a possible trigger is held back, then released") {
        ToolCallParser parser(HERMES, 1);
        std::vector<ToolCallEvent> e = parser.push("Hi <tool");
        REQUIRE(e.size() == 1);
        CHECK(e[0].content == "Hi");
        e = parser.push("s> ok");
        REQUIRE(e.size() == 1);
        CHECK(e[0].content == " <tools> ok");
        e = parser.push(" <");
        CHECK(e.empty());
        e = parser.finish();
        REQUIRE(e.size() == 1);
        CHECK(e[0].content == " <");
        CHECK(parser.reply().content == "Hi <tools> ok <");
    }
    SECTION("a family without a format: all content") {
        ToolCallReply r = parse_every_split(tool_call_format(ToolCallFamily::NONE), "<tool_call>{\"name\": \"f\"}");
        CHECK(r.calls.empty());
        CHECK(r.content == "<tool_call>{\"name\": \"f\"}");
    }
    SECTION("ids come from the seed") {
        std::string text = "<tool_call>{\"name\": \"f\"}</tool_call>";
        CHECK(tool_calls_parse(HERMES, text, 3).calls[0].id == tool_calls_parse(HERMES, text, 3).calls[0].id);
        CHECK(tool_calls_parse(HERMES, text, 3).calls[0].id != tool_calls_parse(HERMES, text, 4).calls[0].id);
    }
}

TEST_CASE("tool-call parser: malformed calls stay content, unharmed", "[tool_calls]") {
    const std::vector<std::pair<const ToolCallFormat*, std::string>> bad = {
        {&HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }}\n</tool_call>"},
        {&HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>"},  // never closes
        {&HERMES, "<tool_call>\n{\"arguments\": {}}\n</tool_call>"},                          // no name
        {&HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>"},        // not an object
        {&HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{oops\"}\n</tool_call>"},
        {&HERMES, "<tool_call>\n[{\"name\": \"f\"}]\n</tool_call>"},
        {&HERMES, "Sure <tool_call> calling now"},
        {&HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"\xff\"}}"},  // invalid UTF-8
        {&MISTRAL, "[TOOL_CALLS] []"},
        {&MISTRAL, "[TOOL_CALLS] [{\"name\": \"a\"}, 5]"},
        {&MISTRAL, "[TOOL_CALLS] nothing"},
        {&LLAMA3, "{\"name\": 5, \"parameters\": {}}"},
        {&LLAMA3, "{ not json at all"},
    };
    for (const auto& [format, text] : bad) {
        INFO(format->name << ": " << text);
        ToolCallReply r = parse_every_split(*format, text);
        CHECK(r.calls.empty());
        CHECK(r.content == text);
    }
    // A broken call, then a good one: the broken one is text.
    ToolCallReply r =
        parse_every_split(HERMES, "<tool_call>{bad}</tool_call> <tool_call>{\"name\": \"g\"}</tool_call>");
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].name == "g");
    CHECK(r.content == "<tool_call>{bad}</tool_call>");
    // Nesting past the bound is malformed, not a deep recursion.
    std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": ";
    for (int i = 0; i < 5000; i++) deep += "{\"a\":";
    CHECK(tool_calls_parse(HERMES, deep + "1" + std::string(5000, '}') + "}", 1).calls.empty());
    std::string deep_string = R"(<tool_call>{"name": "f", "arguments": ")" + std::string(5000, '[') + "\"}";
    CHECK(tool_calls_parse(HERMES, deep_string, 1).calls.empty());
}

TEST_CASE("tool-call messages in the shape templates and OpenAI take", "[tool_calls]") {
    ToolCall call{"call_1", "get_weather", R"({"city":"Paris"})"};
    CHECK(tool_call_json(call).dump() ==
          R"({"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}})");
}

TEST_CASE("tool-call envelope grammars", "[tool_calls]") {
    GbnfBuilder b;
    std::vector<ToolArgsGrammar> tools = {{"get_weather", b.add_rule("get-weather-args", "\"{}\"")},
                                          {"get_time", b.add_rule("get-time-args", "\"{\\\"tz\\\": 1}\"")}};
    CHECK(tool_call_envelope_gbnf(HERMES, std::span(tools).first(1), false, b) ==
          "root ::= tool-call\n"
          "get-weather-args ::= \"{}\"\n"
          "get-time-args ::= \"{\\\"tz\\\": 1}\"\n"
          "tool-call-0 ::= \"<tool_call>\\n\" \"{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" "
          "get-weather-args \"}\" \"\\n</tool_call>\"\n"
          "tool-call ::= tool-call-0\n");
    GbnfBuilder b2;
    tools = {{"get_weather", b2.add_rule("get-weather-args", "\"{}\"")},
             {"get_time", b2.add_rule("get-time-args", "\"{\\\"tz\\\": 1}\"")}};
    std::string mistral = tool_call_envelope_gbnf(MISTRAL, tools, true, b2);
    CHECK(mistral.starts_with("root ::= <[[TOOL_CALLS]]> \" \"? \"[\" tool-call (\", \" tool-call)* \"]\"\n"));
    CHECK(mistral.find("tool-call-1 ::= \"{\\\"name\\\": \\\"get_time\\\", \\\"arguments\\\": \" get-time-args "
                       "\"}\"\n") != std::string::npos);
    CHECK(mistral.ends_with("tool-call ::= tool-call-0 | tool-call-1\n"));
    // Llama 3.1 takes one call; its key is "parameters".
    GbnfBuilder b3;
    tools = {{"get_weather", b3.add_rule("get-weather-args", "\"{}\"")}};
    std::string llama = tool_call_envelope_gbnf(LLAMA3, tools, true, b3);
    CHECK(llama.starts_with("root ::= tool-call\n"));
    CHECK(llama.find("\\\"parameters\\\": \" get-weather-args") != std::string::npos);

    CHECK(moe_error_of([&] {
              tool_call_envelope_gbnf(tool_call_format(ToolCallFamily::NONE), tools, false, b3);
          }).find("no tool-call format") != std::string::npos);
    CHECK(moe_error_of([&] { tool_call_envelope_gbnf(HERMES, {}, false, b3); }).find("no tools") != std::string::npos);

    // Malformed tools are refused by name.
    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"({"type": "function"})", "tools: expected an array"},
        {R"([{"type": "retrieval", "function": {"name": "f"}}])", "tools[0]: expected"},
        {R"([{"type": "function", "function": {"name": ""}}])", "tools[0].function.name: expected a non-empty string"},
        {R"([{"type": "function", "function": {"name": "f", "parameters": 3}}])",
         "tools[0].function.parameters: expected an object"},
        {R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "if": {}}}}])",
         "tools[0].function.parameters"},
    };
    for (const auto& [tools_json, error] : bad) {
        INFO(tools_json);
        const ojson tools = ojson::parse(tools_json);  // clang 14 cannot capture a structured binding
        CHECK(moe_error_of([&] { tool_call_grammar(HERMES, tools, "", false); }).find(error) != std::string::npos);
    }
    ojson one = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
    CHECK(moe_error_of([&] { tool_call_grammar(HERMES, one, "g", false); }) ==
          "tool_choice: no tool named 'g' in tools");
    CHECK(moe_error_of([&] { tool_call_grammar(HERMES, ojson::array(), "", false); }).find("no tools") !=
          std::string::npos);
}

TEST_CASE("tool-call grammars accept the calls each family's template renders, token by token", "[tool_calls]") {
    // Mistral v3's vocabulary: [TOOL_CALLS] is a control token; the other
    // families' envelopes are text, which it tokenizes too.
    Tokenizer tokenizer = hf_tokenizer_load_dir(mistral_v3_dir());
    auto vocab = std::make_shared<const GrammarVocab>(tokenizer);
    const std::vector<int> end = {tokenizer.eos_id()};
    fs::path templates = shared_data_dir() / "chat_templates";
    const std::vector<TemplateCase> cases = {
        {"qwen3", templates / "Qwen-Qwen3-0.6B.jinja", ToolCallFamily::HERMES, "<|im_end|>"},
        {"hermes3", templates / "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFamily::HERMES,
         "<|im_end|>"},
        {"llama3.1", templates / "meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFamily::LLAMA3, "<|eot_id|>"},
        {"mistral-v3", mistral_v3_dir(), ToolCallFamily::MISTRAL, "</s>"},
    };
    // Tokens of `reply` run through a matcher of `gbnf`: all allowed, and the end reached.
    auto accepts = [&](const std::string& gbnf, const std::string& reply) {
        GrammarMatcher m(Grammar::parse(gbnf, vocab, "envelope"), end, true);
        for (int id : tokenizer.encode(reply, true, SpecialTokens::PARSE)) {
            if (!m.allows(id)) return false;
            m.accept(id);
        }
        return m.can_end();
    };
    size_t checked = 0;
    for (const TemplateCase& t : cases) {
        JinjaChat chat = load_chat(t);
        const ToolCallFormat& format = tool_call_format(t.family);
        for (const auto& [name, conversation] : tool_conversations()) {
            // The conversations whose arguments are objects (the grammar writes objects).
            if (name != "tool_call_and_result" && name != "parallel_tool_calls") continue;
            const ojson& messages = conversation.at("messages");
            for (size_t at = 0; at < messages.size(); at++) {
                if (!has_tool_calls(messages[at])) continue;
                INFO("template " << t.name << ", conversation " << name << ", message " << at);
                std::string reply = generated_text(chat, conversation, at, t.end);
                if (reply.empty()) continue;
                // Mistral's template writes the ids of history calls; the grammar makes none.
                for (size_t p; (p = reply.find(", \"id\": \"")) != std::string::npos;) reply.erase(p, 19);
                INFO("reply: " << reply);
                const ojson& calls = messages[at]["tool_calls"];
                bool several = calls.size() > 1;
                CHECK(accepts(tool_call_grammar(format, conversation["tools"], "", several), reply));
                if (!several) {
                    std::string called = calls[0]["function"]["name"];
                    CHECK(accepts(tool_call_grammar(format, conversation["tools"], called, false), reply));
                } else {
                    CHECK(!accepts(tool_call_grammar(format, conversation["tools"], "", false), reply));
                }
                // Another tool forced: refused.
                ojson other = conversation["tools"];
                other.push_back(ojson::parse(R"({"type": "function", "function": {"name": "other_tool"}})"));
                CHECK(!accepts(tool_call_grammar(format, other, "other_tool", several), reply));
                checked++;
            }
        }
    }
    // 2 each but Llama 3.1 (one call per message) and Mistral v3 (its
    // template moves the system message to the last user turn, so
    // parallel_tool_calls' prompt is not a prefix of its full render).
    CHECK(checked >= 6);
}
