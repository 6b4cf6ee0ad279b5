// Beam search over real HTTP: beam_width / length_penalty / n on both
// completion endpoints, n choices best first, width 1 equal to greedy, the
// streamed form (the whole hypothesis as one delta per choice at the end),
// the beam timings extension and the beam metrics.
#include <catch2/catch.hpp>

#include "server_fixture.h"
#include "support/test_support.h"

using json = nlohmann::json;

namespace {

json chat_body(json extra) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Tell me about experts."}}}},
                 {"max_tokens", 8},
                 {"ignore_eos", true},
                 {"cache_prompt", false}};
    body.update(extra);
    return body;
}

std::vector<json> sse_chunks(const std::string& body) {
    std::vector<json> out;
    size_t pos = 0;
    while (pos < body.size()) {
        REQUIRE(body.compare(pos, 6, "data: ") == 0);
        size_t end = body.find("\n\n", pos);
        REQUIRE(end != std::string::npos);
        std::string data = body.substr(pos + 6, end - pos - 6);
        out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
        pos = end + 2;
    }
    return out;
}

}  // namespace

TEST_CASE("beam search over HTTP: n best choices, greedy at width 1, timings and metrics", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();

    JsonReply r = post_json(c, "/v1/chat/completions", chat_body({{"beam_width", 4}, {"n", 3}}));
    INFO(r.raw);
    REQUIRE(r.status == 200);
    const json& choices = r.body["choices"];
    REQUIRE(choices.size() == 3);
    const json& beam = r.body["timings"]["beam"];
    CHECK(beam["width"] == 4);
    CHECK(beam["steps"] == 7);  // 8 tokens: one forward pass per token but the last
    CHECK(beam["beam_tokens"].get<int>() <= 4 * 7);
    REQUIRE(beam["scores"].size() == 3);
    for (int i = 0; i < 3; i++) {
        CHECK(choices[i]["index"] == i);
        CHECK(choices[i]["message"]["role"] == "assistant");
        CHECK(choices[i]["finish_reason"] == "length");
        CHECK(choices[i]["logprobs"].is_null());
        // length_penalty 1 (default): the score is the mean log-probability.
        CHECK(beam["scores"][i].get<double>() == Approx(beam["logprobs"][i].get<double>() / 8));
        if (i > 0) CHECK(beam["scores"][i] <= beam["scores"][i - 1]);
    }
    CHECK(r.body["usage"]["completion_tokens"] == 3 * 8);
    const json& load = beam["expert_tokens_per_step"];
    CHECK(load["per_step_max"].size() == 7);
    CHECK(load["max"].get<int>() <= 4);
    CHECK(load["max"].get<int>() >= 2);  // 4 beams x top-2 of 4 experts share experts
    CHECK(load["mean"].get<double>() >= 1.0);

    // Width 1 is greedy decoding.
    JsonReply greedy = post_json(c, "/v1/chat/completions", chat_body({{"temperature", 0}}));
    JsonReply width1 = post_json(c, "/v1/chat/completions", chat_body({{"beam_width", 1}}));
    REQUIRE(width1.status == 200);
    CHECK(width1.body["choices"][0]["message"]["content"] == greedy.body["choices"][0]["message"]["content"]);

    // Text completions take the same fields.
    JsonReply t = post_json(c, "/v1/completions",
                            {{"prompt", "Once upon a time"},
                             {"max_tokens", 6},
                             {"beam_width", 3},
                             {"n", 2},
                             {"length_penalty", 0},
                             {"ignore_eos", true}});
    INFO(t.raw);
    REQUIRE(t.status == 200);
    REQUIRE(t.body["choices"].size() == 2);
    CHECK(t.body["object"] == "text_completion");
    CHECK(t.body["choices"][1]["index"] == 1);
    CHECK(t.body["choices"][0]["text"].is_string());
    CHECK(t.body["timings"]["beam"]["length_penalty"] == 0.0);
    // Penalty 0: the score is the plain sum of log-probabilities.
    CHECK(t.body["timings"]["beam"]["scores"][0] == t.body["timings"]["beam"]["logprobs"][0]);

    CHECK(metric_value(c, "moe_beam_searches_total") == 3);
    CHECK(metric_value(c, "moe_beam_steps_total") == 7 + 7 + 5);
    CHECK(metric_value(c, "moe_beam_expert_tokens_count") > 0);
    CHECK(metric_value(c, "moe_beam_expert_tokens_bucket{le=\"+Inf\"}") ==
          metric_value(c, "moe_beam_expert_tokens_count"));
    CHECK(metric_value(c, "moe_beam_last_expert_tokens_max") >= 1);
}

TEST_CASE("streamed beam search: one delta per choice with the whole hypothesis, then finish and [DONE]", "[server]") {
    ServerProcess server(test_model_dir("tiny"));
    auto c = server.client();
    json base = chat_body({{"beam_width", 3}, {"n", 2}});
    JsonReply plain = post_json(c, "/v1/chat/completions", base);
    REQUIRE(plain.status == 200);

    json body = base;
    body.update({{"stream", true}, {"stream_options", {{"include_usage", true}}}});
    auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    std::vector<json> chunks = sse_chunks(res->body);
    INFO(res->body);
    // role x 2, content x 2, finish x 2, usage, [DONE]
    REQUIRE(chunks.size() == 8);
    CHECK(chunks.back() == "[DONE]");
    for (int i = 0; i < 2; i++) {
        const json& role = chunks[i]["choices"][0];
        CHECK(role["index"] == i);
        CHECK(role["delta"]["role"] == "assistant");
        const json& content = chunks[2 + i]["choices"][0];
        CHECK(content["index"] == i);
        CHECK(content["delta"]["content"] == plain.body["choices"][i]["message"]["content"]);
        CHECK(content["finish_reason"].is_null());
        const json& finish = chunks[4 + i]["choices"][0];
        CHECK(finish["index"] == i);
        CHECK(finish["finish_reason"] == "length");
    }
    CHECK(chunks[5]["timings"]["beam"]["width"] == 3);
    CHECK(chunks[6]["choices"] == json::array());
    CHECK(chunks[6]["usage"]["completion_tokens"] == 16);
}
