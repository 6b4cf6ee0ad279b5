// Malformed requests over real HTTP: each gets OpenAI's error shape
// {"error":{"message","type","param","code"}} with the fitting status, and
// the server goes on serving after every one.
#include <catch2/catch.hpp>

#include "server_fixture.h"
#include "support/test_support.h"

using json = nlohmann::json;

namespace {

struct BadRequest {
    const char* name;
    const char* method;  // "POST" or "GET"
    const char* path;
    std::string body;  // sent as is (POST)
    int status;
    const char* param;  // expected error.param; nullptr: must be null
    const char* code;   // expected error.code; nullptr: not checked
};

const char* CTX = "128";  // the server's --ctx in this file

std::string chat_with(const std::string& fields) {
    return R"({"messages":[{"role":"user","content":"hi"}],)" + fields + "}";
}

std::vector<BadRequest> bad_requests() {
    const std::string long_text(4000, 'x');
    std::string spaced;
    for (int i = 0; i < 300; i++) spaced += "word ";
    return {
        {"malformed JSON", "POST", "/v1/chat/completions", R"({"messages": [)", 400, nullptr, "invalid_json"},
        {"empty body", "POST", "/v1/chat/completions", "", 400, nullptr, "invalid_json"},
        {"body is an array", "POST", "/v1/chat/completions", "[1,2,3]", 400, nullptr, "invalid_json"},
        {"body is a string", "POST", "/v1/chat/completions", "\"hello\"", 400, nullptr, "invalid_json"},
        {"invalid UTF-8 in a string", "POST", "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"\xC3\x28\"}]}", 400, nullptr, "invalid_utf8"},
        {"lone surrogate escape", "POST", "/v1/chat/completions",
         R"({"messages":[{"role":"user","content":"\ud800"}]})", 400, nullptr, "invalid_json"},
        {"missing messages", "POST", "/v1/chat/completions", R"({"model":"m"})", 400, "messages",
         "missing_required_parameter"},
        {"messages not an array", "POST", "/v1/chat/completions", R"({"messages":"hi"})", 400, "messages",
         "invalid_type"},
        {"empty messages", "POST", "/v1/chat/completions", R"({"messages":[]})", 400, "messages", "empty_array"},
        {"message not an object", "POST", "/v1/chat/completions", R"({"messages":["hi"]})", 400, "messages[0]",
         "invalid_type"},
        {"missing role", "POST", "/v1/chat/completions", R"({"messages":[{"content":"hi"}]})", 400, "messages[0].role",
         "missing_required_parameter"},
        {"unknown role", "POST", "/v1/chat/completions", R"({"messages":[{"role":"wizard","content":"hi"}]})", 400,
         "messages[0].role", "invalid_value"},
        {"role not a string", "POST", "/v1/chat/completions", R"({"messages":[{"role":7,"content":"hi"}]})", 400,
         "messages[0].role", "invalid_type"},
        {"missing user content", "POST", "/v1/chat/completions", R"({"messages":[{"role":"user"}]})", 400,
         "messages[0].content", "missing_required_parameter"},
        {"content a number", "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":5}]})", 400,
         "messages[0].content", "invalid_type"},
        {"image content part", "POST", "/v1/chat/completions",
         R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})", 400,
         "messages[0].content[0].type", "invalid_value"},
        {"bad role order", "POST", "/v1/chat/completions",
         R"({"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"b"}]})", 400, "messages",
         "invalid_value"},
        {"prompt longer than the context", "POST", "/v1/chat/completions",
         R"({"messages":[{"role":"user","content":")" + spaced + R"("}]})", 400, "messages", "context_length_exceeded"},
        {"max_tokens zero", "POST", "/v1/chat/completions", chat_with(R"("max_tokens":0)"), 400, "max_tokens",
         "invalid_value"},
        {"max_tokens negative", "POST", "/v1/chat/completions", chat_with(R"("max_tokens":-5)"), 400, "max_tokens",
         "invalid_value"},
        {"max_tokens above the context", "POST", "/v1/chat/completions", chat_with(R"("max_tokens":129)"), 400,
         "max_tokens", "invalid_value"},
        {"max_tokens a string", "POST", "/v1/chat/completions", chat_with(R"("max_tokens":"10")"), 400, "max_tokens",
         "invalid_type"},
        {"max_tokens a decimal", "POST", "/v1/chat/completions", chat_with(R"("max_tokens":2.5)"), 400, "max_tokens",
         "invalid_type"},
        {"max_completion_tokens zero", "POST", "/v1/chat/completions", chat_with(R"("max_completion_tokens":0)"), 400,
         "max_completion_tokens", "invalid_value"},
        {"n = 2", "POST", "/v1/chat/completions", chat_with(R"("n":2)"), 400, "n", "invalid_value"},
        {"n = 0", "POST", "/v1/chat/completions", chat_with(R"("n":0)"), 400, "n", "invalid_value"},
        {"beam_width zero", "POST", "/v1/chat/completions", chat_with(R"("beam_width":0)"), 400, "beam_width",
         "invalid_value"},
        {"beam_width above 32", "POST", "/v1/completions", R"({"prompt":"a","beam_width":33})", 400, "beam_width",
         "invalid_value"},
        {"beam_width a string", "POST", "/v1/chat/completions", chat_with(R"("beam_width":"4")"), 400, "beam_width",
         "invalid_type"},
        {"n above beam_width", "POST", "/v1/chat/completions", chat_with(R"("beam_width":2,"n":3)"), 400, "n",
         "invalid_value"},
        {"negative length_penalty", "POST", "/v1/completions", R"({"prompt":"a","beam_width":2,"length_penalty":-1})",
         400, "length_penalty", "invalid_value"},
        {"length_penalty without beams", "POST", "/v1/chat/completions", chat_with(R"("length_penalty":1)"), 400,
         "length_penalty", "invalid_value"},
        {"temperature with beams", "POST", "/v1/chat/completions", chat_with(R"("beam_width":2,"temperature":0.8)"),
         400, "temperature", "invalid_value"},
        {"logprobs with beams", "POST", "/v1/completions", R"({"prompt":"a","beam_width":2,"logprobs":2})", 400,
         "logprobs", "unsupported_parameter"},
        {"temperature a string", "POST", "/v1/chat/completions", chat_with(R"("temperature":"hot")"), 400,
         "temperature", "invalid_type"},
        {"temperature above 2", "POST", "/v1/chat/completions", chat_with(R"("temperature":2.5)"), 400, "temperature",
         "invalid_value"},
        {"top_p above 1", "POST", "/v1/chat/completions", chat_with(R"("top_p":1.5)"), 400, "top_p", "invalid_value"},
        {"presence_penalty below -2", "POST", "/v1/chat/completions", chat_with(R"("presence_penalty":-3)"), 400,
         "presence_penalty", "invalid_value"},
        {"frequency_penalty a bool", "POST", "/v1/chat/completions", chat_with(R"("frequency_penalty":true)"), 400,
         "frequency_penalty", "invalid_type"},
        {"top_k negative", "POST", "/v1/chat/completions", chat_with(R"("top_k":-1)"), 400, "top_k", "invalid_value"},
        {"min_p above 1", "POST", "/v1/chat/completions", chat_with(R"("min_p":2)"), 400, "min_p", "invalid_value"},
        {"repetition_penalty zero", "POST", "/v1/chat/completions", chat_with(R"("repetition_penalty":0)"), 400,
         "repetition_penalty", "invalid_value"},
        {"seed a decimal", "POST", "/v1/chat/completions", chat_with(R"("seed":1.5)"), 400, "seed", "invalid_type"},
        {"stream a string", "POST", "/v1/chat/completions", chat_with(R"("stream":"yes")"), 400, "stream",
         "invalid_type"},
        {"stream_options without stream", "POST", "/v1/chat/completions",
         chat_with(R"("stream_options":{"include_usage":true})"), 400, "stream_options", "invalid_value"},
        {"stop a number", "POST", "/v1/chat/completions", chat_with(R"("stop":3)"), 400, "stop", "invalid_type"},
        {"five stop strings", "POST", "/v1/chat/completions", chat_with(R"("stop":["a","b","c","d","e"])"), 400, "stop",
         "invalid_value"},
        {"stop array with a number", "POST", "/v1/chat/completions", chat_with(R"("stop":["a",1])"), 400, "stop[1]",
         "invalid_type"},
        {"top_logprobs without logprobs", "POST", "/v1/chat/completions", chat_with(R"("top_logprobs":2)"), 400,
         "top_logprobs", "invalid_value"},
        {"top_logprobs above 20", "POST", "/v1/chat/completions", chat_with(R"("logprobs":true,"top_logprobs":21)"),
         400, "top_logprobs", "invalid_value"},
        {"model not a string", "POST", "/v1/chat/completions", chat_with(R"("model":42)"), 400, "model",
         "invalid_type"},
        // tools reach a Jinja template (test_http_templates.cpp); the legacy functions field does not.
        {"functions requested", "POST", "/v1/chat/completions", chat_with(R"("functions":[{"name":"f"}])"), 400,
         "functions", "unsupported_parameter"},
        {"tools not an array", "POST", "/v1/chat/completions", chat_with(R"("tools":{"type":"function"})"), 400,
         "tools", "invalid_type"},
        {"tools in a completion", "POST", "/v1/completions",
         R"({"prompt":"x","tools":[{"type":"function","function":{"name":"f"}}]})", 400, "tools",
         "unsupported_parameter"},
        {"unknown response_format type", "POST", "/v1/chat/completions",
         chat_with(R"("response_format":{"type":"yaml"})"), 400, "response_format.type", "invalid_value"},
        {"json_schema without its schema", "POST", "/v1/chat/completions",
         chat_with(R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})"), 400,
         "response_format.json_schema.schema", "missing_required_parameter"},
        {"grammar not a string", "POST", "/v1/completions", R"({"prompt":"x","grammar":5})", 400, "grammar",
         "invalid_type"},
        {"grammar and response_format", "POST", "/v1/completions",
         R"({"prompt":"x","grammar":"root ::= \"a\"","response_format":{"type":"json_object"}})", 400, "grammar",
         "invalid_value"},
        {"grammar with beams", "POST", "/v1/completions",
         R"({"prompt":"x","grammar":"root ::= \"a\"","beam_width":2})", 400, "beam_width", "unsupported_parameter"},
        {"malformed grammar", "POST", "/v1/completions", R"({"prompt":"x","grammar":"root ::= (\"a\""})", 400,
         "grammar", "invalid_value"},
        {"completion without prompt", "POST", "/v1/completions", R"({"max_tokens":3})", 400, "prompt",
         "missing_required_parameter"},
        {"completion prompt an object", "POST", "/v1/completions", R"({"prompt":{"a":1}})", 400, "prompt",
         "invalid_type"},
        {"completion token out of vocabulary", "POST", "/v1/completions", R"({"prompt":[1, 999999]})", 400, "prompt",
         "invalid_value"},
        {"completion several prompts", "POST", "/v1/completions", R"({"prompt":["a","b"]})", 400, "prompt",
         "invalid_value"},
        {"completion empty token list", "POST", "/v1/completions", R"({"prompt":[]})", 400, "prompt", "empty_array"},
        {"completion prompt too long", "POST", "/v1/completions", R"({"prompt":")" + spaced + R"("})", 400, "prompt",
         "context_length_exceeded"},
        {"completion echo", "POST", "/v1/completions", R"({"prompt":"a","echo":true})", 400, "echo",
         "unsupported_parameter"},
        {"completion logprobs above 5", "POST", "/v1/completions", R"({"prompt":"a","logprobs":6})", 400, "logprobs",
         "invalid_value"},
        {"tokenize without content", "POST", "/tokenize", R"({"text":"a"})", 400, "content",
         "missing_required_parameter"},
        {"tokenize content a number", "POST", "/tokenize", R"({"content":1})", 400, "content", "invalid_type"},
        {"detokenize without tokens", "POST", "/detokenize", R"({})", 400, "tokens", "missing_required_parameter"},
        {"detokenize a string token", "POST", "/detokenize", R"({"tokens":["a"]})", 400, "tokens[0]", "invalid_type"},
        {"detokenize negative id", "POST", "/detokenize", R"({"tokens":[-1]})", 400, "tokens", "invalid_value"},
        {"unknown route", "POST", "/v1/embeddings", R"({"input":"a"})", 404, nullptr, "unknown_url"},
        {"unknown GET route", "GET", "/v2/models", "", 404, nullptr, "unknown_url"},
        {"wrong method on a route", "GET", "/v1/chat/completions", "", 404, nullptr, "unknown_url"},
    };
}

}  // namespace

TEST_CASE("malformed requests each get an OpenAI-style error and the server keeps serving", "[server]") {
    ServerProcess server(test_model_dir("tiny"), {"--ctx", CTX});
    auto c = server.client();
    std::vector<BadRequest> cases = bad_requests();
    REQUIRE(cases.size() >= 30);
    for (const BadRequest& bad : cases) {
        INFO("case: " << bad.name);
        JsonReply r = std::string(bad.method) == "GET" ? get_json(c, bad.path) : post_raw(c, bad.path, bad.body);
        INFO("reply: " << r.raw);
        CHECK(r.status == bad.status);
        CHECK(r.headers.find("Content-Type")->second.rfind("application/json", 0) == 0);
        REQUIRE(r.body.is_object());
        REQUIRE(r.body.contains("error"));
        const json& e = r.body["error"];
        CHECK(e.size() == 4);
        CHECK(e["message"].is_string());
        CHECK_FALSE(e["message"].get<std::string>().empty());
        CHECK(e["type"] == "invalid_request_error");
        if (bad.param)
            CHECK(e["param"] == bad.param);
        else
            CHECK(e["param"].is_null());
        if (bad.code) CHECK(e["code"] == bad.code);
        CHECK(get_json(c, "/health").status == 200);
    }
    // Still serving real requests after all of them.
    JsonReply ok = post_json(c, "/v1/chat/completions",
                             {{"messages", {{{"role", "user"}, {"content", "still there?"}}}}, {"max_tokens", 3}});
    CHECK(ok.status == 200);
    CHECK(metric_value(c, "moe_http_requests_total{route=\"/v1/chat/completions\",status=\"400\"}") > 30);
}

TEST_CASE("a body over the size limit gets 413 in OpenAI's shape", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    std::string huge = R"({"messages":[{"role":"user","content":")" + std::string(9u << 20, 'a') + R"("}]})";
    JsonReply r = post_raw(c, "/v1/chat/completions", huge);
    INFO(r.raw.substr(0, 300));
    CHECK(r.status == 413);
    REQUIRE(r.body.is_object());
    CHECK(r.body["error"]["code"] == "request_too_large");
    CHECK(r.body["error"]["type"] == "invalid_request_error");
    auto c2 = server.client();
    JsonReply ok = post_json(c2, "/v1/chat/completions",
                             {{"messages", {{{"role", "user"}, {"content", "small"}}}}, {"max_tokens", 2}});
    CHECK(ok.status == 200);
}
