// Tests of the tokenizer and chat template built from GGUF metadata
// (engine/text/gguf_tokenizer.h): llama.cpp's reference ids for its Llama-SPM
// and Phi-3 vocab GGUFs; Mixtral's vocabulary as llama.cpp converted it
// (reference/gguf/Q8_0.gguf) against the tokenizer.model it came from, on the
// shared prompt files, both ways of the dummy prefix, and decoding; the chat
// template of a GGUF written here with Mixtral's Jinja template; and small
// GGUFs written here with one thing wrong each, refused in one line naming
// the file and the key.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/errors.h"
#include "engine/formats/gguf.h"
#include "engine/text/gguf_tokenizer.h"
#include "profiles/prompts.h"
#include "support/test_support.h"
#include "tokenizer_fixtures.h"

namespace fs = std::filesystem;

using tokenizer_test::find_key;
using tokenizer_test::read_vocab_test_outputs;
using tokenizer_test::stream;
using tokenizer_test::with;
using tokenizer_test::without;

namespace {

Tokenizer tokenizer_of(const fs::path& path) {
    const GgufFile gguf(path);
    return tokenizer_from_gguf(gguf.metadata(), path.string());
}

// A small "llama" vocabulary without byte tokens: encode("ab a") merges
// "▁a" (the best score) twice, then "▁ab": {8, 6}.
std::vector<GgufKeyValue> small_vocab() {
    return {
        {"general.architecture", "llama"},
        {"tokenizer.ggml.model", "llama"},
        {"tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab", "▁ab"}},
        {"tokenizer.ggml.scores", std::vector<float>{0, 0, 0, -1, -2, -3, -4, -5, -6}},
        {"tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 1, 1, 1, 1, 1}},
        {"tokenizer.ggml.bos_token_id", uint32_t(1)},
        {"tokenizer.ggml.eos_token_id", uint32_t(2)},
    };
}

// Writes md as a tensor-less GGUF named `name` and builds its tokenizer.
Tokenizer tokenizer_written(const std::vector<GgufKeyValue>& md, const fs::path& path) {
    gguf_write(path, md, {});
    return tokenizer_of(path);
}

}  // namespace

TEST_CASE("gguf tokenizer: llama.cpp's reference ids", "[gguf_tokenizer]") {
    // llama.cpp's test convention (tests/test-tokenizer-0): the .inp cases
    // each end with "\n__ggml_vocab_test__\n"; the .out has one line per
    // case, the ids without BOS, with the space prefix. Phi-3's vocabulary is
    // Llama's plus control and padding tokens, with the same expected ids.
    const fs::path dir = shared_data_dir() / "reference/llama-cpp-vocab";
    struct Vocab {
        const char* name;
        int size, bos, eos;
    };
    for (const Vocab& v :
         {Vocab{"ggml-vocab-llama-spm.gguf", 32000, 1, 2}, Vocab{"ggml-vocab-phi-3.gguf", 32064, 1, 32000}}) {
        INFO(v.name);
        const Tokenizer tok = tokenizer_of(dir / v.name);
        CHECK(tok.vocab_size() == v.size);
        CHECK(tok.bos_id() == v.bos);
        CHECK(tok.eos_id() == v.eos);
        CHECK(tok.is_unknown(0));
        const auto inputs = tokenizer_test::read_vocab_test_inputs(dir / (std::string(v.name) + ".inp"));
        const auto expected = read_vocab_test_outputs(dir / (std::string(v.name) + ".out"));
        REQUIRE(inputs.size() == 46);
        REQUIRE(inputs.size() == expected.size());
        for (size_t i = 0; i < inputs.size(); ++i) {
            INFO("case " << i << ": \"" << inputs[i] << "\"");
            CHECK(tok.encode(inputs[i]) == expected[i]);
            CHECK(tok.decode(expected[i]) == inputs[i]);
            CHECK(stream(tok, expected[i], true) == inputs[i]);
        }
    }
    // Phi-3: padding tokens typed unknown are not the unknown token, and
    // never come out of text.
    const Tokenizer phi = tokenizer_of(dir / "ggml-vocab-phi-3.gguf");
    CHECK(phi.id_to_piece(32011) == "[PAD32011]");
    CHECK_FALSE(phi.is_unknown(32011));
    for (int id : phi.encode("<|user|> [PAD32011]")) CHECK(id < 32000);
}

TEST_CASE("gguf tokenizer: Mixtral's vocabulary from Q8_0.gguf equals its tokenizer.model", "[gguf_tokenizer]") {
    const fs::path ref = shared_data_dir() / "reference/gguf";
    const Tokenizer gguf = tokenizer_of(ref / "Q8_0.gguf");
    const Tokenizer file = Tokenizer::load(ref / "hf/tokenizer.model");

    REQUIRE(gguf.vocab_size() == file.vocab_size());
    CHECK(gguf.bos_id() == file.bos_id());
    CHECK(gguf.eos_id() == file.eos_id());
    std::vector<int> all_ids;
    for (int id = 0; id < file.vocab_size(); ++id) {
        all_ids.push_back(id);
        if (gguf.id_to_piece(id) != file.id_to_piece(id) || gguf.is_control(id) != file.is_control(id) ||
            gguf.is_byte(id) != file.is_byte(id) || gguf.is_unknown(id) != file.is_unknown(id) ||
            gguf.token_bytes(id) != file.token_bytes(id)) {
            FAIL("id " << id << ": '" << gguf.id_to_piece(id) << "' differs from '" << file.id_to_piece(id) << "'");
        }
        CHECK(gguf.piece_to_id(file.id_to_piece(id)) == id);
    }
    // Decoding every id, in runs that mix controls, bytes and words.
    for (size_t at = 0; at < all_ids.size(); at += 97) {
        const std::vector<int> run(all_ids.begin() + at, all_ids.begin() + std::min(all_ids.size(), at + 97));
        REQUIRE(gguf.decode(run) == file.decode(run));
    }

    // The first prompts of every shared prompt file, and the tokenizer tests' texts.
    std::vector<std::string> texts = tokenizer_test::sample_texts();
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(shared_data_dir() / "prompts")) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    REQUIRE(files.size() >= 5);
    constexpr size_t PROMPTS_PER_FILE = 60;
    for (const fs::path& path : files) {
        const PromptSet set = prompts_read(path);
        REQUIRE(set.prompts.size() >= PROMPTS_PER_FILE);
        texts.insert(texts.end(), set.prompts.begin(), set.prompts.begin() + PROMPTS_PER_FILE);
    }
    size_t n_tokens = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
        for (bool dummy_prefix : {true, false}) {
            const std::vector<int> ids = file.encode(texts[i], dummy_prefix);
            n_tokens += ids.size();
            if (gguf.encode(texts[i], dummy_prefix) != ids)
                FAIL("text " << i << " (prefix " << dummy_prefix << "): \"" << texts[i] << "\"");
            if (gguf.decode(ids) != file.decode(ids)) FAIL("decoding text " << i << ": \"" << texts[i] << "\"");
        }
        const std::vector<int> ids = file.encode(texts[i]);
        if (stream(gguf, ids, true) != stream(file, ids, true)) FAIL("streaming text " << i);
    }
    CHECK(n_tokens > 100000);  // the comparison covers real text, not a handful of ids
}

TEST_CASE("gguf tokenizer: a small vocabulary and its settings", "[gguf_tokenizer]") {
    const fs::path dir = test_temp_dir("gguf_tokenizer_small");
    const Tokenizer tok = tokenizer_written(small_vocab(), dir / "small.gguf");
    CHECK(tok.vocab_size() == 9);
    CHECK(tok.encode("ab a") == std::vector<int>{8, 6});
    CHECK(tok.encode("ab a", false) == std::vector<int>{7, 6});
    CHECK(tok.decode(std::vector<int>{1, 8, 6, 2}) == "ab a");
    CHECK(tok.encode("abc") == std::vector<int>{8, 0});               // no byte tokens: <unk>
    CHECK(tok.decode(std::vector<int>{8, 0}) == "ab \xE2\x81\x87 ");  // SentencePiece's unk surface

    // tokenizer.ggml.add_space_prefix false: the model's own default flips.
    const Tokenizer no_prefix =
        tokenizer_written(with(small_vocab(), "tokenizer.ggml.add_space_prefix", false), dir / "no_prefix.gguf");
    CHECK(no_prefix.encode("ab a") == std::vector<int>{8, 6});
    CHECK(no_prefix.encode("ab a", false) == std::vector<int>{7, 6});
    const Tokenizer folded =
        tokenizer_written(with(small_vocab(), "tokenizer.ggml.remove_extra_whitespaces", true), dir / "folded.gguf");
    CHECK(folded.encode("  ab   a  ") == std::vector<int>{8, 6});
    CHECK(tok.encode("ab  a").size() == 3);

    // The unknown token found by its type; BOS and EOS always control, even
    // when typed otherwise, so text never encodes to them; a second
    // unknown-typed token is not the unknown one.
    auto md = with(without(small_vocab(), "tokenizer.ggml.unknown_token_id"), "tokenizer.ggml.token_type",
                   std::vector<int32_t>{2, 1, 4, 1, 1, 2, 1, 1, 1});
    const Tokenizer retyped = tokenizer_written(md, dir / "retyped.gguf");
    CHECK(retyped.is_unknown(0));
    CHECK(retyped.is_control(1));
    CHECK(retyped.is_control(2));
    CHECK_FALSE(retyped.is_unknown(5));
    CHECK(retyped.encode("</s>") == std::vector<int>{3, 0});  // "▁", then one <unk> for the run
    const Tokenizer padded =
        tokenizer_written(with(small_vocab(), "tokenizer.ggml.padding_token_id", uint32_t(2)), dir / "padded.gguf");
    CHECK(padded.encode("ab a") == std::vector<int>{8, 6});

    // Byte fallback with all 256 byte tokens.
    auto tokens = std::vector<std::string>{"<unk>", "<s>", "</s>", "▁"};
    auto scores = std::vector<float>{0, 0, 0, -1};
    auto types = std::vector<int32_t>{2, 3, 3, 1};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        tokens.push_back(name);
        scores.push_back(0);
        types.push_back(6);
    }
    md = with(with(with(small_vocab(), "tokenizer.ggml.tokens", tokens), "tokenizer.ggml.scores", scores),
              "tokenizer.ggml.token_type", types);
    const Tokenizer bytes = tokenizer_written(md, dir / "bytes.gguf");
    CHECK(bytes.encode("a") == std::vector<int>{3, 4 + 'a'});
    CHECK(bytes.decode(bytes.encode("é x")) == "é x");
}

TEST_CASE("gguf tokenizer: malformed metadata is refused naming the file and key", "[gguf_tokenizer]") {
    const fs::path dir = test_temp_dir("gguf_tokenizer_errors");
    const fs::path path = dir / "bad.gguf";
    auto error_of = [&](const std::vector<GgufKeyValue>& md) {
        gguf_write(path, md, {});
        return moe_error_of([&] { tokenizer_of(path); });
    };
    const std::vector<GgufKeyValue> good = small_vocab();
    REQUIRE(error_of(good).empty());

    struct Case {
        std::vector<GgufKeyValue> md;
        std::string what;
    };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<Case> cases = {
        {without(good, "tokenizer.ggml.model"), "tokenizer.ggml.model: missing key"},
        {with(good, "tokenizer.ggml.model", "gpt2"),
         "tokenizer.ggml.merges: missing key (a gpt2 vocabulary needs its merges)"},
        {with(good, "tokenizer.ggml.model", "bert"),
         "tokenizer.ggml.model: 'bert' vocabularies are not SentencePiece ones"},
        {with(good, "tokenizer.ggml.model", uint32_t(1)), "tokenizer.ggml.model: "},
        {without(good, "tokenizer.ggml.tokens"), "tokenizer.ggml.tokens: missing key"},
        {with(good, "tokenizer.ggml.tokens", std::vector<uint32_t>{1, 2}), "tokenizer.ggml.tokens: "},
        {with(with(with(good, "tokenizer.ggml.tokens", std::vector<std::string>{}), "tokenizer.ggml.scores",
                   std::vector<float>{}),
              "tokenizer.ggml.token_type", std::vector<int32_t>{}),
         "tokenizer.ggml.tokens: no tokens"},
        {without(good, "tokenizer.ggml.scores"), "tokenizer.ggml.scores: missing key"},
        {without(good, "tokenizer.ggml.token_type"), "tokenizer.ggml.token_type: missing key"},
        {with(good, "tokenizer.ggml.scores", std::vector<float>{0, 0, 0}),
         "tokenizer.ggml.scores: 3 entries, but tokenizer.ggml.tokens has 9"},
        {with(good, "tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 1, 1, 1, 1, 1, 1}),
         "tokenizer.ggml.token_type: 10 entries, but tokenizer.ggml.tokens has 9"},
        {with(good, "tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 7, 1, 1, 1, 1}),
         "tokenizer.ggml.token_type: token 4 'a' has type 7"},
        {with(good, "tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 1, 0, 1, 1, 1}),
         "tokenizer.ggml.token_type: token 5 'b' has type 0"},
        {with(good, "tokenizer.ggml.scores", std::vector<float>{0, 0, 0, -1, nan, -3, -4, -5, -6}),
         "tokenizer.ggml.scores: token 4 'a' has score nan"},
        {with(good, "tokenizer.ggml.tokens",
              std::vector<std::string>{"<unk>", "<s>", "</s>", "▁", "a", "", "▁a", "ab", "▁ab"}),
         "tokenizer.ggml.tokens: token 5 is empty"},
        {with(good, "tokenizer.ggml.tokens",
              std::vector<std::string>{"<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "a", "▁ab"}),
         "tokenizer.ggml.tokens: token 7 'a' repeats token 4"},
        {with(with(good, "tokenizer.ggml.tokens",
                   std::vector<std::string>{"<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab", "ab"}),
              "tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 1, 1, 1, 1, 3}),
         "tokenizer.ggml.tokens: token 8 'ab' repeats token 7"},  // a text piece and a control one
        {with(good, "tokenizer.ggml.tokens",
              std::vector<std::string>{"<unk>", "<s>", "\xF0\x9F\x98\x80", "▁", "a", "b", "▁a", "ab", "▁ab"}),
         "tokenizer.ggml.tokens: token 2 '\xF0\x9F\x98\x80' is a control token of one character"},
        {with(good, "tokenizer.ggml.tokens",
              std::vector<std::string>{"<unk>", "<s>", "</s>", "▁", "a", std::string("b\0c", 3), "▁a", "ab", "▁ab"}),
         "tokenizer.ggml.tokens: token 5 'b?c' holds a NUL byte"},
        {with(good, "tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 6, 1, 1, 1, 1}),
         "tokenizer.ggml.tokens: token 4 'a' has type byte but is not <0xNN>"},
        {with(with(good, "tokenizer.ggml.tokens",
                   std::vector<std::string>{"<unk>", "<s>", "</s>", "▁", "<0x61>", "b", "▁a", "ab", "▁ab"}),
              "tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 6, 1, 1, 1, 1}),
         "tokenizer.ggml.token_type: 1 tokens of type byte; byte fallback needs all 256"},
        {without(good, "tokenizer.ggml.bos_token_id"), "tokenizer.ggml.bos_token_id: missing key"},
        {without(good, "tokenizer.ggml.eos_token_id"), "tokenizer.ggml.eos_token_id: missing key"},
        {with(good, "tokenizer.ggml.bos_token_id", uint32_t(9)),
         "tokenizer.ggml.bos_token_id: 9 is outside the vocabulary (9 tokens)"},
        {with(good, "tokenizer.ggml.eos_token_id", int32_t(-1)),
         "tokenizer.ggml.eos_token_id: -1 is outside the vocabulary (9 tokens)"},
        {with(good, "tokenizer.ggml.unknown_token_id", uint32_t(100)),
         "tokenizer.ggml.unknown_token_id: 100 is outside the vocabulary"},
        {with(good, "tokenizer.ggml.padding_token_id", uint64_t(9)),
         "tokenizer.ggml.padding_token_id: 9 is outside the vocabulary"},
        {with(good, "tokenizer.ggml.bos_token_id", "1"), "tokenizer.ggml.bos_token_id: "},
        {with(good, "tokenizer.ggml.bos_token_id", uint32_t(0)), "tokenizer.ggml.bos_token_id: 0 is the unknown token"},
        {with(good, "tokenizer.ggml.token_type", std::vector<int32_t>{1, 3, 3, 1, 1, 1, 1, 1, 1}),
         "tokenizer.ggml.unknown_token_id: missing key, and no token has type unknown"},
        {with(good, "tokenizer.ggml.add_space_prefix", uint32_t(1)), "tokenizer.ggml.add_space_prefix: "},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        check_error_line(error_of(c.md), path, c.what);
    }
}

TEST_CASE("gguf tokenizer: a byte-level tokenizer.json as a gpt2 vocabulary gives the same tokenizer back",
          "[gguf_tokenizer]") {
    // GPT-2's (pre-tokenizer gpt-2: ByteLevel's own regex), DeepSeek-LLM's
    // and Qwen3.5's (Split regexes; qwen35 is qwen2's plus combining marks)
    // vocabularies through tokenizer.json and back, against llama.cpp's
    // reference ids.
    const fs::path dir = shared_data_dir() / "reference/llama-cpp-vocab";
    struct Vocab {
        const char* name;
        const char* pre;
    };
    for (const auto& [name, pre] :
         {Vocab{"ggml-vocab-gpt-2.gguf", "gpt-2"}, Vocab{"ggml-vocab-deepseek-llm.gguf", "deepseek-llm"},
          Vocab{"ggml-vocab-qwen35.gguf", "qwen35"}}) {
        INFO(name);
        const GgufFile original(dir / name);
        HfSpecialTokens specials;
        const nlohmann::json doc = gguf_bpe_tokenizer_json(original.metadata(), name, &specials);
        const Tokenizer want = tokenizer_from_gguf(original.metadata(), name);
        std::vector<GgufKeyValue> md = gguf_bpe_tokenizer_metadata(doc, "tokenizer.json", want.bos_id(), want.eos_id());
        CHECK(find_key(md, "tokenizer.ggml.pre")->value.as_string() == pre);
        const Tokenizer got = tokenizer_written(md, test_temp_dir("gguf-bpe-back") / "vocab.gguf");
        REQUIRE(got.vocab_size() == want.vocab_size());
        CHECK(got.bos_id() == want.bos_id());
        CHECK(got.eos_id() == want.eos_id());
        const auto inputs = tokenizer_test::read_vocab_test_inputs(dir / (std::string(name) + ".inp"));
        const auto expected = read_vocab_test_outputs(dir / (std::string(name) + ".out"));
        REQUIRE(inputs.size() == expected.size());
        for (size_t i = 0; i < inputs.size(); ++i) {
            INFO("case " << i);
            CHECK(got.encode(inputs[i], false) == expected[i]);
        }
    }
    // A pre-tokenizer llama.cpp has no name for, and a hole in the ids, are named.
    const GgufFile gpt2(dir / "ggml-vocab-gpt-2.gguf");
    HfSpecialTokens specials;
    nlohmann::json doc = gguf_bpe_tokenizer_json(gpt2.metadata(), "gpt2", &specials);
    nlohmann::json odd = doc;
    odd["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers",
                             {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}},
                              {{"type", "ByteLevel"}, {"use_regex", false}}}}};
    CHECK_THROWS_WITH(gguf_bpe_tokenizer_metadata(odd, "t.json", 0, 0),
                      "t.json: pre_tokenizer: its regexes are not those of a pre-tokenizer llama.cpp names");
    nlohmann::json hole = doc;
    hole["model"]["vocab"].erase("!");
    CHECK_THROWS_WITH(gguf_bpe_tokenizer_metadata(hole, "t.json", 0, 0), "t.json: model.vocab: no token has id 0");
}

TEST_CASE("gguf tokenizer: the ids that end generation, as llama.cpp reads them", "[gguf_tokenizer]") {
    const fs::path dir = test_temp_dir("gguf-eog");
    const auto ids_of = [&](const std::vector<GgufKeyValue>& md) {
        gguf_write(dir / "eog.gguf", md, {});
        const GgufFile gguf(dir / "eog.gguf");
        return gguf_end_of_generation_ids(gguf.metadata());
    };
    // Mixtral's: EOS alone ("</s>" is no end of turn).
    CHECK(ids_of(small_vocab()) == std::vector<int>{2});
    // EOS first, then EOT, then CONTROL tokens spelled as an end of turn in id
    // order, each once; a NORMAL "<|endoftext|>" is text.
    std::vector<GgufKeyValue> md = small_vocab();
    md = with(md, "tokenizer.ggml.tokens",
              std::vector<std::string>{"<unk>", "<s>", "</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "b",
                                       "<end_of_turn>", "<|im_start|>"});
    md = with(md, "tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 3, 3, 1, 3, 3});
    md = with(md, "tokenizer.ggml.eos_token_id", uint32_t(4));
    CHECK(ids_of(md) == std::vector<int>{4, 5, 7});
    md = with(md, "tokenizer.ggml.eot_token_id", uint32_t(7));
    CHECK(ids_of(md) == std::vector<int>{4, 7, 5});
    // No EOS: nothing, whatever the tokens.
    CHECK(ids_of(without(md, "tokenizer.ggml.eos_token_id")).empty());
}
