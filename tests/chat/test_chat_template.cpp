// Tests of ChatTemplate: Mistral rendering against mistral-common's reference
// ids and text, its message rules (from chat_template_v1_spm.jinja), family
// detection from real tokenizer_config.json files, and the ChatML, Llama-3
// and Phi-3 renderers on vocabularies that have (or lack) their markers, and
// the segments render() reports (which message, which are reply spans).
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "chat/chat_template.h"
#include "engine/formats/gguf.h"
#include "engine/text/gguf_tokenizer.h"
#include "engine/text/hf_tokenizer.h"
#include "test_support.h"
#include "tokenizer_fixtures.h"

using tokenizer_test::extended;
using tokenizer_test::mistral;
namespace fs = std::filesystem;

namespace {

std::vector<int> concat(std::initializer_list<std::vector<int>> parts) {
    std::vector<int> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

// What the ids stand for with specials spelled out: control pieces by name,
// everything else by its bytes (a dummy prefix shows as a space).
std::string spelled_out(const Tokenizer& tok, const std::vector<int>& ids) {
    std::string out;
    for (int id : ids) out += tok.is_control(id) ? tok.id_to_piece(id) : tok.token_bytes(id);
    return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
        s.replace(pos, from.size(), to);
    return s;
}

std::string moe_error_of(const ChatTemplate& t, const Tokenizer& tok, const std::vector<ChatMessage>& messages) {
    try {
        t.encode(tok, messages);
    } catch (const MoeError& e) {
        return e.what();
    }
    return "(no MoeError)";
}

const std::vector<ChatMessage> CONVERSATION = {
    {ChatRole::SYSTEM, "You are terse."},
    {ChatRole::USER, "Hi"},
    {ChatRole::ASSISTANT, "Hello!"},
    {ChatRole::USER, " Bye \n"},
};

std::filesystem::path write_config(const std::string& tag, const nlohmann::json& config) {
    const auto dir = test_temp_dir(tag);
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    return dir;
}

}  // namespace

TEST_CASE("Mistral template reproduces mistral-common's reference ids", "[chat_template]") {
    const auto ref_dir = shared_data_dir() / "reference/mistral-common";
    const auto sample = nlohmann::json::parse(read_file(ref_dir / "no_tools__sample.json"));
    std::vector<ChatMessage> messages;
    for (const auto& m : sample["messages"])
        messages.push_back({*chat_role_parse(m["role"].get<std::string>()), m["content"].get<std::string>()});
    const auto expected =
        nlohmann::json::parse(read_file(ref_dir / "no_tools__tokens_v1.json"))["tokens"].get<std::vector<int>>();

    const ChatTemplate mistral_template(ChatFamily::MISTRAL);
    const auto ids = mistral_template.encode(mistral(), messages, true);
    CHECK(ids == expected);
    CHECK(mistral_template.encode(mistral(), messages, false) == expected);  // ends with [/INST] either way

    std::string text = read_file(ref_dir / "no_tools__text_v1.txt");
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    std::string joined;
    for (int id : ids) joined += mistral().id_to_piece(id);
    CHECK(joined == text);
    // render_text is chat_template_v1_spm.jinja's output: spaces where the pieces have "▁".
    CHECK(replace_all(mistral_template.render_text(messages), " ", "▁") == text);
    CHECK(spelled_out(mistral(), ids) == mistral_template.render_text(messages));
}

TEST_CASE("Mistral template: system prompt, merging and segments", "[chat_template]") {
    const Tokenizer& tok = mistral();
    const ChatTemplate t(ChatFamily::MISTRAL);
    auto enc = [&](const std::string& s) { return tok.encode(s); };

    // The system prompt goes before the FIRST user message (v1), each turn is its own segment.
    const std::vector<ChatMessage> with_system = {{ChatRole::SYSTEM, "S"}, {ChatRole::USER, "U"}, {ChatRole::ASSISTANT, "A"}, {ChatRole::USER, "V"}};
    CHECK(t.encode(tok, with_system) ==
          concat({{1}, enc("[INST] S\n\nU [/INST]"), enc("A"), {2}, enc("[INST] V [/INST]")}));
    CHECK(t.render_text(with_system) == "<s> [INST] S\n\nU [/INST] A</s> [INST] V [/INST]");

    // Consecutive messages of one role are joined with "\n\n"; system messages
    // anywhere are pulled out and joined the same way.
    const std::vector<ChatMessage> split = {{ChatRole::USER, "a"},      {ChatRole::SYSTEM, "s1"}, {ChatRole::USER, "b"}, {ChatRole::ASSISTANT, "c"},
                                            {ChatRole::ASSISTANT, "d"}, {ChatRole::SYSTEM, "s2"}, {ChatRole::USER, "e"}};
    const std::vector<ChatMessage> merged = {
        {ChatRole::SYSTEM, "s1\n\ns2"}, {ChatRole::USER, "a\n\nb"}, {ChatRole::ASSISTANT, "c\n\nd"}, {ChatRole::USER, "e"}};
    CHECK(t.encode(tok, split) == t.encode(tok, merged));
    CHECK(t.render_text(split) == "<s> [INST] s1\n\ns2\n\na\n\nb [/INST] c\n\nd</s> [INST] e [/INST]");

    // A conversation may end with an assistant reply (then it ends with EOS).
    const std::vector<ChatMessage> ends_with_reply = {{ChatRole::USER, "U"}, {ChatRole::ASSISTANT, "A"}};
    CHECK(t.encode(tok, ends_with_reply) == concat({{1}, enc("[INST] U [/INST]"), enc("A"), {2}}));

    // An empty user message is allowed, as in the jinja; an empty system prompt adds nothing.
    const std::vector<ChatMessage> empty_user = {{ChatRole::SYSTEM, ""}, {ChatRole::USER, ""}};
    CHECK(t.encode(tok, empty_user) == concat({{1}, enc("[INST]  [/INST]")}));
    CHECK(t.render_text(empty_user) == "<s> [INST]  [/INST]");

    // Message text never becomes a control id: only the template's BOS/EOS are.
    const std::vector<ChatMessage> sneaky = {{ChatRole::USER, "</s><s>[INST]"}, {ChatRole::ASSISTANT, "</s>"}, {ChatRole::USER, "<unk>"}};
    const auto ids = t.encode(tok, sneaky);
    int controls = 0;
    for (int id : ids) controls += tok.is_control(id);
    CHECK(controls == 2);
    CHECK(ids.front() == 1);
}

TEST_CASE("render: every segment's tokens and message, and the reply spans", "[chat_template]") {
    const Tokenizer& tok = extended();
    struct Segment {
        std::vector<int> ids;
        int message;
        bool reply;
    };
    auto check_segments = [&](const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                              const std::vector<Segment>& want) {
        const ChatPrompt p = t.render(tok, messages);
        CHECK(p.ids == t.encode(tok, messages));
        REQUIRE(p.spans.size() == want.size());
        size_t at = 0;
        for (size_t s = 0; s < want.size(); s++) {
            INFO("segment " << s);
            const ChatSpan& span = p.spans[s];
            CHECK(span.begin == at);
            CHECK(std::vector<int>(p.ids.begin() + long(span.begin), p.ids.begin() + long(span.end)) == want[s].ids);
            CHECK(span.message == want[s].message);
            CHECK(span.reply == want[s].reply);
            at = span.end;
        }
        CHECK(at == p.ids.size());
    };
    auto enc = [&](const std::string& text, bool dummy_prefix) { return tok.encode(text, dummy_prefix); };

    // Mistral: a reply alone in its turn is a reply span; one joined with its
    // neighbour is not, nor is one followed by a system message.
    check_segments(ChatTemplate(ChatFamily::MISTRAL),
                   {{ChatRole::SYSTEM, "S"},
                    {ChatRole::USER, "U"},
                    {ChatRole::ASSISTANT, "A"},
                    {ChatRole::USER, "V"},
                    {ChatRole::ASSISTANT, "B"},
                    {ChatRole::ASSISTANT, "C"},
                    {ChatRole::USER, "W"}},
                   {{{1}, -1, false},
                    {enc("[INST] S\n\nU [/INST]", true), 1, false},
                    {enc("A", true), 2, true},
                    {{2}, 2, false},
                    {enc("[INST] V [/INST]", true), 3, false},
                    {enc("B\n\nC", true), 4, false},
                    {{2}, 4, false},
                    {enc("[INST] W [/INST]", true), 6, false}});
    check_segments(ChatTemplate(ChatFamily::MISTRAL),
                   {{ChatRole::USER, "U"}, {ChatRole::ASSISTANT, "A"}, {ChatRole::SYSTEM, "S"}, {ChatRole::USER, "V"}},
                   {{{1}, -1, false},
                    {enc("[INST] S\n\nU [/INST]", true), 0, false},
                    {enc("A", true), 1, false},
                    {{2}, 1, false},
                    {enc("[INST] V [/INST]", true), 3, false}});

    // ChatML: each message's markers and text are its own; the generation
    // prompt belongs to none; the reply is encoded with its role, no reply span.
    const int start = tok.piece_to_id("<|im_start|>"), end = tok.piece_to_id("<|im_end|>");
    check_segments(ChatTemplate(ChatFamily::CHATML), {{ChatRole::USER, "Hi"}, {ChatRole::ASSISTANT, "Hello"}},
                   {{{1}, -1, false},
                    {{start}, 0, false},
                    {enc("user\nHi", false), 0, false},
                    {{end}, 0, false},
                    {enc("\n", false), 0, false},
                    {{start}, 1, false},
                    {enc("assistant\nHello", false), 1, false},
                    {{end}, 1, false},
                    {enc("\n", false), 1, false},
                    {{start}, -1, false},
                    {enc("assistant\n", false), -1, false}});
    // Llama 3 and Phi-3 number their segments the same way.
    for (ChatFamily family : {ChatFamily::LLAMA3, ChatFamily::PHI3}) {
        INFO(chat_family_name(family));
        const ChatPrompt p = ChatTemplate(family).render(tok, CONVERSATION);
        std::vector<int> messages;
        for (const ChatSpan& span : p.spans) {
            CHECK_FALSE(span.reply);
            if (messages.empty() || messages.back() != span.message) messages.push_back(span.message);
        }
        CHECK(messages == std::vector<int>{-1, 0, 1, 2, 3, -1});
    }
}

TEST_CASE("Mistral template rejects what the reference rejects", "[chat_template]") {
    const Tokenizer& tok = mistral();
    const ChatTemplate t(ChatFamily::MISTRAL);
    CHECK_THAT(moe_error_of(t, tok, {}), Catch::Contains("empty"));
    CHECK_THAT(moe_error_of(t, tok, {{ChatRole::ASSISTANT, "A"}, {ChatRole::USER, "U"}}),
               Catch::Contains("must start with a user message, got assistant"));
    CHECK_THAT(moe_error_of(t, tok, {{ChatRole::SYSTEM, "S"}, {ChatRole::ASSISTANT, "A"}}), Catch::Contains("must start with a user"));
    CHECK_THAT(moe_error_of(t, tok, {{ChatRole::SYSTEM, "S"}}), Catch::Contains("no user message"));
    CHECK_THAT(moe_error_of(t, tok, {{ChatRole::USER, "U"}, {ChatRole::TOOL, "42"}}),
               Catch::Contains("message 1: unknown role 'tool'"));
    CHECK_THAT(moe_error_of(t, tok, {{ChatRole::USER, "U"}, {ChatRole::ASSISTANT, ""}}),
               Catch::Contains("assistant message content must be non-empty"));
    CHECK_THROWS_AS(t.render_text(std::vector<ChatMessage>{}), MoeError);
}

TEST_CASE("Chat template family detection", "[chat_template]") {
    ChatFamily family = ChatFamily::PHI3;
    CHECK(ChatTemplate::detect(read_file(shared_data_dir() / "chat_templates/mixtral-8x7b-instruct-v0.1.jinja"),
                               &family));
    CHECK(family == ChatFamily::MISTRAL);
    CHECK(ChatTemplate::detect(read_file(shared_data_dir() / "reference/mistral-common/chat_template_v1_spm.jinja"),
                               &family));
    CHECK(family == ChatFamily::MISTRAL);
    CHECK(
        ChatTemplate::detect("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + "
                             "'<|im_end|>\n'}}{% endfor %}",
                             &family));
    CHECK(family == ChatFamily::CHATML);
    CHECK(ChatTemplate::detect("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}", &family));
    CHECK(family == ChatFamily::LLAMA3);
    CHECK(ChatTemplate::detect("{{'<|user|>\n' + message['content'] + '<|end|>\n'}}", &family));
    CHECK(family == ChatFamily::PHI3);
    family = ChatFamily::CHATML;
    CHECK_FALSE(ChatTemplate::detect("{{ message['content'] }}", &family));
    CHECK_FALSE(ChatTemplate::detect("<|user|> without its end marker", &family));
    CHECK(family == ChatFamily::CHATML);  // untouched when unknown
    CHECK(std::string(chat_family_name(ChatFamily::MISTRAL)) == "mistral");
}

TEST_CASE("ChatTemplate::from_model_dir", "[chat_template]") {
    std::string warning = "stale";
    // A real Hugging Face folder with a tools-capable Jinja template.
    auto t = ChatTemplate::from_model_dir(shared_data_dir() / "tokenizers/mistral-7b-instruct-v0.3", &warning);
    CHECK(t.family() == ChatFamily::MISTRAL);
    CHECK(warning.empty());

    const auto empty_dir = test_temp_dir("chat_template_none");
    t = ChatTemplate::from_model_dir(empty_dir, &warning);
    CHECK(t.family() == ChatFamily::MISTRAL);
    CHECK_THAT(warning, Catch::Contains("tokenizer_config.json") && Catch::Contains("mistral"));
    CHECK_NOTHROW(ChatTemplate::from_model_dir(empty_dir, nullptr));

    t = ChatTemplate::from_model_dir(write_config("chat_template_nofield", {{"bos_token", "<s>"}}), &warning);
    CHECK(t.family() == ChatFamily::MISTRAL);
    CHECK_FALSE(warning.empty());

    const std::string chatml =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
    t = ChatTemplate::from_model_dir(write_config("chat_template_chatml", {{"chat_template", chatml}}), &warning);
    CHECK(t.family() == ChatFamily::CHATML);
    CHECK(warning.empty());

    const std::string mixtral = read_file(shared_data_dir() / "chat_templates/mixtral-8x7b-instruct-v0.1.jinja");
    t = ChatTemplate::from_model_dir(write_config("chat_template_mixtral", {{"chat_template", mixtral}}), &warning);
    CHECK(t.family() == ChatFamily::MISTRAL);
    CHECK(warning.empty());

    // The list form: the "default" entry counts, not the others.
    const nlohmann::json list = {
        {"chat_template",
         {{{"name", "tool_use"}, {"template", mixtral}}, {{"name", "default"}, {"template", chatml}}}}};
    t = ChatTemplate::from_model_dir(write_config("chat_template_list", list), &warning);
    CHECK(t.family() == ChatFamily::CHATML);
    CHECK(warning.empty());
    const nlohmann::json no_default = {{"chat_template", {{{"name", "rag"}, {"template", chatml}}}}};
    t = ChatTemplate::from_model_dir(write_config("chat_template_nodefault", no_default), &warning);
    CHECK(t.family() == ChatFamily::MISTRAL);
    CHECK_THAT(warning, Catch::Contains("default") && Catch::Contains("rag"));

    const auto odd = write_config("chat_template_odd", {{"chat_template", "{{ messages | tojson }}"}});
    t = ChatTemplate::from_model_dir(odd, &warning);
    CHECK(t.family() == ChatFamily::MISTRAL);
    CHECK_THAT(warning, Catch::Contains("not recognised") && Catch::Contains("tojson"));

    const auto broken = test_temp_dir("chat_template_broken");
    std::ofstream(broken / "tokenizer_config.json") << "{\"chat_template\": ";
    CHECK_THROWS_WITH(ChatTemplate::from_model_dir(broken, &warning),
                      Catch::Contains((broken / "tokenizer_config.json").string()));
    const auto wrong_type = write_config("chat_template_number", {{"chat_template", 7}});
    CHECK_THROWS_WITH(ChatTemplate::from_model_dir(wrong_type, &warning), Catch::Contains("chat_template"));
}

TEST_CASE("ChatML, Llama-3 and Phi-3 need their markers in the vocabulary", "[chat_template]") {
    const std::vector<ChatMessage> hi = {{ChatRole::USER, "Hi"}};
    CHECK_THAT(moe_error_of(ChatTemplate(ChatFamily::CHATML), mistral(), hi),
               Catch::Contains("needs token <|im_start|>") && Catch::Contains("lacks"));
    CHECK_THAT(moe_error_of(ChatTemplate(ChatFamily::LLAMA3), mistral(), hi),
               Catch::Contains("needs token <|begin_of_text|>"));
    CHECK_THAT(moe_error_of(ChatTemplate(ChatFamily::PHI3), mistral(), hi), Catch::Contains("needs token <|user|>"));
    CHECK_THAT(moe_error_of(ChatTemplate(ChatFamily::CHATML), extended(), {{ChatRole::TOOL, "x"}}),
               Catch::Contains("unknown role 'tool'"));
    // Roles are parsed once, where a chat comes in: "developer" is the system role, other words none.
    CHECK(chat_role_parse("developer") == ChatRole::SYSTEM);
    CHECK_FALSE(chat_role_parse("robot").has_value());
    for (ChatRole r : {ChatRole::SYSTEM, ChatRole::USER, ChatRole::ASSISTANT, ChatRole::TOOL})
        CHECK(chat_role_parse(chat_role_name(r)) == r);
}

TEST_CASE("ChatML, Llama-3 and Phi-3 render like their Hugging Face templates", "[chat_template]") {
    const Tokenizer& tok = extended();
    struct Case {
        ChatFamily family;
        std::string with_prompt, without_prompt;
    };
    const Case cases[] = {
        {ChatFamily::CHATML,
         "<s><|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
         "Hello!<|im_end|>\n<|im_start|>user\n Bye \n<|im_end|>\n<|im_start|>assistant\n",
         "<s><|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
         "Hello!<|im_end|>\n<|im_start|>user\n Bye \n<|im_end|>\n"},
        {ChatFamily::LLAMA3,
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
         "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\n",
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
         "Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"},
        {ChatFamily::PHI3,
         "<s><|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\n Bye \n"
         "<|end|>\n<|assistant|>\n",
         "<s><|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\n Bye \n"
         "<|end|>\n"},
    };
    for (const Case& c : cases) {
        INFO(chat_family_name(c.family));
        const ChatTemplate t(c.family);
        CHECK(t.render_text(CONVERSATION, true) == c.with_prompt);
        CHECK(t.render_text(CONVERSATION, false) == c.without_prompt);
        // The ids say the same thing: markers as their control ids, text
        // without a dummy prefix (no stray space after a marker).
        const auto ids = t.encode(tok, CONVERSATION, true);
        CHECK(spelled_out(tok, ids) == c.with_prompt);
        CHECK(spelled_out(tok, t.encode(tok, CONVERSATION, false)) == c.without_prompt);
        CHECK(tok.is_control(ids.front()));
    }
    const auto chatml_ids = ChatTemplate(ChatFamily::CHATML).encode(tok, std::vector<ChatMessage>{{ChatRole::USER, "Hi"}});
    CHECK(chatml_ids == concat({{tok.bos_id(), tok.piece_to_id("<|im_start|>")},
                                tok.encode("user\nHi", false),
                                {tok.piece_to_id("<|im_end|>")},
                                tok.encode("\n", false),
                                {tok.piece_to_id("<|im_start|>")},
                                tok.encode("assistant\n", false)}));
    // An empty system message is skipped by the Phi-3 template.
    const std::vector<ChatMessage> empty_system = {{ChatRole::SYSTEM, ""}, {ChatRole::USER, "Hi"}};
    CHECK(ChatTemplate(ChatFamily::PHI3).render_text(empty_system) == "<s><|user|>\nHi<|end|>\n<|assistant|>\n");
}

TEST_CASE("ChatML starts with BOS only when the tokenizer adds one", "[chat_template]") {
    // The byte-level BPE of tests/support: 259 <|endoftext|>, 260 <|im_start|>, 261 <|im_end|>.
    const std::vector<ChatMessage> chat = {{ChatRole::USER, "Hi"}};
    const ChatTemplate chatml(ChatFamily::CHATML);
    const auto first_id = [&](const HfSpecialTokens& specials) {
        return chatml.encode(hf_tokenizer_parse(byte_level_tokenizer_json_text(), "bpe", specials), chat).front();
    };
    CHECK(first_id({"", "<|im_end|>", std::nullopt}) == 260);        // no BOS at all (Qwen's tokenizer_config.json)
    CHECK(first_id({"<|endoftext|>", "<|im_end|>", false}) == 260);  // a BOS the tokenizer does not add
    CHECK(first_id({"<|endoftext|>", "<|im_end|>", true}) == 259);
    // Mistral's format is defined with its BOS: a tokenizer without one is refused.
    const Tokenizer none = hf_tokenizer_parse(byte_level_tokenizer_json_text(), "bpe", {"", "<|im_end|>", false});
    CHECK_THROWS_WITH(ChatTemplate(ChatFamily::MISTRAL).encode(none, chat), Catch::Contains("needs a BOS"));
}

TEST_CASE("Phi-3 template on the real Phi-3 vocabulary", "[chat_template]") {
    // llama.cpp's Phi-3 vocab GGUF: Llama's pieces plus <|user|> = 32010,
    // <|end|> = 32007, <|assistant|> = 32001, and Phi-3-mini's chat_template.
    const auto path = shared_data_dir() / "reference/llama-cpp-vocab/ggml-vocab-phi-3.gguf";
    const GgufFile gguf(path);
    const Tokenizer phi = tokenizer_from_gguf(gguf.metadata(), path.string());
    REQUIRE(phi.piece_to_id("<|user|>") == 32010);
    REQUIRE(phi.piece_to_id("<|end|>") == 32007);
    REQUIRE(phi.piece_to_id("<|assistant|>") == 32001);

    std::string warning = "stale";
    const ChatTemplate t = chat_template_from_gguf(gguf.metadata(), path.string(), &warning);
    CHECK(t.family() == ChatFamily::PHI3);
    CHECK(warning.empty());

    const std::vector<ChatMessage> messages = {{ChatRole::USER, "Hi"}, {ChatRole::ASSISTANT, "Hello!"}, {ChatRole::USER, "Bye"}};
    // What that template renders (bos_token = "<s>") for these messages.
    const std::string expected =
        "<s><|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n";
    CHECK(t.render_text(messages) == expected);
    const auto ids = t.encode(phi, messages);
    CHECK(spelled_out(phi, ids) == expected);
    const std::vector<int> head(ids.begin(), ids.begin() + 3);
    CHECK(head == std::vector<int>{1, 32010, 13});  // <s> <|user|> <0x0A>: no "▁" after the marker
    CHECK(std::count(ids.begin(), ids.end(), 32007) == 3);
    CHECK(ids.back() == 13);
}

TEST_CASE("chat template: Mixtral's chat template from a GGUF", "[chat_template]") {
    const fs::path ref = shared_data_dir() / "reference/gguf";
    const fs::path dir = test_temp_dir("gguf_tokenizer_template");
    const GgufFile q8(ref / "Q8_0.gguf");
    // Q8_0.gguf's tokenizer metadata and Mixtral-8x7B-Instruct's template, in a file of our own.
    std::vector<GgufKeyValue> md;
    for (const GgufKeyValue& kv : q8.metadata().values())
        if (kv.key.starts_with("tokenizer.ggml.")) md.push_back(kv);
    const std::string jinja = read_file(shared_data_dir() / "chat_templates/mixtral-8x7b-instruct-v0.1.jinja");
    md.push_back({"tokenizer.chat_template", jinja});
    const fs::path path = dir / "mixtral-vocab.gguf";
    gguf_write(path, md, {});

    const GgufFile gguf(path);
    REQUIRE(gguf.metadata().get_string("tokenizer.chat_template") == jinja);
    std::string warning = "stale";
    const ChatTemplate t = chat_template_from_gguf(gguf.metadata(), path.string(), &warning);
    CHECK(t.family() == ChatFamily::MISTRAL);
    CHECK(warning.empty());

    // mistral-common's reference conversation gives its reference ids.
    const Tokenizer tok = tokenizer_from_gguf(gguf.metadata(), path.string());
    const fs::path mc = shared_data_dir() / "reference/mistral-common";
    const auto sample = nlohmann::json::parse(read_file(mc / "no_tools__sample.json"));
    std::vector<ChatMessage> messages;
    for (const auto& m : sample["messages"])
        messages.push_back({*chat_role_parse(m["role"].get<std::string>()), m["content"].get<std::string>()});
    const auto expected =
        nlohmann::json::parse(read_file(mc / "no_tools__tokens_v1.json"))["tokens"].get<std::vector<int>>();
    CHECK(t.encode(tok, messages) == expected);

    // Other templates are detected as from tokenizer_config.json; an absent
    // or unknown one falls back to Mistral's with a warning naming the key.
    const std::string chatml = read_file(shared_data_dir() / "chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
    gguf_write(path, tokenizer_test::with(md, "tokenizer.chat_template", chatml), {});
    CHECK(chat_template_from_gguf(GgufFile(path).metadata(), path.string(), &warning).family() == ChatFamily::CHATML);
    CHECK(warning.empty());
    gguf_write(path, tokenizer_test::without(md, "tokenizer.chat_template"), {});
    CHECK(chat_template_from_gguf(GgufFile(path).metadata(), path.string(), &warning).family() == ChatFamily::MISTRAL);
    CHECK_THAT(warning, Catch::StartsWith(path.string() + ": no tokenizer.chat_template found") &&
                            Catch::Contains("built-in mistral"));
    gguf_write(path, tokenizer_test::with(md, "tokenizer.chat_template", "{{ messages | tojson }}"), {});
    CHECK(chat_template_from_gguf(GgufFile(path).metadata(), path.string(), &warning).family() == ChatFamily::MISTRAL);
    CHECK_THAT(warning, Catch::Contains("tokenizer.chat_template not recognised") && Catch::Contains("tojson"));

    // llama.cpp's own file carries the same template.
    CHECK(chat_template_from_gguf(q8.metadata(), "Q8_0.gguf", &warning).family() == ChatFamily::MISTRAL);
    CHECK(warning.empty());
}
