// Tests of the prompt-file readers: every real prompt file in the shared data
// loads with `auto` (prompt counts and first prompts checked against the
// files), explicit formats, the text format, and malformed files refused
// with the file and the line or index.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "base/errors.h"
#include "profiles/prompts.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace {

fs::path prompts_dir() {
    return shared_data_dir() / "prompts";
}

// The MoeError message of parsing `text` as a file named `name`.
std::string parse_error(const std::string& text, const std::string& name, PromptFormat format = PromptFormat::AUTO) {
    try {
        prompts_parse(text, name, format);
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("every shared prompt file loads with auto", "[prompts]") {
    struct Expect {
        const char* file;
        PromptFormat format;
        size_t n_prompts;
        int n_skipped;
        const char* first;
    };
    // Counts from the files themselves: sg90k has 20 conversations that open
    // with a "system" or "gpt" turn and no human one, plus one empty prompt;
    // the answer file has one empty answer.
    const Expect expect[] = {
        {"sharegpt_v3_filtered_1000.json", PromptFormat::SHAREGPT, 1000, 0, "a. A blog is a type of website"},
        {"sharegpt_sg90k_first_sampled_sorted.json", PromptFormat::SHAREGPT, 2957, 21,
         "Below is the payment determination algorithm"},
        {"mt_bench_question.jsonl", PromptFormat::MTBENCH, 80, 0,
         "Compose an engaging travel blog post about a recent trip to Hawaii"},
        {"vicuna_bench_question.jsonl", PromptFormat::MTBENCH, 80, 0, "How can I improve my time management skills?"},
        {"arena_bench_v1_question.jsonl", PromptFormat::MTBENCH, 300, 0, "What is the  equation of straight line"},
        {"arena_hard_v0.1_question.jsonl", PromptFormat::JSONL, 500, 0, "Use ABC notation to write a melody"},
        {"arena_bench_v1_mixtral_answers.jsonl", PromptFormat::JSONL, 299, 1, " Hello there! I'm thrilled"},
    };
    size_t n_files = 0;
    for (const auto& entry : fs::directory_iterator(prompts_dir())) n_files += entry.is_regular_file();
    REQUIRE(n_files == std::size(expect));  // a new shared file needs a line here
    for (const Expect& e : expect) {
        INFO(e.file);
        PromptSet set = prompts_read(prompts_dir() / e.file);
        REQUIRE(set.format == e.format);
        REQUIRE(set.prompts.size() == e.n_prompts);
        REQUIRE(set.n_skipped == e.n_skipped);
        REQUIRE(set.prompts[0].rfind(e.first, 0) == 0);
    }
    // MT-Bench: the first of its two turns.
    PromptSet mt = prompts_read(prompts_dir() / "mt_bench_question.jsonl");
    REQUIRE(mt.prompts[0].find("Rewrite your previous response") == std::string::npos);
    // The generic reader takes "turns"[0] too.
    PromptSet as_jsonl = prompts_read(prompts_dir() / "mt_bench_question.jsonl", PromptFormat::JSONL);
    REQUIRE(as_jsonl.format == PromptFormat::JSONL);
    REQUIRE(as_jsonl.prompts == mt.prompts);
}

TEST_CASE("prompt format names and the text format", "[prompts]") {
    for (PromptFormat f :
         {PromptFormat::AUTO, PromptFormat::SHAREGPT, PromptFormat::MTBENCH, PromptFormat::JSONL, PromptFormat::TEXT})
        REQUIRE(prompt_format_parse(prompt_format_name(f)) == f);
    REQUIRE_FALSE(prompt_format_parse("csv"));

    // Paragraphs separated by blank lines; a prompt keeps its inner line breaks.
    PromptSet t = prompts_parse("First line\nsame prompt\n\n\n  \r\nSecond\r\n\nThird", "p.txt", PromptFormat::AUTO);
    REQUIRE(t.format == PromptFormat::TEXT);
    REQUIRE(t.prompts == std::vector<std::string>{"First line\nsame prompt", "Second", "Third"});
    // No extension: decided by the first character.
    REQUIRE(
        prompts_parse("[{\"conversations\":[{\"from\":\"user\",\"value\":\"hi\"}]}]", "p", PromptFormat::AUTO).format ==
        PromptFormat::SHAREGPT);
    REQUIRE(prompts_parse("{\"prompt\":\"hi\",\"turns\":[\"x\"]}\n", "p", PromptFormat::AUTO).prompts ==
            std::vector<std::string>{"hi"});
    REQUIRE(prompts_parse("hello [world]", "p", PromptFormat::AUTO).format == PromptFormat::TEXT);
    // ShareGPT: the first human turn, even after a system turn.
    PromptSet s = prompts_parse(
        R"([{"conversations":[{"from":"system","value":"be brief"},{"from":"human","value":"Q1"},{"from":"human","value":"Q2"}]},
            {"conversations":[{"from":"gpt","value":"answer only"}]}])",
        "p.json", PromptFormat::AUTO);
    REQUIRE(s.prompts == std::vector<std::string>{"Q1"});
    REQUIRE(s.n_skipped == 1);
}

TEST_CASE("malformed prompt files are refused naming the file and the entry", "[prompts]") {
    auto has = [](const std::string& msg, const std::string& part) {
        INFO(msg);
        REQUIRE(msg.find(part) != std::string::npos);
    };
    has(parse_error("[{\"conversations\": [", "s.json"), "s.json: not JSON (sharegpt format)");
    has(parse_error("{\"a\": 1}", "s.json"), "s.json: sharegpt format: the top level must be an array");
    has(parse_error(R"([{"conversations":[{"from":"human","value":"ok"}]}, {"id":"x"}])", "s.json"),
        "s.json: [1]: needs a \"conversations\" array");
    has(parse_error(R"([{"conversations":[{"from":"human","value":"ok"}, {"from":"gpt"}]}])", "s.json"),
        "s.json: [0].conversations[1]: needs string \"from\" and \"value\"");
    has(parse_error("{\"turns\":[\"a\"]}\n\n{\"turns\":[\"b\"]\n", "m.jsonl"), "m.jsonl:3: not JSON (mtbench format)");
    has(parse_error("{\"turns\":[\"a\"]}\n{\"turns\":[]}\n", "m.jsonl"),
        "m.jsonl:2: needs \"turns\": a non-empty array of strings");
    has(parse_error("{\"prompt\":\"a\"}\n[1]\n", "j.jsonl"),
        "j.jsonl:2: jsonl format: each line must be a JSON object");
    has(parse_error("{\"prompt\":\"a\"}\n{\"prompt\":3}\n", "j.jsonl"),
        "j.jsonl:2: none of \"prompt\", \"text\", \"question\", \"turns\"[0], \"choices\"[0].\"turns\"[0] is a string");
    has(parse_error("\n  \n", "t.txt"), "t.txt: no prompts found (read as text");
    has(parse_error("[]", "s.json"), "s.json: no prompts found (read as sharegpt, 0 entries");
    has(parse_error("{\"prompt\":\"a\"}", "x.txt", PromptFormat::SHAREGPT), "x.txt: sharegpt format");
    fs::path missing = test_temp_dir("prompts-missing") / "none.json";
    REQUIRE_THROWS_WITH(prompts_read(missing), missing.string() + ": cannot open file (No such file or directory)");
}
