// Tests of the tokenizer.json reader and BPE backend (engine/text/hf_tokenizer.h)
// and of GGUF "gpt2" vocabularies: llama.cpp's reference ids for its GPT-2
// and DeepSeek-LLM vocab GGUFs (byte-level BPE with the GPT-2 and DeepSeek
// pre-tokenizer regexes); Mistral v3's tokenizer.json against its
// tokenizer.model.v3 through libsentencepiece on every shared prompt file;
// added and special tokens matched only when allowed; the normalizer and
// pre-tokenizer steps on small documents written here; streaming of
// byte-level tokens that split characters; and malformed documents refused in
// one line naming the key.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "engine/formats/gguf.h"
#include "engine/text/gguf_tokenizer.h"
#include "engine/text/hf_tokenizer.h"
#include "profiles/prompts.h"
#include "support/test_support.h"
#include "tokenizer_fixtures.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

using tokenizer_test::stream;

namespace {

Tokenizer gguf_tokenizer(const fs::path& path) {
    const GgufFile gguf(path);
    return tokenizer_from_gguf(gguf.metadata(), path.string());
}

const Tokenizer& mistral_v3_json() {
    static const Tokenizer tok = hf_tokenizer_load_dir(shared_data_dir() / "tokenizers/mistral-7b-instruct-v0.3");
    return tok;
}

std::string message_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const MoeError& e) {
        return e.what();
    }
    return "(no MoeError)";
}

// A small byte-level BPE document: the letters a-e and space (as "Ġ"),
// merges a+b, ab+c, Ġ+a; "<|end|>" special, "<tool>" not.
json small_doc() {
    json vocab = json::object();
    int id = 0;
    for (const char* t : {"a", "b", "c", "d", "e", "\xC4\xA0", "ab", "abc",
                          "\xC4\xA0"
                          "a"})
        vocab[t] = id++;
    return {
        {"model",
         {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", json::array({"ab", "c"}), "\xC4\xA0 a"})}}},
        {"added_tokens", json::array({{{"id", 9}, {"content", "<|end|>"}, {"special", true}},
                                      {{"id", 10}, {"content", "<tool>"}, {"special", false}, {"rstrip", true}}})},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
    };
}

}  // namespace

TEST_CASE("hf tokenizer: llama.cpp's reference ids for byte-level BPE vocabularies", "[hf_tokenizer]") {
    const fs::path dir = shared_data_dir() / "reference/llama-cpp-vocab";
    struct Vocab {
        const char* name;
        int size, bos, eos;
        size_t cases;
    };
    // Qwen3.5's (pre-tokenizer qwen35) has four more cases, of combining marks.
    for (const Vocab& v : {Vocab{"ggml-vocab-gpt-2.gguf", 50257, 50256, 50256, 46},
                           Vocab{"ggml-vocab-deepseek-llm.gguf", 102400, 100000, 100001, 46},
                           Vocab{"ggml-vocab-qwen35.gguf", 151936, 151643, 151643, 50}}) {
        INFO(v.name);
        const Tokenizer tok = gguf_tokenizer(dir / v.name);
        CHECK(tok.vocab_size() == v.size);
        CHECK(tok.bos_id() == v.bos);
        CHECK(tok.eos_id() == v.eos);
        CHECK(tok.is_control(v.eos));
        const auto inputs = tokenizer_test::read_vocab_test_inputs(dir / (std::string(v.name) + ".inp"));
        const auto expected = tokenizer_test::read_vocab_test_outputs(dir / (std::string(v.name) + ".out"));
        REQUIRE(inputs.size() == v.cases);
        REQUIRE(inputs.size() == expected.size());
        for (size_t i = 0; i < inputs.size(); ++i) {
            INFO("case " << i << ": \"" << inputs[i] << "\"");
            CHECK(tok.encode(inputs[i]) == expected[i]);
            CHECK(tok.decode(expected[i]) == inputs[i]);
            CHECK(stream(tok, expected[i], true) == inputs[i]);
        }
    }
}

TEST_CASE("hf tokenizer: GGUF gpt2 vocabularies' pre-tokenizer names", "[hf_tokenizer]") {
    const fs::path path = shared_data_dir() / "reference/llama-cpp-vocab/ggml-vocab-gpt-2.gguf";
    const GgufFile gguf(path);
    std::vector<GgufKeyValue> kv;
    for (GgufKeyValue& v : gguf.metadata().values())
        if (v.key.rfind("tokenizer.", 0) == 0) kv.push_back(std::move(v));
    const auto with_pre = [&](const std::string& pre) {
        std::vector<GgufKeyValue> md = kv;
        for (GgufKeyValue& v : md)
            if (v.key == "tokenizer.ggml.pre") v = GgufKeyValue{"tokenizer.ggml.pre", pre};
        const fs::path out = test_temp_dir("hf_tokenizer_pre") / "vocab.gguf";
        gguf_write(out, md, {});
        return gguf_tokenizer(out);
    };
    // The regexes differ on digits: GPT-2 keeps a run, Llama 3 groups of three, Qwen2 one by one.
    const Tokenizer gpt2 = with_pre("gpt-2"), llama3 = with_pre("llama-bpe"), qwen2 = with_pre("qwen2");
    const std::string digits = "12345";
    CHECK(gpt2.decode(gpt2.encode(digits)) == digits);
    CHECK(llama3.encode(digits) == std::vector<int>{gpt2.piece_to_id("123"), gpt2.piece_to_id("45")});
    CHECK(qwen2.encode(digits).size() == 5);
    // o200k's (gpt-oss): a cased word splits where its case changes, a
    // contraction stays on its word, digits go by three.
    const Tokenizer o200k = with_pre("gpt-4o");
    auto joined = [&](std::initializer_list<const char*> parts) {
        std::vector<int> ids;
        for (const char* p : parts) {
            const std::vector<int> one = o200k.encode(p);
            ids.insert(ids.end(), one.begin(), one.end());
        }
        return ids;
    };
    CHECK(o200k.encode("helloWORLD") == joined({"hello", "WORLD"}));
    CHECK(o200k.encode("JSONParser don'T") == joined({"JSONParser", " don'T"}));
    CHECK(o200k.encode(digits) == llama3.encode(digits));
    CHECK(o200k.encode("a/\n") == joined({"a", "/\n"}));
    for (const char* pre : {"deepseek-llm", "deepseek-v3", "llama3", "qwen2", "gpt-4o", "default"}) {
        const Tokenizer t = with_pre(pre);
        const std::string text = "Hello, world 123 ünïcödé\n\n  x";
        CHECK(t.decode(t.encode(text)) == text);
    }
    const std::string error = message_of([&] { with_pre("no-such-pre"); });
    CHECK(error.find("tokenizer.ggml.pre: unknown pre-tokenizer 'no-such-pre'") != std::string::npos);
}

TEST_CASE("hf tokenizer: Mistral v3 tokenizer.json equals its tokenizer.model.v3", "[hf_tokenizer][slow]") {
    const fs::path dir = shared_data_dir() / "tokenizers/mistral-7b-instruct-v0.3";
    const Tokenizer& hf = mistral_v3_json();
    const Tokenizer sp = Tokenizer::load(dir / "tokenizer.model.v3");
    REQUIRE(hf.vocab_size() == sp.vocab_size());
    CHECK(hf.bos_id() == sp.bos_id());
    CHECK(hf.eos_id() == sp.eos_id());
    for (int id = 0; id < sp.vocab_size(); ++id) {
        REQUIRE(hf.id_to_piece(id) == sp.id_to_piece(id));
        REQUIRE(hf.piece_to_id(sp.id_to_piece(id)) == id);
        REQUIRE(hf.is_byte(id) == sp.is_byte(id));
        if (!sp.is_control(id) && !sp.is_unknown(id)) REQUIRE(hf.token_bytes(id) == sp.token_bytes(id));
    }

    // Every prompt of every shared prompt file, and the tokenizer tests' texts.
    std::vector<std::string> texts = tokenizer_test::sample_texts();
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(shared_data_dir() / "prompts")) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    REQUIRE(files.size() >= 5);
    for (const fs::path& path : files) {
        const PromptSet set = prompts_read(path);
        texts.insert(texts.end(), set.prompts.begin(), set.prompts.end());
    }
    size_t n_tokens = 0, n_differ = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
        const std::vector<int> ids = sp.encode(texts[i]);
        n_tokens += ids.size();
        const std::vector<int> got = hf.encode(texts[i]);
        if (got != ids) {
            ++n_differ;
            UNSCOPED_INFO("text " << i << ": \"" << texts[i].substr(0, 80) << "\"");
        }
        if (hf.encode(texts[i], false) != sp.encode(texts[i], false)) {
            ++n_differ;
            UNSCOPED_INFO("text " << i << " without the prefix: \"" << texts[i].substr(0, 80) << "\"");
        }
        if (hf.decode(ids) != sp.decode(ids)) FAIL("decoding text " << i << ": \"" << texts[i] << "\"");
        if (stream(hf, ids, true) != sp.decode(ids)) FAIL("streaming text " << i);
    }
    CHECK(n_differ == 0);
    CHECK(texts.size() > 3000);
    CHECK(n_tokens > 500000);  // the comparison covers real text, not a handful of ids
}

TEST_CASE("hf tokenizer: added and special tokens only where allowed", "[hf_tokenizer]") {
    const Tokenizer& m = mistral_v3_json();
    const int inst = m.piece_to_id("[INST]");
    REQUIRE(inst == 3);
    CHECK(m.is_control(inst));
    const std::string text = "[INST] hi [/INST]";
    const std::vector<int> plain = m.encode(text);
    CHECK(std::find(plain.begin(), plain.end(), inst) == plain.end());
    CHECK(m.decode(plain) == text);
    const std::vector<int> parsed = m.encode(text, true, SpecialTokens::PARSE);
    REQUIRE(parsed.size() >= 3);
    CHECK(parsed.front() == inst);
    CHECK(parsed.back() == m.piece_to_id("[/INST]"));
    CHECK(m.decode(parsed) == "hi ");  // special tokens decode to nothing, then the first space goes

    const Tokenizer small = hf_tokenizer_from_json(small_doc(), "small.json", {"", "<|end|>"});
    CHECK(small.eos_id() == 9);
    CHECK(small.bos_id() == -1);
    // "<tool>" is not special: matched in any text, and swallows the space after it.
    CHECK(small.encode("abc<tool> ab") == std::vector<int>{7, 10, 6});
    CHECK(small.encode("abc ab") == std::vector<int>{7, 5, 6});
    CHECK(small.encode("ab<|end|>", true, SpecialTokens::PARSE) == std::vector<int>{6, 9});
    // As text, "<|end|>" is characters this vocabulary lacks (and it has no unk).
    CHECK(message_of([&] { small.encode("ab<|end|>"); }).find("not in the vocabulary") != std::string::npos);
}

TEST_CASE("hf tokenizer: normalizers and pre-tokenizers", "[hf_tokenizer]") {
    // e + combining acute is "é" after NFC; digits split one by one or kept in runs.
    json doc = {
        {"model",
         {{"type", "BPE"},
          {"vocab",
           {{"1", 0},
            {"2", 1},
            {"12", 2},
            {"e", 3},
            {"\xCC\x81", 4},
            {"\xC3\xA9", 5},
            {"\xE2\x96\x81", 6},
            {"x", 7},
            {"\xE2\x96\x81x", 8}}},
          {"merges", json::array({"1 2", "\xE2\x96\x81 x"})}}},
        {"normalizer",
         {{"type", "Sequence"},
          {"normalizers",
           json::array({{{"type", "NFC"}},
                        {{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}})}}},
        {"pre_tokenizer", {{"type", "Digits"}, {"individual_digits", true}}},
        {"decoder",
         {{"type", "Sequence"},
          {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                    {{"type", "Fuse"}},
                                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}}};
    const Tokenizer t = hf_tokenizer_from_json(doc, "t.json");
    CHECK(t.encode("e\xCC\x81") == std::vector<int>{6, 5});
    CHECK(t.encode("e\xCC\x81", false) == std::vector<int>{5});
    CHECK(t.encode("12 x") == std::vector<int>{6, 0, 1, 8});
    CHECK(t.decode(t.encode("12 x")) == "12 x");
    doc["pre_tokenizer"]["individual_digits"] = false;
    CHECK(hf_tokenizer_from_json(doc, "t.json").encode("12 x") == std::vector<int>{6, 2, 8});

    // Split behaviours on "1x1": the matches of "x" removed, isolated or merged.
    doc.erase("normalizer");
    const auto split_ids = [&](const char* behavior, bool invert) {
        doc["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"String", "1"}}}, {"behavior", behavior}, {"invert", invert}};
        return hf_tokenizer_from_json(doc, "t.json").encode("12x12");
    };
    CHECK(split_ids("Isolated", false) == std::vector<int>{0, 1, 7, 0, 1});
    CHECK(split_ids("Removed", false) == std::vector<int>{1, 7, 1});
    CHECK(split_ids("MergedWithNext", false) == std::vector<int>{2, 7, 2});
    CHECK(split_ids("MergedWithPrevious", false) == std::vector<int>{0, 1, 7, 0, 1});
    CHECK(split_ids("Contiguous", false) == std::vector<int>{0, 1, 7, 0, 1});
    CHECK(split_ids("Removed", true) == std::vector<int>{0, 0});

    // Metaspace: the replacement, prepended first only, split before each "▁".
    doc["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
    const Tokenizer meta = hf_tokenizer_from_json(doc, "t.json");
    CHECK(meta.encode("x x") == std::vector<int>{8, 8});
    CHECK(meta.encode("x x", false) == std::vector<int>{7, 8});
}

TEST_CASE("hf tokenizer: a tokenizer.json that amplifies text fails within its budget", "[hf_tokenizer]") {
    // 22 stacked ByteLevel pre-tokenizers: each doubles the bytes of "é"
    // (the issue saw 9 s and 448 MB for "hi é").
    json stacked = small_doc();
    json steps = json::array();
    for (int i = 0; i < 22; ++i) steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}});
    stacked["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
    const Tokenizer t = hf_tokenizer_from_json(stacked, "stacked.json");
    auto error = std::make_shared<std::string>();
    CHECK(finishes_within(60, [&t, error] { *error = message_of([&] { t.encode("hi \xC3\xA9"); }); }));
    INFO(*error);
    CHECK(error->starts_with("stacked.json: tokenizing "));
    CHECK(error->find("more than") != std::string::npos);

    // A normalizer Replace of "a" by 1 MB (the issue saw over 90 s).
    json replace = small_doc();
    replace["normalizer"] = {
        {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(1 << 20, 'b')}};
    const Tokenizer r = hf_tokenizer_from_json(replace, "replace.json");
    error = std::make_shared<std::string>();
    CHECK(finishes_within(60, [&r, error] { *error = message_of([&] { r.encode(std::string(100, 'a')); }); }));
    INFO(*error);
    CHECK(error->starts_with("replace.json: tokenizing would build a string or list of more than "));
    CHECK(r.encode("bcd") == std::vector<int>{1, 2, 3});

    // A decoder Replace that makes every token's bytes 1 MB (the issue saw
    // 4 GB allocated at load and bad_alloc): refused at load.
    json decoder = small_doc();
    decoder["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         json::array({{{"type", "ByteLevel"}},
                      {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(1 << 20, 'b')}}})}};
    CHECK(message_of([&] { hf_tokenizer_from_json(decoder, "decoder.json"); }) ==
          "decoder.json: loading would build a string or list of more than 65536 bytes");
    // A vocabulary id far past the tokens: its table is charged before it is made.
    json sparse = small_doc();
    sparse["added_tokens"][0]["id"] = (1 << 24) - 1;
    CHECK(message_of([&] {
              hf_tokenizer_from_json(sparse, "sparse.json");
          }).starts_with("sparse.json: loading used more than 268435456 bytes"));

    // Text the steps do not amplify tokenizes as before.
    CHECK(t.encode("ab") == std::vector<int>{6});
}

TEST_CASE("hf tokenizer: the Detokenizer streams byte-level tokens that split characters", "[hf_tokenizer]") {
    const Tokenizer tok = gguf_tokenizer(shared_data_dir() / "reference/llama-cpp-vocab/ggml-vocab-gpt-2.gguf");
    const std::string text = "naïve café, 日本語のテキスト 😀🦙 and ∑ done";
    const std::vector<int> ids = tok.encode(text);
    bool split_char = false;
    for (int id : ids) split_char |= !tokenizer_test::valid_utf8(tok.token_bytes(id));
    CHECK(split_char);  // some token holds part of a character
    Detokenizer detok(tok, true);
    std::string out;
    for (int id : ids) {
        const std::string piece = detok.push(id);
        CHECK(tokenizer_test::valid_utf8(piece));
        out += piece;
    }
    out += detok.flush();
    CHECK(out == text);
    CHECK(tok.decode(ids) == text);
    // A character cut short: flushed as U+FFFD, never as a broken byte.
    const auto cut =
        std::find_if(ids.begin(), ids.end(), [&](int id) { return !tokenizer_test::valid_utf8(tok.token_bytes(id)); });
    REQUIRE(cut != ids.end());
    Detokenizer part(tok, true);
    std::string partial;
    for (auto it = ids.begin(); it <= cut; ++it) partial += part.push(*it);
    partial += part.flush();
    CHECK(tokenizer_test::valid_utf8(partial));
    CHECK(partial.find("\xEF\xBF\xBD") != std::string::npos);
}

TEST_CASE("hf tokenizer: a malformed tokenizer.json is refused in one line naming the key", "[hf_tokenizer]") {
    struct Case {
        std::function<void(json&)> change;
        std::string expected;
    };
    const std::vector<Case> cases = {
        {[](json& d) { d.erase("model"); }, "tokenizer.json: model: missing key"},
        {[](json& d) { d["model"]["type"] = "Unigram"; },
         "tokenizer.json: model.type: unsupported model type 'Unigram'"},
        {[](json& d) { d["model"]["merges"][1] = "ab"; }, "tokenizer.json: model.merges[1]: 'ab' is not two tokens"},
        {[](json& d) { d["model"]["merges"][2] = "a q"; },
         "tokenizer.json: model.merges[2]: token 'q' is not in the vocabulary"},
        {[](json& d) { d["model"]["merges"][0] = 5; }, "tokenizer.json: model.merges[0]: not a string"},
        {[](json& d) { d["model"]["vocab"]["a"] = "zero"; }, "tokenizer.json: model.vocab[\"a\"]: not an integer id"},
        {[](json& d) { d["model"]["vocab"].erase("d"); }, "tokenizer.json: model.vocab: id 3 has no token"},
        {[](json& d) { d["model"]["vocab"]["q"] = 1; }, "is also"},
        {[](json& d) { d["model"]["unk_token"] = "<unk>"; },
         "tokenizer.json: model.unk_token: '<unk>' is not in the vocabulary"},
        {[](json& d) {
             d["pre_tokenizer"] = {{"type", "Whitespace"}};
         },
         "tokenizer.json: pre_tokenizer.type: unsupported pre-tokenizer type 'Whitespace'"},
        {[](json& d) {
             d["pre_tokenizer"] = {
                 {"type", "Sequence"},
                 {"pretokenizers",
                  json::array({{{"type", "ByteLevel"}},
                               {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}})}};
         },
         "tokenizer.json: pre_tokenizer.pretokenizers[1].pattern.Regex: bad regex at offset"},
        {[](json& d) {
             d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "a"}}}, {"behavior", "Sideways"}};
         },
         "tokenizer.json: pre_tokenizer.behavior: unknown behavior 'Sideways'"},
        {[](json& d) {
             d["pre_tokenizer"] = {{"type", "Split"}, {"behavior", "Isolated"}};
         },
         "tokenizer.json: pre_tokenizer.pattern: missing key"},
        {[](json& d) {
             d["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
         },
         "tokenizer.json: pre_tokenizer.prepend_scheme: unknown scheme 'sometimes'"},
        {[](json& d) {
             d["normalizer"] = {{"type", "Lowercase"}};
         },
         "tokenizer.json: normalizer.type: unsupported normalizer type 'Lowercase'"},
        {[](json& d) {
             d["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Glob", "*"}}}, {"content", ""}};
         },
         "tokenizer.json: normalizer.pattern: neither String nor Regex"},
        {[](json& d) {
             d["decoder"] = {{"type", "WordPiece"}};
         },
         "tokenizer.json: decoder.type: unsupported decoder type 'WordPiece'"},
        {[](json& d) {
             d["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", 0}, {"stop", 2}};
         },
         "tokenizer.json: decoder: only Strip of one leading space"},
        {[](json& d) { d["added_tokens"][0].erase("id"); }, "tokenizer.json: added_tokens[0].id: missing key"},
        {[](json& d) { d["added_tokens"][1]["id"] = 0; },
         "tokenizer.json: added_tokens[1].content: '<tool>', but id 0 is 'a' in the vocabulary"},
        {[](json& d) { d["added_tokens"][1]["special"] = "yes"; },
         "tokenizer.json: added_tokens[1].special: not a boolean"},
        {[](json& d) { d = json::array(); }, "tokenizer.json: (document): not a JSON object"},
    };
    for (size_t i = 0; i < cases.size(); ++i) {
        INFO("case " << i);
        json doc = small_doc();
        cases[i].change(doc);
        const std::string error = message_of([&] { hf_tokenizer_from_json(doc, "tokenizer.json"); });
        CHECK(error.find(cases[i].expected) != std::string::npos);
        CHECK(error.find('\n') == std::string::npos);
        UNSCOPED_INFO(error);
    }
    const std::string bad_json = message_of([] { hf_tokenizer_parse("{\"model\": ", "tokenizer.json"); });
    CHECK(bad_json.find("tokenizer.json: (document): not valid JSON") != std::string::npos);
    const std::string bos = message_of([] { hf_tokenizer_from_json(small_doc(), "tokenizer.json", {"<s>", ""}); });
    CHECK(bos.find("tokenizer.json: bos_token: '<s>' is not a token") != std::string::npos);
}

TEST_CASE("hf tokenizer: a plain-text prompt starts with BOS only when the tokenizer adds one", "[hf_tokenizer]") {
    // Mistral's tokenizer_config.json: bos_token <s>, add_bos_token true.
    CHECK(mistral_v3_json().prompt_bos() == 1);
    CHECK(mistral_v3_json().encode_prompt("Hello world").front() == 1);
    CHECK(mistral_v3_json().encode_prompt("Hello world").size() == mistral_v3_json().encode("Hello world").size() + 1);

    const fs::path dir = test_temp_dir("hf_tokenizer_add_bos");
    std::ofstream(dir / "tokenizer.json") << small_doc().dump();
    const auto with_config = [&](const json& config) {
        std::ofstream(dir / "tokenizer_config.json") << config.dump();
        return hf_tokenizer_load_dir(dir);
    };
    // A BOS without add_bos_token: added, as Hugging Face's Llama tokenizers do.
    const Tokenizer added = with_config({{"bos_token", "<|end|>"}});
    CHECK(added.prompt_bos() == 9);
    CHECK(added.encode_prompt("ab") == std::vector<int>{9, 6});
    // add_bos_token false (Qwen's, with a bos_token set by a converter): none.
    const Tokenizer off = with_config({{"bos_token", "<|end|>"}, {"add_bos_token", false}});
    CHECK(off.bos_id() == 9);
    CHECK(off.prompt_bos() == -1);
    CHECK(off.encode_prompt("ab") == std::vector<int>{6});
    // No bos_token (Qwen's own tokenizer_config.json): none, whatever add_bos_token says.
    CHECK(with_config({{"bos_token", nullptr}, {"add_bos_token", true}}).encode_prompt("ab") == std::vector<int>{6});
    CHECK(message_of([&] {
              with_config({{"bos_token", "<|end|>"}, {"add_bos_token", "yes"}});
          }).find("tokenizer_config.json: add_bos_token: not true or false") != std::string::npos);
}
