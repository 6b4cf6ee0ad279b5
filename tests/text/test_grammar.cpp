// Tests of the GBNF grammar engine (engine/text/grammar.*): the parser's
// errors, matching whole texts, and GrammarMatcher::mask() against a
// brute-force check of every token (allows(), which advances the stacks over
// the token's bytes) along seeded random walks, with the Mixtral tokenizer
// (byte-fallback SentencePiece) and a small byte-level BPE.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <cctype>
#include <cmath>
#include <random>

#include "engine/text/grammar.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/tokenizer.h"
#include "test_support.h"

namespace {

const Tokenizer& mistral() {
    static const Tokenizer tok = Tokenizer::load(shared_data_dir() / "tokenizers/mistral-v1.model");
    return tok;
}

std::shared_ptr<const GrammarVocab> mistral_vocab() {
    static const auto vocab = std::make_shared<const GrammarVocab>(mistral());
    return vocab;
}

const std::string JSON_GBNF = R"(# JSON, whitespace bounded
root   ::= ws value
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}" ws
array  ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" char* "\"" ws
char   ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,4} )? ws
ws     ::= [ \t\n]{0,20}
)";

std::string parse_error(std::string_view gbnf) {
    return moe_error_of([&] { Grammar::parse(gbnf, mistral_vocab()); });
}

// Feeds `text` as Mistral tokens (no dummy prefix); false when a token is refused.
bool feed(GrammarMatcher& m, std::string_view text) {
    for (int id : mistral().encode(text, false)) {
        if (!m.allows(id)) return false;
        m.accept(id);
    }
    return true;
}

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
    const int eos[] = {mistral().eos_id()};
    GrammarMatcher m(g, eos, false);
    return feed(m, text) && m.can_end();
}

// Random walks: at every step the mask must equal allows() for every id;
// then a random allowed token is taken. Each walk starts after one of
// `prefixes` (texts fed as tokens; a walk per prefix and round). Returns the
// number of steps.
int random_walks(const std::shared_ptr<const Grammar>& g, const std::vector<int>& ends, int walks, int steps,
                 bool strip_first, const std::vector<std::string>& prefixes = {""}) {
    const Tokenizer& tok = g->vocab().tokenizer();
    const int n = g->vocab().vocab_size();
    std::mt19937 rng(1234);
    std::vector<float> logits(static_cast<size_t>(n));
    int total = 0;
    for (int w = 0; w < walks * static_cast<int>(prefixes.size()); w++) {
        GrammarMatcher m(g, ends, strip_first);
        for (int id : tok.encode(prefixes[static_cast<size_t>(w) % prefixes.size()], false)) m.accept(id);
        for (int s = 0; s < steps; s++) {
            std::fill(logits.begin(), logits.end(), 0.0f);
            m.mask(logits.data());
            std::vector<int> allowed;
            for (int id = 0; id < n; id++) {
                const bool in_mask = !std::isinf(logits[static_cast<size_t>(id)]);
                if (in_mask != m.allows(id)) {
                    FAIL("walk " << w << " step " << s << ": token " << id << " '" << tok.id_to_piece(id) << "' mask "
                                 << in_mask << ", brute force " << !in_mask);
                }
                if (in_mask) allowed.push_back(id);
            }
            REQUIRE(!allowed.empty());
            total++;
            // The picks among any token, one-byte ones, ASCII punctuation
            // and closing punctuation, so walks leave strings and close
            // brackets; an end token one time in ten.
            std::vector<int> pools[4];
            for (int id : allowed) {
                if (std::find(ends.begin(), ends.end(), id) != ends.end()) continue;
                const std::string b = tok.token_bytes(id);
                pools[0].push_back(id);
                if (b.size() <= 1) pools[1].push_back(id);
                if (std::all_of(b.begin(), b.end(), [](char c) { return c > 0 && !std::isalnum(c); }))
                    pools[2].push_back(id);
                if (std::string_view("\"]}),:;").find(b[0]) != std::string_view::npos) pools[3].push_back(id);
            }
            const auto& pool = pools[rng() % 4];
            const auto& from = pool.empty() ? pools[0] : pool;
            const int pick = from.empty() || rng() % 10 == 0
                                 ? allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)]
                                 : from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
            if (std::find(ends.begin(), ends.end(), pick) != ends.end()) {
                REQUIRE(m.can_end());
                break;
            }
            m.accept(pick);
        }
    }
    return total;
}

}  // namespace

TEST_CASE("grammar: parse errors name line and column", "[grammar]") {
    CHECK(parse_error("root ::= \"a\"\nroot ::= \"b\"") == "grammar: line 2, column 1: duplicate rule 'root'");
    CHECK(parse_error("root ::= value\n") == "grammar: line 1, column 10: undefined rule 'value'");
    CHECK(parse_error("item ::= \"a\"") == "grammar: line 1, column 13: no rule 'root'");
    CHECK(parse_error("") == "grammar: line 1, column 1: no rule 'root'");
    CHECK(parse_error("root = \"a\"") == "grammar: line 1, column 6: expected '::='");
    CHECK(parse_error("root ::= \"abc") == "grammar: line 1, column 10: unterminated literal");
    CHECK(parse_error("root ::= [a-z") == "grammar: line 1, column 10: unterminated character class");
    CHECK(parse_error("root ::= [z-a]") == "grammar: line 1, column 11: character range out of order");
    CHECK(parse_error("root ::= \"\\q\"") == "grammar: line 1, column 11: unknown escape");
    CHECK(parse_error("root ::= \"\\x4\"") == "grammar: line 1, column 14: expected 2 hex digits");
    CHECK(parse_error("root ::= \"\\U00110000\"") ==
          "grammar: line 1, column 11: escape is not a Unicode scalar value");
    CHECK(parse_error("root ::= (\"a\" | \"b\"") == "grammar: line 1, column 20: expected ')'");
    CHECK(parse_error("root ::= * \"a\"") == "grammar: line 1, column 10: '*' follows nothing");
    CHECK(parse_error("root ::= \"a\" )") ==
          "grammar: line 1, column 14: expected a newline or the end of the grammar");
    CHECK(parse_error("root ::= \"a\"{3,2}") == "grammar: line 1, column 13: repetition bounds out of order");
    CHECK(parse_error("root ::= \"a\"{1001}") == "grammar: line 1, column 14: repetition bound past 1000");
    CHECK(parse_error("root ::= \"a\"{2,5") == "grammar: line 1, column 17: expected '}'");
    CHECK(parse_error("root ::= <[no-such-piece]>") ==
          "grammar: line 1, column 10: unknown token piece 'no-such-piece'");
    CHECK(parse_error("root ::= <[<s>") == "grammar: line 1, column 10: unterminated token piece '<['");
    CHECK(parse_error("root ::= \"\xff\"") == "grammar: line 1, column 11: invalid UTF-8");
    CHECK(parse_error("root ::= _x") == "grammar: line 1, column 10: expected a newline or the end of the grammar");
    // The source name leads the message.
    CHECK(moe_error_of([] { Grammar::parse("x ::= \"a\"", mistral_vocab(), "response_format"); }) ==
          "response_format: line 1, column 10: no rule 'root'");
}

TEST_CASE("grammar: left recursion is refused, direct, indirect and through nullable prefixes", "[grammar]") {
    CHECK(parse_error("root ::= root \"a\" | \"b\"") == "grammar: line 1, column 1: left recursion: root -> root");
    CHECK(parse_error("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"") ==
          "grammar: line 2, column 1: left recursion: a -> b -> a");
    CHECK(parse_error("root ::= opt root \"x\" | \"y\"\nopt ::= \"o\"?") ==
          "grammar: line 1, column 1: left recursion: root -> root");
    CHECK(parse_error("root ::= (\"a\"?)*") == "grammar: line 1, column 16: a repeated item can match nothing");
    CHECK(parse_error("root ::= x+\nx ::= \"a\"*") == "grammar: line 1, column 11: a repeated item can match nothing");
    // Right recursion and recursion after a terminal are fine.
    CHECK(parse_error("root ::= \"a\" root | \"b\"\nx ::= \"(\" x \")\" | \"\"") == "");
}

TEST_CASE("grammar: limits on nesting and size", "[grammar]") {
    CHECK(parse_error("root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')')) == "");
    CHECK(parse_error("root ::= " + std::string(201, '(') + "\"a\"" + std::string(201, ')')) ==
          "grammar: line 1, column 210: groups nested deeper than 200");
    std::string big = "root ::=";
    for (int i = 0; i < 101; i++) big += " [a]{1000}";
    CHECK(parse_error(big).find("the grammar has more than 100000 elements") != std::string::npos);
    // Nested bounded repetitions stay within the element limit (no exponential copy).
    CHECK(parse_error("root ::= ((((\"ab\"{1000}){1000}){1000}){1000})") == "");
}

TEST_CASE("grammar: JSON texts match, broken ones do not", "[grammar]") {
    const auto g = Grammar::parse(JSON_GBNF, mistral_vocab());
    CHECK(matches(g, R"({"a": [1, -2.5e3, true, null], "b": {"c": "d\n\u00e9\"x"}})"));
    CHECK(matches(g, R"(  ["ünïcödé €", 0, {}, []])"));
    CHECK(matches(g, "\"日本語\""));
    CHECK(matches(g, "0"));
    CHECK_FALSE(matches(g, R"({"a": 01})"));
    CHECK_FALSE(matches(g, R"({"a" 1})"));
    CHECK_FALSE(matches(g, R"(["x\q"])"));
    CHECK_FALSE(matches(g, R"({"a": 1)"));                // incomplete: no end allowed
    CHECK_FALSE(matches(g, std::string(22, ' ') + "1"));  // whitespace is bounded
}

TEST_CASE("grammar: groups, classes and repetition bounds", "[grammar]") {
    const auto g =
        Grammar::parse("root ::= \"a\"{2,3} \"b\"+ (\"c\" | \"d\")? [^x-z\\]]{0,2} \"ab\"{2} .\n", mistral_vocab());
    CHECK(matches(g, "aabcqqababé"));
    CHECK(matches(g, "aaabbbdababz"));
    CHECK(matches(g, "aabababx"));
    CHECK_FALSE(matches(g, "abababx"));     // one a too few
    CHECK_FALSE(matches(g, "aaaabababx"));  // one a too many
    CHECK_FALSE(matches(g, "aabyababx"));   // y is outside [^x-z\]]
    CHECK_FALSE(matches(g, "aab]ababx"));
    CHECK_FALSE(matches(g, "aabqqqababx"));  // {0,2}
    CHECK_FALSE(matches(g, "aababab"));      // . needs a character
    // Comments, groups over lines, alternatives over lines, escapes.
    const auto h = Grammar::parse("# a comment\nroot ::= (\n  \"\\x41\\u00e9\" # more\n  | \"\\t\\\"\\\\\" )\n\n",
                                  mistral_vocab());
    CHECK(matches(h, "Aé"));
    // A top-level rule goes on at a line that starts with '|'.
    const auto k = Grammar::parse("root ::= \"a\"\n  | \"b\" # b\n\n  | \"c\"\nx ::= \"d\"\n", mistral_vocab());
    CHECK(matches(k, "b"));
    const auto crlf =
        Grammar::parse("root ::= x\t|\ty\r\nx ::= \"x\" # x\r\ny ::= (\r\n \"y\"\r\n)\r\n", mistral_vocab());
    CHECK(matches(crlf, "x"));
    CHECK(matches(crlf, "y"));
    CHECK(matches(k, "c"));
    CHECK_FALSE(matches(k, "d"));
    CHECK(matches(h, "\t\"\\"));
    CHECK_FALSE(matches(h, "A"));
}

TEST_CASE("grammar: too many parses alive is an error", "[grammar]") {
    const auto g =
        Grammar::parse("root ::= a*\na ::= \"x\" | \"x\" a \"y\" | \"x\" a \"z\" | \"x\" a \"w\"\n", mistral_vocab());
    const int ends[] = {mistral().eos_id()};
    GrammarMatcher m(g, ends, false);
    const int x = mistral().piece_to_id("x");
    REQUIRE(x >= 0);
    const std::string error = moe_error_of([&] {
        for (int i = 0; i < 20; i++) m.accept(x);
    });
    CHECK(error == "grammar: more than 4096 parses alive at once (the grammar is too ambiguous)");
}

TEST_CASE("grammar: matcher state, end tokens and errors", "[grammar]") {
    const auto g = Grammar::parse("root ::= \"yes\" | \"no\" \"!\"?", mistral_vocab());
    const int eos = mistral().eos_id();
    const int ends[] = {eos};
    GrammarMatcher m(g, ends, false);
    CHECK_FALSE(m.can_end());
    CHECK_FALSE(m.allows(eos));
    CHECK(moe_error_of([&] { m.accept(eos); }).find("before the text is complete") != std::string::npos);
    const int maybe = mistral().encode("maybe", false)[0];
    CHECK(moe_error_of([&] { m.accept(maybe); }).find("is not allowed here") != std::string::npos);
    REQUIRE(feed(m, "no"));
    CHECK(m.can_end());
    CHECK_FALSE(m.must_end());
    CHECK(m.allows(eos));
    REQUIRE(feed(m, "!"));
    CHECK(m.must_end());
    std::vector<float> logits(static_cast<size_t>(mistral().vocab_size()), 0.0f);
    m.mask(logits.data());
    for (int id = 0; id < mistral().vocab_size(); id++)
        CHECK(std::isinf(logits[static_cast<size_t>(id)]) == (id != eos));
    // A grammar no token can continue: mask throws.
    const auto dead = Grammar::parse("root ::= [] \"a\"", mistral_vocab());
    GrammarMatcher d(dead, ends, false);
    CHECK(moe_error_of([&] { d.mask(logits.data()); }) ==
          "grammar: no token of the vocabulary can continue the text here");
}

TEST_CASE("grammar: what cannot be matched is a GrammarError, at the start where it shows there", "[grammar]") {
    const int eos = mistral().eos_id();
    const int ends[] = {eos};
    std::vector<float> logits(static_cast<size_t>(mistral().vocab_size()), 0.0f);
    // The start and the first mask, as Session::check_grammar runs them before a request is queued.
    const auto start = [&](std::string_view gbnf, std::span<const int> end_tokens) {
        std::string error;
        try {
            GrammarMatcher m(Grammar::parse(gbnf, mistral_vocab()), end_tokens, false);
            m.mask(logits.data());
        } catch (const GrammarError& e) {
            error = e.what();
        }
        return error;
    };
    // An end token as a <[piece]>: the generation would end there, so no text matches it.
    const std::string end_piece = start("root ::= <[</s>]> \"a\"", ends);
    CHECK(end_piece.find("grammar: <[</s>]> ends the generation") == 0);
    // ... unless the request ignores EOS: then </s> is a token like any other.
    CHECK(start("root ::= <[</s>]> \"a\"", {}).empty());
    CHECK(start("root ::= \"b\" <[</s>]>", ends).find("ends the generation") != std::string::npos);
    // Nested repetitions whose expansion explodes at the first character.
    CHECK(start("root ::= ((\"a\"{0,1000}){0,1000})", ends).find("too ambiguous") != std::string::npos);
    // No token can start it.
    CHECK(start("root ::= [] \"a\"", ends) == "grammar: no token of the vocabulary can continue the text here");
    // Too many parses alive later on is a GrammarError too.
    const auto g =
        Grammar::parse("root ::= a*\na ::= \"x\" | \"x\" a \"y\" | \"x\" a \"z\" | \"x\" a \"w\"\n", mistral_vocab());
    GrammarMatcher m(g, ends, false);
    const int x = mistral().piece_to_id("x");
    CHECK_THROWS_AS(
        [&] {
            for (int i = 0; i < 20; i++) m.accept(x);
        }(),
        GrammarError);
}

TEST_CASE("grammar: the first token's leading space is stripped when asked", "[grammar]") {
    const auto g = Grammar::parse("root ::= \"{\" [a-z ]* \"}\"", mistral_vocab());
    const int brace = mistral().piece_to_id("▁{");
    REQUIRE(brace >= 0);
    const int ends[] = {mistral().eos_id()};
    GrammarMatcher plain(g, ends, false);
    CHECK_FALSE(plain.allows(brace));
    GrammarMatcher strip(g, ends, true);
    CHECK(strip.allows(brace));
    strip.accept(brace);
    // Only the first token loses its space.
    const int the = mistral().piece_to_id("▁the");
    REQUIRE(the >= 0);
    CHECK(strip.allows(the));
    strip.accept(the);
    CHECK(feed(strip, "}"));
    CHECK(strip.can_end());
    // A control token first leaves the space to the first token with text, as the Detokenizer does.
    const auto piece_first = Grammar::parse("root ::= <[<s>]> \"{\"", mistral_vocab());
    GrammarMatcher p(piece_first, ends, true);
    p.accept(mistral().piece_to_id("<s>"));
    CHECK(p.allows(brace));
    p.accept(brace);
    CHECK(p.must_end());
}

TEST_CASE("grammar: <[piece]> matches exactly that token", "[grammar]") {
    const auto g = Grammar::parse("root ::= <[<s>]> \"a\" | \"b\" <[▁the]>", mistral_vocab());
    const int ends[] = {mistral().eos_id()};
    GrammarMatcher m(g, ends, false);
    const int bos = mistral().piece_to_id("<s>");
    const int the = mistral().piece_to_id("▁the");
    CHECK(m.allows(bos));
    CHECK_FALSE(m.allows(mistral().piece_to_id("</s>")));
    m.accept(bos);
    CHECK(feed(m, "a"));
    CHECK(m.must_end());
    GrammarMatcher b(g, ends, false);
    REQUIRE(feed(b, "b"));
    CHECK(b.allows(the));
    // The same text as other tokens is not the piece.
    CHECK_FALSE(b.allows(mistral().piece_to_id("▁")));
    b.accept(the);
    CHECK(b.must_end());
}

TEST_CASE("grammar: a character split over byte tokens", "[grammar]") {
    const auto g = Grammar::parse("root ::= [\\u4e00-\\u9fff] \"!\"", mistral_vocab());
    const int ends[] = {mistral().eos_id()};
    GrammarMatcher m(g, ends, false);
    const int e4 = mistral().piece_to_id("<0xE4>");
    const int e2 = mistral().piece_to_id("<0xE2>");
    CHECK(m.allows(e4));
    CHECK_FALSE(m.allows(e2));  // U+2xxx is outside the class
    m.accept(e4);
    CHECK_FALSE(m.can_end());
    CHECK_FALSE(m.allows(mistral().piece_to_id("!")));
    CHECK(m.allows(mistral().piece_to_id("<0xB8>")));
    m.accept(mistral().piece_to_id("<0xB8>"));
    m.accept(mistral().piece_to_id("<0x80>"));  // U+4E00
    CHECK(feed(m, "!"));
    CHECK(m.can_end());
}

TEST_CASE("grammar: masks equal a brute-force check along random walks", "[grammar][slow]") {
    const std::vector<int> ends{mistral().eos_id()};
    struct Case {
        const char* name;
        std::string gbnf;
        bool strip;
    };
    const std::vector<Case> cases{
        {"json, first space stripped", JSON_GBNF, true},
        {"nested rules and repetitions",
         "root ::= item (\",\" item){0,3} \";\"?\n"
         "item ::= \"(\" list \")\" | word\n"
         "list ::= item (\" \" item)*\n"
         "word ::= [a-z]+ | [0-9]{2,3}\n",
         false},
        {"shared prefixes",
         "root ::= (\"hello\" | \"help\" | \"helmet\" (\"s\" | \"ed\")? | \"he\" [a-z]* \"!\") \" \"?\n", true},
        {"unicode classes", "root ::= ([α-ω] | [\\u4e00-\\u9fff] | \"€\" | [^\\x00-\\x7F]{2} \"x\")+ \".\"\n", false},
        {"pieces", "root ::= (<[<s>]> [a-z ]{1,10} <[▁the]> \"x\"?)+ | \"-\" <[<s>]>\n", false},
    };
    const auto json = Grammar::parse(JSON_GBNF, mistral_vocab());
    CHECK(random_walks(json, ends, 3, 30, false,
                       {"", "{\"a\": ", "[1, {\"b\": [", "{\"k\": \"v\", \"n\": -1.5e", "[\"\\u00", "{\"x\": \"abc",
                        "[true, fal", "{\"s\": \"é\\n\"} "}) > 300);
    std::string many = "root ::= (";
    for (int i = 0; i < 150; i++) {
        many += i ? " | \"" : "\"";
        many += std::to_string(i * 7919 % 1000);
        many += i % 3 ? "-a\"" : "\" [a-c]+ \"-\"";
    }
    many += ") \";\"\n";
    CHECK(random_walks(Grammar::parse(many, mistral_vocab()), ends, 8, 10, false) > 20);
    for (const Case& c : cases) {
        INFO(c.name);
        const auto g = Grammar::parse(c.gbnf, mistral_vocab());
        CHECK(random_walks(g, ends, 8, 30, c.strip) > 20);
    }
}

TEST_CASE("grammar: masks equal a brute-force check with a byte-level vocabulary", "[grammar]") {
    // The test models' byte-level tokenizer.json, <|im_end|> its end token.
    const std::filesystem::path dir = test_temp_dir("grammar-byte-level");
    std::ofstream(dir / "tokenizer.json") << byte_level_tokenizer_json_text();
    std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|im_end|>", "bos_token": null})";
    const Tokenizer tok = hf_tokenizer_load_dir(dir);
    const auto vocab = std::make_shared<const GrammarVocab>(tok);
    const std::vector<int> ends{tok.eos_id()};
    const auto json = Grammar::parse(JSON_GBNF, vocab);
    CHECK(random_walks(json, ends, 4, 40, false, {"", "{\"a\": [", "\"x"}) > 100);
    const auto uni = Grammar::parse("root ::= [é-ü\\u4e00-\\u9fff]{1,4} \"the\"\n", vocab);
    CHECK(random_walks(uni, ends, 8, 20, false) > 20);
}

TEST_CASE("grammar: a long JSON string keeps masks exact", "[grammar]") {
    const auto g = Grammar::parse(JSON_GBNF, mistral_vocab());
    const int ends[] = {mistral().eos_id()};
    GrammarMatcher m(g, ends, false);
    std::string text = "{\"text\": \"";
    for (int i = 0; i < 200; i++) text += "word ";
    REQUIRE(feed(m, text));
    std::vector<float> logits(static_cast<size_t>(mistral().vocab_size()), 0.0f);
    m.mask(logits.data());
    int allowed = 0;
    for (int id = 0; id < mistral().vocab_size(); id++) {
        const bool in = !std::isinf(logits[static_cast<size_t>(id)]);
        allowed += in;
        CHECK(in == m.allows(id));
    }
    CHECK(allowed > 30000);
    REQUIRE(feed(m, "\"}"));
    CHECK(m.can_end());
}

TEST_CASE("grammar: mutated grammars parse or fail cleanly, and what parses can be matched", "[grammar]") {
    std::mt19937 rng(99);
    const std::string alphabet = "()[]{}|*+?.\"\\^-:=#<>, \n0123456789az";
    std::vector<float> logits(static_cast<size_t>(mistral().vocab_size()));
    const int ends[] = {mistral().eos_id()};
    int parsed = 0, failed = 0;
    for (int i = 0; i < 1500; i++) {
        std::string text = JSON_GBNF;
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits; e++) {
            const size_t at = rng() % text.size();
            const char c = alphabet[rng() % alphabet.size()];
            switch (rng() % 3) {
            case 0:
                text.erase(at, 1);
                break;
            case 1:
                text.insert(at, 1, c);
                break;
            default:
                text[at] = c;
            }
        }
        std::shared_ptr<const Grammar> g;
        try {
            g = Grammar::parse(text, mistral_vocab());
        } catch (const MoeError& e) {
            const std::string m = e.what();
            CHECK(m.rfind("grammar: line ", 0) == 0);
            failed++;
            continue;
        }
        parsed++;
        if (parsed > 60) continue;  // matching a few is enough
        try {
            GrammarMatcher m(g, ends, false);
            std::mt19937 pick(static_cast<unsigned>(i));
            for (int s = 0; s < 6 && !m.must_end(); s++) {
                std::fill(logits.begin(), logits.end(), 0.0f);
                m.mask(logits.data());
                std::vector<int> allowed;
                for (int id = 0; id < mistral().vocab_size(); id++) {
                    if (!std::isinf(logits[static_cast<size_t>(id)])) allowed.push_back(id);
                }
                const int id = allowed[pick() % allowed.size()];
                if (id == ends[0]) break;
                m.accept(id);
            }
        } catch (const MoeError& e) {
            const std::string m = e.what();
            CHECK(m.rfind("grammar: ", 0) == 0);
        }
    }
    CHECK(parsed > 50);
    CHECK(failed > 500);
}
