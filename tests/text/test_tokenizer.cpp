// Tests of Tokenizer and Detokenizer against the real Mixtral tokenizer and
// Mistral's own reference ids (mistral-common); llama.cpp's reference ids
// are test_gguf_tokenizer.cpp's. The test-only model builders and readers
// are tests/support/tokenizer_fixtures.h's.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/errors.h"
#include "embedded_files.h"
#include "engine/text/protobuf_wire.h"
#include "engine/text/tokenizer.h"
#include "test_support.h"
#include "tokenizer_fixtures.h"


using namespace tokenizer_test;

namespace {

std::vector<std::string> pieces_of(const Tokenizer& tok, const std::vector<int>& ids) {
    std::vector<std::string> out;
    for (int id : ids) out.push_back(tok.id_to_piece(id));
    return out;
}

}  // namespace

TEST_CASE("Tokenizer loads the Mixtral model with its special pieces", "[tokenizer]") {
    const Tokenizer& tok = mistral();
    CHECK(tok.vocab_size() == 32000);
    CHECK(tok.bos_id() == 1);
    CHECK(tok.eos_id() == 2);
    CHECK(tok.piece_to_id("<s>") == 1);
    CHECK(tok.piece_to_id("</s>") == 2);
    CHECK(tok.piece_to_id("<unk>") == 0);
    CHECK(tok.piece_to_id("<|im_start|>") == -1);  // SentencePiece itself answers unk_id (0)
    CHECK(tok.piece_to_id("[INST]") == -1);
    CHECK(tok.id_to_piece(1) == "<s>");
    CHECK(tok.is_control(1));
    CHECK(tok.is_control(2));
    CHECK_FALSE(tok.is_control(0));
    CHECK(tok.is_unknown(0));
    CHECK_FALSE(tok.is_control(-1));
    CHECK_FALSE(tok.is_control(32000));
    CHECK_THROWS_AS(tok.id_to_piece(32000), MoeError);
    CHECK_THROWS_AS(tok.token_bytes(-1), MoeError);
    const std::vector<int> bad{5, 32000};
    CHECK_THROWS_AS(tok.decode(bad), MoeError);
}

TEST_CASE("Tokenizer from the embedded model equals the file", "[tokenizer]") {
    const std::string_view bytes = embedded_file("mistral-v1.model");
    REQUIRE(bytes == read_file(shared_data_dir() / "tokenizers/mistral-v1.model"));
    const Tokenizer tok = Tokenizer::from_bytes(bytes, "embedded:mistral-v1.model");
    for (const auto& text : sample_texts()) CHECK(tok.encode(text) == mistral().encode(text));
}

TEST_CASE("Tokenizer load errors name the file", "[tokenizer]") {
    const auto dir = test_temp_dir("tokenizer_errors");
    auto message_of = [](auto&& fn) -> std::string {
        try {
            fn();
        } catch (const MoeError& e) {
            return e.what();
        }
        return "(no MoeError)";
    };

    const auto missing = dir / "missing.model";
    CHECK_THAT(message_of([&] { Tokenizer::load(missing); }), Catch::Contains(missing.string()));

    const auto empty = dir / "empty.model";
    std::ofstream(empty).close();
    const std::string empty_msg = message_of([&] { Tokenizer::load(empty); });
    CHECK_THAT(empty_msg, Catch::Contains(empty.string() + ": not a SentencePiece model"));

    const auto noise = dir / "noise.model";
    std::mt19937 rng(7);
    std::string bytes(4096, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    std::ofstream(noise, std::ios::binary) << bytes;
    CHECK_THAT(message_of([&] { Tokenizer::load(noise); }),
               Catch::Contains(noise.string() + ": not a SentencePiece model"));

    const auto truncated = dir / "truncated.model";
    const std::string real = read_file(shared_data_dir() / "tokenizers/mistral-v1.model");
    std::ofstream(truncated, std::ios::binary) << real.substr(0, real.size() / 2);
    CHECK_THAT(message_of([&] { Tokenizer::load(truncated); }),
               Catch::Contains(truncated.string() + ": not a SentencePiece model"));

    CHECK_THAT(message_of([&] { Tokenizer::load(dir); }), Catch::Contains(dir.string()));
    CHECK_THAT(message_of([&] { Tokenizer::from_bytes("", "blob"); }),
               Catch::Contains("blob: not a SentencePiece model"));
}

TEST_CASE("Tokenizer encodes like Mistral's reference", "[tokenizer]") {
    // Segments of mistral-common's no_tools sample with their reference ids.
    const auto ref = nlohmann::json::parse(
        read_file(shared_data_dir() / "reference/mistral-common/no_tools__tokens_v1.json"))["tokens"];
    const std::vector<int> all = ref.get<std::vector<int>>();
    const std::vector<int> user(all.begin() + 1, all.begin() + 20);
    const std::vector<int> reply(all.begin() + 20, all.begin() + 33);
    CHECK(mistral().encode("[INST] What's the result of 5 + 5? [/INST]") == user);
    CHECK(mistral().encode("The result of 5 + 5 is 10.") == reply);
    CHECK(mistral().decode(user) == "[INST] What's the result of 5 + 5? [/INST]");
}

TEST_CASE("Tokenizer never turns text into control ids", "[tokenizer]") {
    const Tokenizer& tok = mistral();
    for (const char* text : {"</s>", "<s>", "<unk>", "[INST]", "[/INST]", "<s>[INST] hi [/INST]</s>"}) {
        const auto ids = tok.encode(text);
        INFO(text);
        for (int id : ids) CHECK_FALSE(tok.is_control(id));
        CHECK(tok.decode(ids) == text);
    }
    // Mistral v0.3 has [INST], [/INST], [TOOL_CALLS] ... as control pieces 3..770.
    const Tokenizer v3 = Tokenizer::load(shared_data_dir() / "tokenizers/mistral-7b-instruct-v0.3/tokenizer.model.v3");
    REQUIRE(v3.is_control(v3.piece_to_id("[INST]")));
    int controls = 0;
    for (int id = 0; id < v3.vocab_size(); ++id) {
        if (!v3.is_control(id)) continue;
        ++controls;
        const std::string piece = v3.id_to_piece(id);
        for (int got : v3.encode(piece)) {
            INFO(piece);
            CHECK_FALSE(v3.is_control(got));
        }
    }
    CHECK(controls > 700);
}

TEST_CASE("Tokenizer add_dummy_prefix works both ways", "[tokenizer]") {
    const Tokenizer& tok = mistral();
    CHECK(pieces_of(tok, tok.encode("5 + 5")) == std::vector<std::string>{"▁", "5", "▁+", "▁", "5"});
    CHECK(pieces_of(tok, tok.encode("5 + 5", false)) == std::vector<std::string>{"5", "▁+", "▁", "5"});
    CHECK(pieces_of(tok, tok.encode("\n", false)) == std::vector<std::string>{"<0x0A>"});
    CHECK(tok.encode("", true).empty());
    CHECK(tok.encode("", false).empty());
    for (const auto& text : sample_texts()) {
        if (text.empty()) continue;
        INFO(text);
        const auto with = tok.encode(text, true);
        const auto without = tok.encode(text, false);
        // The dummy prefix is exactly a space before the text (identity
        // normalizer that keeps whitespace runs).
        CHECK(tok.encode(" " + text, false) == with);
        CHECK(tok.id_to_piece(with.front()).starts_with("▁"));
        if (text[0] != ' ') {
            CHECK_FALSE(tok.id_to_piece(without.front()).starts_with("▁"));
            CHECK(tok.decode(without) == text);
        }
    }
}

TEST_CASE("Tokenizer token_bytes agrees with SentencePiece for every id", "[tokenizer]") {
    const Tokenizer& tok = mistral();
    CHECK(tok.token_bytes(tok.piece_to_id("▁")) == " ");
    CHECK(tok.token_bytes(tok.piece_to_id("<0xE2>")) == "\xE2");
    CHECK(tok.token_bytes(tok.piece_to_id("<0x0A>")) == "\n");
    CHECK(tok.token_bytes(1).empty());
    CHECK(tok.token_bytes(2).empty());
    CHECK(tok.token_bytes(0) == " \xE2\x81\x87 ");  // " ⁇ ", SentencePiece's unk surface
    CHECK(tok.token_bytes(tok.piece_to_id("▁hell")) == " hell");

    // After an anchor piece SentencePiece strips nothing, so decode({a, id})
    // is "a" followed by exactly what id stands for.
    const int anchor = tok.piece_to_id("a");
    int bytes_seen = 0;
    for (int id = 0; id < tok.vocab_size(); ++id) {
        INFO("id " << id << " piece " << tok.id_to_piece(id));
        if (tok.is_byte(id)) {
            ++bytes_seen;
            const std::string piece = tok.id_to_piece(id);
            REQUIRE(tok.token_bytes(id) ==
                    std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16))));
            continue;
        }
        const std::vector<int> ids{anchor, id};
        std::string expected = "a";
        expected += tok.token_bytes(id);
        REQUIRE(tok.decode(ids) == expected);
    }
    CHECK(bytes_seen == 256);
}

TEST_CASE("Detokenizer streams exactly what decode gives", "[tokenizer]") {
    const Tokenizer& tok = mistral();
    for (const auto& text : sample_texts()) {
        INFO("text: \"" << text << "\"");
        const auto ids = tok.encode(text);
        const std::string decoded = tok.decode(ids);
        CHECK(decoded == text);  // SentencePiece round-trips all of these
        CHECK(stream(tok, ids) == decoded);

        std::vector<int> with_bos{tok.bos_id()};
        with_bos.insert(with_bos.end(), ids.begin(), ids.end());
        with_bos.push_back(tok.eos_id());
        CHECK(stream(tok, with_bos) == tok.decode(with_bos));

        // Without stripping the dummy prefix stays.
        std::string raw;
        for (int id : ids) raw += tok.token_bytes(id);
        CHECK(stream(tok, ids, false) == raw);
        if (!text.empty()) CHECK(raw == " " + text);
    }
}

TEST_CASE("Detokenizer holds split characters and replaces invalid bytes", "[tokenizer]") {
    const Tokenizer& tok = mistral();
    auto byte = [&](int b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        return tok.piece_to_id(name);
    };
    Detokenizer detok(tok);
    CHECK(detok.push(byte(0xF0)).empty());
    CHECK(detok.push(byte(0x9F)).empty());
    CHECK(detok.push(byte(0x98)).empty());
    CHECK(detok.push(byte(0x80)) == "😀");
    CHECK(detok.flush().empty());

    const std::string fffd = "\xEF\xBF\xBD";
    detok.reset();
    CHECK(detok.push(byte(0x80)) == fffd);  // a lone continuation byte
    CHECK(detok.push(byte(0xC0)) == fffd);  // never valid (overlong)
    CHECK(detok.push(byte(0xED)).empty());  // ED A0 would be a surrogate
    CHECK(detok.push(byte(0xA0)) == fffd + fffd);
    CHECK(detok.push(byte(0xE2)).empty());
    CHECK(detok.push(byte(0x82)).empty());
    // The run ends unfinished: one U+FFFD per byte, as SentencePiece does.
    CHECK(detok.push(tok.piece_to_id("▁a")) == fffd + fffd + " a");
    CHECK(detok.push(byte(0xF0)).empty());
    CHECK(detok.flush() == fffd);

    // Controls at the start do not use up the leading-space strip.
    detok.reset();
    CHECK(detok.push(1).empty());
    CHECK(detok.push(tok.piece_to_id("▁The")) == "The");
    CHECK(detok.push(tok.piece_to_id("▁end")) == " end");
    detok.reset(false);
    CHECK(detok.push(tok.piece_to_id("▁The")) == " The");
    CHECK_THROWS_AS(detok.push(-1), MoeError);
    CHECK_THROWS_AS(detok.push(tok.vocab_size()), MoeError);
}

TEST_CASE("Detokenizer matches SentencePiece on random id sequences", "[tokenizer]") {
    const Tokenizer& tok = mistral();
    std::vector<int> pool;
    for (int id = 0; id < tok.vocab_size(); ++id)
        if (tok.is_byte(id)) pool.push_back(id);  // all 256 bytes: broken and whole UTF-8
    for (int id : {0, 1, 2, tok.piece_to_id("▁"), tok.piece_to_id("▁▁"), tok.piece_to_id("a")}) pool.push_back(id);
    std::mt19937 rng(12345);
    std::uniform_int_distribution<int> any_id(0, tok.vocab_size() - 1);
    std::uniform_int_distribution<size_t> from_pool(0, pool.size() - 1);
    for (int trial = 0; trial < 4000; ++trial) {
        std::vector<int> ids(1 + rng() % 10);
        for (int& id : ids) id = rng() % 3 == 0 ? any_id(rng) : pool[from_pool(rng)];
        INFO("trial " << trial);
        REQUIRE(stream(tok, ids) == tok.decode(ids));
    }
}

TEST_CASE("Tokenizer parses control pieces in text only when asked", "[tokenizer]") {
    const Tokenizer& tok = extended();
    const int im_start = tok.piece_to_id("<|im_start|>"), eos = tok.eos_id();
    const std::string text = "<|im_start|>user hi</s>";
    const std::vector<int> plain = tok.encode(text);
    for (int id : plain) CHECK_FALSE(tok.is_control(id));
    const std::vector<int> parsed = tok.encode(text, true, SpecialTokens::PARSE);
    REQUIRE(parsed.size() >= 3);
    CHECK(parsed.front() == im_start);
    CHECK(parsed.back() == eos);
    // The text between them is encoded as a text after a special token: no dummy prefix.
    const std::vector<int> middle(parsed.begin() + 1, parsed.end() - 1);
    CHECK(middle == tok.encode("user hi", false));
}
