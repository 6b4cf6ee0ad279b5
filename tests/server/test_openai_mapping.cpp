// OpenAI request parsing and response framing without HTTP: the parsers
// turn JSON into native requests or ApiErrors, the responder turns task
// events into chunks and objects, the queue bounds what may wait.
#include <catch2/catch.hpp>

#include "base/utf8.h"
#include "engine/text/tokenizer.h"
#include "server/openai.h"
#include "server_fixture.h"
#include "server/engine_worker.h"
#include "support/test_support.h"

using json = nlohmann::json;

namespace {

const Tokenizer& tokenizer() {
    static Tokenizer t = Tokenizer::load(test_model_dir("tiny") / "tokenizer.model");
    return t;
}

// Splits an SSE body into its data payloads; every frame must be "data: X\n\n".
std::vector<std::string> sse_payloads(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < body.size()) {
        REQUIRE(body.compare(pos, 6, "data: ") == 0);
        size_t end = body.find("\n\n", pos);
        REQUIRE(end != std::string::npos);
        out.push_back(body.substr(pos + 6, end - pos - 6));
        pos = end + 2;
    }
    return out;
}

TaskEvent token_event(int id, const std::string& text) {
    TokenEvent e;
    e.token = id;
    e.text = text;
    e.logprob = -0.5f;
    e.top_logprobs = {{id, -0.5f}, {id + 1, -1.5f}};
    return e;
}

TaskEvent done_event(int n_prompt, int n_generated, FinishReason reason) {
    GenerateResult r;
    r.n_prompt = n_prompt;
    r.n_generated = n_generated;
    r.n_cached = 2;
    r.finish_reason = reason;
    r.text = "Hello world";
    return r;
}

}  // namespace

TEST_CASE("utf8_valid accepts well-formed text and refuses the rest", "[server]") {
    CHECK(utf8_valid("plain ascii"));
    CHECK(utf8_valid("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
    CHECK_FALSE(utf8_valid("\xC3"));              // truncated
    CHECK_FALSE(utf8_valid("\xC0\xAF"));          // overlong
    CHECK_FALSE(utf8_valid("\xED\xA0\x80"));      // surrogate
    CHECK_FALSE(utf8_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
    CHECK_FALSE(utf8_valid("\xFF"));
    CHECK(utf8_sanitize("a\xFF"
                        "b") ==
          "a\xEF\xBF\xBD"
          "b");
}

TEST_CASE("escape_control escapes control characters, ill-formed bytes and backslashes only", "[server]") {
    CHECK(escape_control("plain text, é €") == "plain text, é €");
    CHECK(escape_control(std::string("a\r\nb\0c\x1b[31m\x7f", 12)) == "a\\x0d\\x0ab\\x00c\\x1b[31m\\x7f");
    CHECK(escape_control("C1 \xC2\x9B csi, \xC2\xA0 nbsp") == "C1 \\xc2\\x9b csi, \xC2\xA0 nbsp");
    CHECK(escape_control("bad \xFF byte, \\x00 typed") == "bad \\xff byte, \\\\x00 typed");
    CHECK(std::string(ApiError(400, "line\nbreak", "p\r").what()) == "line\\x0abreak");
    CHECK(ApiError(400, "x", "p\r").param == "p\\x0d");
}

TEST_CASE("parse_json_body limits nesting and elements and names an overflowing number's field", "[server]") {
    CHECK(error_of([] { parse_json_body(std::string(MAX_JSON_DEPTH + 1, '[')); }).code == "invalid_json");
    CHECK_NOTHROW(
        parse_json_body("{\"a\":" + std::string(MAX_JSON_DEPTH - 1, '[') + std::string(MAX_JSON_DEPTH - 1, ']') + "}"));
    std::string many = "{\"a\":[0";
    for (size_t i = 3; i < MAX_JSON_ELEMENTS; i++) many += ",0";  // the object, the array and its values
    CHECK_NOTHROW(parse_json_body(many + "]}"));
    CHECK(std::string(error_of([&] { parse_json_body(many + ",0]}"); }).what()).find("elements") != std::string::npos);
    CHECK(error_of([] { parse_json_body(R"({"temperature":1e400})"); }).param == "temperature");
    CHECK(error_of([] { parse_json_body(R"({"a":[{"b":[1,2,-1e999]}]})"); }).param == "a[0].b[2]");
    CHECK(error_of([] { parse_json_body(R"({"a":{"b":1E+400}})"); }).code == "invalid_value");
}

TEST_CASE("chat requests parse into native options", "[server]") {
    json body = {
        {"model", "x"},
        {"messages",
         {{{"role", "system"}, {"content", "be brief"}},
          {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
        {"max_completion_tokens", 7},
        {"temperature", 0.5},
        {"top_p", 0.9},
        {"top_k", 5},
        {"min_p", 0.1},
        {"repetition_penalty", 1.1},
        {"presence_penalty", 0.25},
        {"frequency_penalty", -0.5},
        {"seed", 42},
        {"stop", {"x", "", "yz"}},
        {"stream", true},
        {"stream_options", {{"include_usage", true}}},
        {"logprobs", true},
        {"top_logprobs", 3},
        {"n", 1}};
    ChatRequest r = chat_request_parse(body, 100);
    REQUIRE(r.chat.messages.size() == 2);
    CHECK(r.chat.messages[0].role == ChatRole::SYSTEM);
    CHECK(r.chat.messages[1].content == "a\nb");
    // As sent, for a Jinja template: content parts and key order kept; no tools, no extras.
    CHECK(r.chat.messages_json.dump() == body["messages"].dump());
    CHECK(r.chat.tools.is_null());
    CHECK(r.chat.extras.empty());
    CHECK(r.chat.add_generation_prompt);
    CHECK(r.options.max_tokens == 7);
    CHECK(r.options.sampling.temperature == Approx(0.5));
    CHECK(r.options.sampling.top_p == Approx(0.9));
    CHECK(r.options.sampling.top_k == 5);
    CHECK(r.options.sampling.min_p == Approx(0.1));
    CHECK(r.options.sampling.repetition_penalty == Approx(1.1));
    CHECK(r.options.sampling.presence_penalty == Approx(0.25));
    CHECK(r.options.sampling.frequency_penalty == Approx(-0.5));
    CHECK(r.options.sampling.seed == 42);
    CHECK(r.options.stop == std::vector<std::string>{"x", "yz"});
    CHECK(r.options.stream);
    CHECK(r.options.include_usage);
    CHECK(r.options.top_logprobs == 3);

    json minimal = {{"messages", {{{"role", "developer"}, {"content", "s"}}, {{"role", "user"}, {"content", "u"}}}}};
    ChatRequest m = chat_request_parse(minimal, 100);
    CHECK(m.chat.messages[0].role == ChatRole::SYSTEM);
    CHECK(m.chat.messages_json[0]["role"] == "developer");
    CHECK_FALSE(m.options.max_tokens);
    CHECK(m.options.top_logprobs == -1);
    CHECK_FALSE(m.options.stream);
    CHECK(m.options.cache_prompt);
}

TEST_CASE("chat requests carry tools and template variables in order", "[server]") {
    const nlohmann::ordered_json body = nlohmann::ordered_json::parse(R"({"messages":[
        {"role":"user","content":"w?"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"z\":1,\"a\":2}"}}]},
        {"role":"tool","content":"sunny","name":"f","tool_call_id":"c1"}],
        "tools":[{"type":"function","function":{"name":"f","parameters":{"z":{},"a":{}}}}],
        "enable_thinking":true,"chat_template_kwargs":{"enable_thinking":false,"x":[1]},
        "add_generation_prompt":false})");
    const ChatRequest r = chat_request_parse(body, 64);
    // As sent, but a call's arguments reach the template as an object (key
    // order kept) and its null content as "" (templates test for a string).
    nlohmann::ordered_json expected = body["messages"];
    expected[1]["content"] = "";
    expected[1]["tool_calls"][0]["function"]["arguments"] = nlohmann::ordered_json::parse(R"({"z":1,"a":2})");
    CHECK(r.chat.messages_json.dump() == expected.dump());
    CHECK(r.chat.tools.dump() == body["tools"].dump());
    CHECK(r.chat.extras.dump() == R"({"enable_thinking":false,"x":[1]})");
    CHECK_FALSE(r.chat.add_generation_prompt);
    CHECK(r.chat.messages[2].role == ChatRole::TOOL);
    CHECK(r.chat.messages[1].content.empty());
}

TEST_CASE("chat request errors name the parameter", "[server]") {
    auto chat = [](json body) { return error_of([&] { chat_request_parse(body, 64); }); };
    json user = {{{"role", "user"}, {"content", "hi"}}};
    CHECK(chat(json::object()).param == "messages");
    CHECK(chat({{"messages", json::array()}}).code == "empty_array");
    CHECK(chat({{"messages", {{{"role", "function"}, {"content", "x"}}}}}).param == "messages[0].role");
    CHECK(chat({{"messages", {{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "x"}}}}}).status == 0);
    CHECK(chat({{"messages", {{{"role", "tool"}, {"content", "x"}}}}}).param == "messages[0].tool_call_id");
    CHECK(chat({{"messages", user}, {"tools", {{"type", "function"}}}}).code == "invalid_type");
    CHECK(chat({{"messages", user}, {"chat_template_kwargs", 1}}).param == "chat_template_kwargs");
    CHECK(chat({{"messages", user}, {"chat_template_kwargs", {{"tools", json::array()}}}}).param ==
          "chat_template_kwargs");
    CHECK(chat({{"messages", user}, {"max_tokens", 65}}).param == "max_tokens");
    CHECK(chat({{"messages", user}, {"max_tokens", 0}}).status == 400);
    CHECK(chat({{"messages", user}, {"n", 2}}).param == "n");
    CHECK(chat({{"messages", user}, {"temperature", "hot"}}).code == "invalid_type");
    CHECK(chat({{"messages", user}, {"top_logprobs", 2}}).param == "top_logprobs");
    CHECK(chat({{"messages", user}, {"stream_options", {{"include_usage", true}}}}).param == "stream_options");
    CHECK(chat({{"messages", user}, {"max_tokens", 64}}).status == 0);
}

TEST_CASE("beam search fields: beam_width, length_penalty and n up to the width", "[server]") {
    json user = {{{"role", "user"}, {"content", "hi"}}};
    ChatRequest r = chat_request_parse(
        {{"messages", user}, {"beam_width", 8}, {"length_penalty", 0.6}, {"n", 3}, {"temperature", 0}}, 100);
    CHECK(r.options.beam_width == 8);
    CHECK(r.options.length_penalty == Approx(0.6));
    CHECK(r.options.n == 3);
    ChatRequest d = chat_request_parse({{"messages", user}, {"beam_width", 2}}, 100);
    CHECK(d.options.n == 1);
    CHECK(d.options.length_penalty == Approx(1.0));
    CHECK(chat_request_parse({{"messages", user}}, 100).options.beam_width == 0);
    CompletionRequest c = completion_request_parse({{"prompt", "a"}, {"beam_width", 32}, {"n", 32}}, 100, 32000);
    CHECK(c.options.beam_width == 32);
    CHECK(c.options.n == 32);

    auto chat = [&](json extra) {
        json body = {{"messages", user}};
        body.update(extra);
        return error_of([&] { chat_request_parse(body, 64); });
    };
    CHECK(chat({{"beam_width", 0}}).param == "beam_width");
    CHECK(chat({{"beam_width", 33}}).param == "beam_width");
    CHECK(chat({{"beam_width", 2.5}}).code == "invalid_type");
    CHECK(chat({{"beam_width", 4}, {"n", 5}}).param == "n");
    CHECK(chat({{"beam_width", 4}, {"n", 0}}).param == "n");
    CHECK(chat({{"beam_width", 4}, {"length_penalty", -0.1}}).param == "length_penalty");
    CHECK(chat({{"length_penalty", 1.0}}).param == "length_penalty");
    CHECK(chat({{"beam_width", 4}, {"temperature", 0.7}}).param == "temperature");
    CHECK(chat({{"beam_width", 4}, {"top_p", 0.5}}).param == "top_p");
    CHECK(chat({{"beam_width", 4}, {"top_k", 40}}).param == "top_k");
    CHECK(chat({{"beam_width", 4}, {"frequency_penalty", 1}}).param == "frequency_penalty");
    CHECK(chat({{"beam_width", 4}, {"logprobs", true}}).param == "logprobs");
    CHECK(chat({{"beam_width", 4}, {"top_p", 1}, {"top_k", 0}, {"temperature", 0}, {"seed", 3}}).status == 0);
    CHECK(error_of([&] { completion_request_parse({{"prompt", "a"}, {"beam_width", 2}, {"logprobs", 1}}, 64, 100); })
              .param == "logprobs");
}

TEST_CASE("completion prompts are text or token ids", "[server]") {
    CompletionRequest text = completion_request_parse({{"prompt", "once upon"}}, 64, 100);
    CHECK_FALSE(text.has_prompt_tokens);
    CHECK(text.prompt == "once upon");
    CompletionRequest ids = completion_request_parse({{"prompt", {1, 2, 3}}, {"logprobs", 2}}, 64, 100);
    CHECK(ids.prompt_tokens == std::vector<int>{1, 2, 3});
    CHECK(ids.options.top_logprobs == 2);
    CompletionRequest batch1 = completion_request_parse({{"prompt", {"one"}}}, 64, 100);
    CHECK(batch1.prompt == "one");
    CHECK(error_of([] { completion_request_parse({{"prompt", {1, 100}}}, 64, 100); }).param == "prompt");
    CHECK(error_of([] { completion_request_parse({{"prompt", {"a", "b"}}}, 64, 100); }).param == "prompt");
}

TEST_CASE("parse_json_body refuses invalid UTF-8, bad JSON and non-objects", "[server]") {
    CHECK(error_of([] { parse_json_body("{\"a\":\"\xFF\"}"); }).code == "invalid_utf8");
    CHECK(error_of([] { parse_json_body("{\"a\":"); }).code == "invalid_json");
    CHECK(error_of([] { parse_json_body("[1,2]"); }).code == "invalid_json");
    // A number beyond double's range (nlohmann's out_of_range, not a parse error) is a 400 too.
    CHECK(error_of([] { parse_json_body("{\"temperature\": 1e400}"); }).status == 400);
    CHECK(parse_json_body("{\"a\":1}")["a"] == 1);
    ApiError e(404, "gone", "p", "c");
    json j = api_error_json(e);
    CHECK(j["error"]["message"] == "gone");
    CHECK(j["error"]["type"] == "invalid_request_error");
    CHECK(j["error"]["param"] == "p");
    CHECK(j["error"]["code"] == "c");
    CHECK(api_error_json(ApiError(503, "busy"))["error"]["type"] == "server_error");
    CHECK(api_error_json(ApiError(400, "x"))["error"]["param"].is_null());
}

TEST_CASE("streamed chat chunks: role first, content deltas, finish, usage, [DONE]", "[server]") {
    GenerationOptions o;
    o.stream = true;
    o.include_usage = true;
    OpenAiResponder r(Endpoint::CHAT, o, "m", tokenizer());
    std::string body = r.start();
    body += r.on_event(token_event(100, "Hello"));
    CHECK(r.on_event(token_event(101, "")).empty());  // held back: nothing to send yet
    body += r.on_event(token_event(102, " world"));
    body += r.on_event(done_event(5, 3, FinishReason::LENGTH));
    CHECK(r.finished());
    std::vector<std::string> p = sse_payloads(body);
    REQUIRE(p.size() == 6);
    json first = json::parse(p[0]);
    CHECK(first["object"] == "chat.completion.chunk");
    CHECK(first["model"] == "m");
    CHECK(first["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
    CHECK(first["choices"][0]["delta"]["role"] == "assistant");
    CHECK(first["usage"].is_null());
    CHECK(json::parse(p[1])["choices"][0]["delta"]["content"] == "Hello");
    CHECK(json::parse(p[2])["choices"][0]["delta"]["content"] == " world");
    json fin = json::parse(p[3]);
    CHECK(fin["choices"][0]["finish_reason"] == "length");
    CHECK(fin["choices"][0]["delta"] == json::object());
    CHECK(fin["timings"]["cache_n"] == 2);
    json usage = json::parse(p[4]);
    CHECK(usage["choices"] == json::array());
    CHECK(usage["usage"]["prompt_tokens"] == 5);
    CHECK(usage["usage"]["completion_tokens"] == 3);
    CHECK(usage["usage"]["total_tokens"] == 8);
    CHECK(usage["usage"]["prompt_tokens_details"]["cached_tokens"] == 2);
    CHECK(p[5] == "[DONE]");
    for (size_t i = 0; i < 5; i++) CHECK(json::parse(p[i])["id"] == first["id"]);
}

TEST_CASE("non-streamed completion with logprobs is one object", "[server]") {
    GenerationOptions o;
    o.top_logprobs = 1;
    OpenAiResponder chat(Endpoint::CHAT, o, "m", tokenizer());
    CHECK(chat.start().empty());
    CHECK(chat.on_event(token_event(100, "Hel")).empty());
    CHECK(chat.on_event(token_event(101, "lo")).empty());
    json j = json::parse(chat.on_event(done_event(4, 2, FinishReason::STOP)));
    CHECK(j["object"] == "chat.completion");
    CHECK(j["choices"][0]["message"]["role"] == "assistant");
    CHECK(j["choices"][0]["message"]["content"] == "Hello world");
    CHECK(j["choices"][0]["finish_reason"] == "stop");
    REQUIRE(j["choices"][0]["logprobs"]["content"].size() == 2);
    json entry = j["choices"][0]["logprobs"]["content"][0];
    CHECK(entry["token"] == tokenizer().token_bytes(100));
    CHECK(entry["logprob"] == Approx(-0.5));
    CHECK(entry["top_logprobs"].size() == 2);

    OpenAiResponder text(Endpoint::COMPLETION, o, "m", tokenizer());
    text.on_event(token_event(100, "Hel"));
    json t = json::parse(text.on_event(done_event(4, 1, FinishReason::LENGTH)));
    CHECK(t["object"] == "text_completion");
    CHECK(t["id"].get<std::string>().rfind("cmpl-", 0) == 0);
    CHECK(t["choices"][0]["text"] == "Hello world");
    CHECK(t["choices"][0]["finish_reason"] == "length");
    CHECK(t["choices"][0]["logprobs"]["token_logprobs"][0] == Approx(-0.5));
    CHECK(t["choices"][0]["logprobs"]["text_offset"][0] == 0);

    TaskEvent error = TaskError{500, "boom"};
    GenerationOptions s;
    s.stream = true;
    OpenAiResponder failing(Endpoint::CHAT, s, "m", tokenizer());
    std::vector<std::string> p = sse_payloads(failing.on_event(error));
    REQUIRE(p.size() == 2);  // the error event, then [DONE]
    CHECK(json::parse(p[0])["error"]["message"] == "boom");
    CHECK(p[1] == "[DONE]");
    CHECK(failing.status() == 500);
}

TEST_CASE("the request queue bounds waiting tasks and skips cancelled ones", "[server]") {
    RequestQueue q(1);
    auto nop = [](Session&, Task&) {};
    auto a = std::make_shared<Task>(nop), b = std::make_shared<Task>(nop), c = std::make_shared<Task>(nop);
    CHECK(q.push(a));
    CHECK(q.pop() == a);     // a runs
    CHECK(q.push(b));        // b waits
    CHECK_FALSE(q.push(c));  // full
    CHECK(q.waiting() == 1);
    b->cancel();  // b's client left: its place frees up
    CHECK(q.push(c));
    std::vector<TaskEvent> events;
    REQUIRE(b->wait_events(events, std::chrono::milliseconds(0)));
    CHECK(std::holds_alternative<TaskError>(events.back()));
    q.done_running();
    CHECK(q.pop() == c);
    q.shutdown();
    CHECK(a->cancelled() == false);
    CHECK(c->cancelled());  // the running task is cancelled on shutdown
    CHECK(q.pop() == nullptr);
}
