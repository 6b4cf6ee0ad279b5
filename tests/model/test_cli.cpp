// The moe-server executable as a user runs it: synth-model, generate,
// tokenize, perplexity, and the one-line errors with exit code 2 for bad
// model folders and bad flags.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "reference_model.h"
#include "test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A private copy of the tiny model that a test may damage.
fs::path copy_of_tiny(const std::string& tag) {
    fs::path dir = test_temp_dir(tag) / "model";
    fs::copy(test_model_dir("tiny"), dir, fs::copy_options::recursive);
    return dir;
}

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == s.size() - 1; }

void require_clean_error(const CommandResult& r, const std::string& must_contain) {
    INFO("stderr: " << r.err);
    REQUIRE(r.exit_code == 2);
    REQUIRE(one_line(r.err));
    REQUIRE(r.err.find("moe-server: error: ") == 0);
    REQUIRE(r.err.find(must_contain) != std::string::npos);
}

}  // namespace

TEST_CASE("synth-model then generate streams text and a stats line", "[cli]") {
    fs::path dir = test_temp_dir("cli-gen") / "tiny";
    CommandResult s = moe({"synth-model", "--preset", "tiny", "--out", dir.string(), "--seed", "3"});
    INFO(s.err);
    REQUIRE(s.exit_code == 0);
    for (const char* f : {"config.json", "tokenizer.model", "tokenizer_config.json", "model.safetensors"})
        REQUIRE(fs::exists(dir / f));

    CommandResult g = moe({"generate", "--model", dir.string(), "--prompt", "Once upon a time", "--max-tokens", "12",
                           "--seed", "1", "--ignore-eos", "--threads", "2"});
    INFO(g.err);
    REQUIRE(g.exit_code == 0);
    REQUIRE(g.out.rfind("Once upon a time", 0) == 0);
    REQUIRE(g.out.size() > std::string("Once upon a time\n").size());
    REQUIRE(g.err.find("generated 12 tokens") != std::string::npos);
    REQUIRE(g.err.find("decode") != std::string::npos);
    REQUIRE(g.err.find("prefill") != std::string::npos);

    // Same seed, same output.
    CommandResult g2 = moe({"generate", "--model", dir.string(), "--prompt", "Once upon a time", "--max-tokens", "12",
                            "--seed", "1", "--ignore-eos", "--threads", "2"});
    REQUIRE(g2.out == g.out);
}

TEST_CASE("generate --beam-width prints the best or the N best with scores", "[cli]") {
    std::string dir = test_model_dir("tiny").string();
    std::vector<std::string> base = {"generate", "--model",      dir, "--prompt", "Once upon a time", "--max-tokens",
                                     "10",       "--ignore-eos", "--threads", "2"};
    auto with = [&](std::vector<std::string> more) {
        std::vector<std::string> a = base;
        a.insert(a.end(), more.begin(), more.end());
        return moe(a);
    };
    CommandResult greedy = with({"--greedy"});
    CommandResult width1 = with({"--beam-width", "1"});
    INFO(width1.err);
    REQUIRE(width1.exit_code == 0);
    REQUIRE(width1.out == greedy.out);  // width 1 is greedy decoding
    REQUIRE(width1.err.find("beam search: 9 steps") != std::string::npos);

    CommandResult best = with({"--beam-width", "4", "--length-penalty", "0.5"});
    REQUIRE(best.exit_code == 0);
    REQUIRE(best.out.rfind("Once upon a time", 0) == 0);
    REQUIRE(best.err.find("tokens per routed expert per step: max ") != std::string::npos);

    CommandResult three = with({"--beam-width", "4", "--length-penalty", "0.5", "--num-return", "3"});
    INFO(three.out);
    REQUIRE(three.exit_code == 0);
    REQUIRE(three.out.rfind("[0] score ", 0) == 0);
    REQUIRE(three.out.find("\n[1] score ") != std::string::npos);
    REQUIRE(three.out.find("\n[2] score ") != std::string::npos);
    REQUIRE(three.out.find("\n[3] score ") == std::string::npos);
    // The first of the three is the best alone.
    size_t text_at = three.out.find('\n') + 1;
    REQUIRE(three.out.compare(text_at, best.out.size(), best.out) == 0);

    require_clean_error(with({"--beam-width", "0"}), "--beam-width");
    require_clean_error(with({"--beam-width", "33"}), "--beam-width");
    require_clean_error(with({"--beam-width", "4", "--num-return", "5"}), "--num-return");
    require_clean_error(with({"--beam-width", "4", "--length-penalty", "-1"}), "--length-penalty");
    require_clean_error(with({"--beam-width", "4", "--temperature", "0.7"}), "--temperature");
    require_clean_error(with({"--beam-width", "4", "--top-p", "0.5"}), "--top-p");
    require_clean_error(with({"--num-return", "2"}), "--num-return");
}

TEST_CASE("tokenize --chat reproduces Mistral's reference ids", "[cli]") {
    fs::path ref = shared_data_dir() / "reference" / "mistral-common";
    CommandResult r = moe({"tokenize", "--model", test_model_dir("tiny").string(), "--chat",
                           (ref / "no_tools__sample.json").string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    json want = json::parse(read_file(ref / "no_tools__tokens_v1.json"))["tokens"];
    REQUIRE(json::parse(r.out)["tokens"] == want);

    CommandResult t = moe({"tokenize", "--model", test_model_dir("tiny").string(), "--text", "Hello world"});
    REQUIRE(json::parse(t.out)["tokens"] == json::array({1, 22557, 1526}));
    CommandResult n = moe({"tokenize", "--model", test_model_dir("tiny").string(), "--text", "Hello world", "--no-bos"});
    REQUIRE(json::parse(n.out)["tokens"] == json::array({22557, 1526}));
}

TEST_CASE("perplexity --json agrees with the reference model", "[cli]") {
    fs::path dir = test_model_dir("tiny");
    fs::path text = test_temp_dir("ppl") / "text.txt";
    std::ofstream(text) << "The quick brown fox jumps over the lazy dog. It was the best of times.";
    CommandResult r = moe({"perplexity", "--model", dir.string(), "--text", text.string(), "--json", "--threads", "2"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    json j = json::parse(r.out);

    CommandResult t = moe({"tokenize", "--model", dir.string(), "--text", read_file(text)});
    std::vector<int> tokens = json::parse(t.out)["tokens"];
    ReferenceModel ref = ReferenceModel::load(dir);
    double nll = reference_nll_sum(ref, tokens);
    double mean = nll / double(tokens.size() - 1);
    REQUIRE(j["tokens"] == tokens.size() - 1);
    REQUIRE(j["mean_nll"].get<double>() == Approx(mean).epsilon(1e-4));
    REQUIRE(j["ppl"].get<double>() == Approx(std::exp(mean)).epsilon(1e-3));
}

TEST_CASE("bad model folders give one clear line and exit code 2", "[cli]") {
    SECTION("missing folder") {
        require_clean_error(moe({"generate", "--model", "/nonexistent/model", "--prompt", "hi"}), "config.json");
    }
    SECTION("tokenizer missing") {
        fs::path dir = copy_of_tiny("no-tok");
        fs::remove(dir / "tokenizer.model");
        require_clean_error(moe({"generate", "--model", dir.string(), "--prompt", "hi"}), "tokenizer.model");
    }
    SECTION("tokenizer corrupt") {
        fs::path dir = copy_of_tiny("bad-tok");
        std::ofstream(dir / "tokenizer.model", std::ios::trunc) << "this is not a sentencepiece model";
        require_clean_error(moe({"generate", "--model", dir.string(), "--prompt", "hi"}), "tokenizer.model");
    }
    SECTION("truncated weights") {
        fs::path dir = copy_of_tiny("trunc");
        fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") / 2);
        require_clean_error(moe({"generate", "--model", dir.string(), "--prompt", "hi"}), "model.safetensors");
    }
    SECTION("config not JSON") {
        fs::path dir = copy_of_tiny("cfg");
        std::ofstream(dir / "config.json", std::ios::trunc) << "{ not json";
        require_clean_error(moe({"perplexity", "--model", dir.string(), "--text", "/etc/hostname"}), "config.json");
    }
}

TEST_CASE("bad flags give one clear line and exit code 2", "[cli]") {
    std::string dir = test_model_dir("tiny").string();
    require_clean_error(moe({"generate", "--model", dir}), "--prompt");
    require_clean_error(moe({"generate", "--model", dir, "--prompt", "x", "--max-tokens", "many"}), "--max-tokens");
    require_clean_error(moe({"generate", "--model", dir, "--prompt", "x", "--temperature", "-1"}), "--temperature");
    require_clean_error(moe({"generate", "--model", dir, "--prompt", "x", "--bogus"}), "--bogus");
    require_clean_error(moe({"synth-model", "--preset", "huge", "--out", "/tmp/x"}), "huge");
    require_clean_error(moe({"tokenize", "--model", dir, "--chat", "/nonexistent.json"}), "/nonexistent.json");
    CommandResult u = moe({"frobnicate"});
    REQUIRE(u.exit_code == 2);
}
