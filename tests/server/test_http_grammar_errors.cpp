// Grammars and schemas that parse but cannot be matched (too ambiguous, an
// end token asked for as a <[piece]>) over real HTTP: each is the client's error, 400 invalid_request_error naming the
// field, streamed or not (the grammar is matched from its start before the
// request is queued, so a stream gets the 400 before any 200; one found too
// ambiguous only while decoding ends a stream with that error as its last
// event), and the server goes on serving.
#include <catch2/catch.hpp>
#include <cstdio>

#include "server_fixture.h"
#include "support/test_support.h"

using json = nlohmann::json;

namespace {

// The nested repetitions expand to a million parses at the first character.
const char* NESTED_GRAMMAR = R"(root ::= (("a"{0,1000}){0,1000}))";
// </s> ends the generation: no text can ever match it.
const char* END_TOKEN_GRAMMAR = R"(root ::= <[</s>]> "a")";
// 5000 strings: 5000 parses alive at the first character.
json enum_schema() {
    json values = json::array();
    char value[16];
    for (int i = 0; i < 5000; i++) {
        std::snprintf(value, sizeof value, "v%d", i);
        values.push_back(value);
    }
    return {{"enum", values}};
}
// Only x's can be written, and the parses triple with each one: too
// ambiguous after a few tokens, not at the start.
const char* LATE_GRAMMAR = "root ::= a\na ::= \"x\" | \"x\" a \"x\" | \"x\" a \"x\" | \"x\" a \"x\"";

void check_refused(const JsonReply& r, const std::string& param) {
    INFO(r.raw.substr(0, 400));
    CHECK(r.status == 400);
    REQUIRE(r.body.is_object());
    REQUIRE(r.body.contains("error"));
    CHECK(r.body["error"]["type"] == "invalid_request_error");
    CHECK(r.body["error"]["param"] == param);
    CHECK(r.body["error"]["code"] == "invalid_value");
}

// A stream whose grammar turned out too ambiguous while decoding: its
// last event is the 400 error.
void check_stream_ended(const JsonReply& r, const std::string& param) {
    INFO(r.raw.substr(0, 400));
    CHECK(r.status == 200);
    const size_t last = r.raw.rfind("data: {");
    REQUIRE(last != std::string::npos);
    const json event = json::parse(r.raw.substr(last + 6, r.raw.find('\n', last) - last - 6));
    CHECK(event["error"]["type"] == "invalid_request_error");
    CHECK(event["error"]["param"] == param);
    CHECK(event["error"]["code"] == "invalid_value");
}

}  // namespace

TEST_CASE("grammars and schemas that cannot be matched are 400 naming the field, streamed or not", "[server]") {
    ServerProcess server(test_model_dir("tiny"), {"--ctx", "256"});
    httplib::Client c = server.client();
    const json user = json::array({{{"role", "user"}, {"content", "hi"}}});
    for (bool stream : {false, true}) {
        INFO("stream " << stream);
        for (const char* grammar : {NESTED_GRAMMAR, END_TOKEN_GRAMMAR}) {
            INFO(grammar);
            check_refused(post_json(c, "/v1/completions",
                                    {{"prompt", "x"}, {"grammar", grammar}, {"max_tokens", 8}, {"stream", stream}}),
                          "grammar");
            check_refused(post_json(c, "/v1/chat/completions",
                                    {{"messages", user}, {"grammar", grammar}, {"max_tokens", 8}, {"stream", stream}}),
                          "grammar");
        }
        const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", enum_schema()}}}};
        check_refused(post_json(c, "/v1/chat/completions",
                                {{"messages", user},
                                 {"response_format", format},
                                 {"max_tokens", 16},
                                 {"temperature", 0},
                                 {"stream", stream}}),
                      "response_format");
        CHECK(get_json(c, "/health").status == 200);
    }
    // Too ambiguous only after a few tokens: a 400 all the same; a stream,
    // whose 200 is out, ends with that error as its last event.
    const json late = {{"prompt", "x"}, {"grammar", LATE_GRAMMAR}, {"max_tokens", 64}, {"ignore_eos", true}};
    check_refused(post_json(c, "/v1/completions", late), "grammar");
    json late_stream = late;
    late_stream["stream"] = true;
    check_stream_ended(post_json(c, "/v1/completions", late_stream), "grammar");
    // With ignore_eos </s> is no end token: the same grammar is a plain one.
    JsonReply ok = post_json(c, "/v1/completions",
                             {{"prompt", "x"}, {"grammar", END_TOKEN_GRAMMAR}, {"max_tokens", 4}, {"ignore_eos", true}});
    INFO(ok.raw);
    CHECK(ok.status == 200);
    CHECK(metric_value(c, "moe_http_requests_total{route=\"/v1/completions\",status=\"500\"}") <= 0);
    CHECK(metric_value(c, "moe_http_requests_total{route=\"/v1/chat/completions\",status=\"500\"}") <= 0);
}
