// The moe-server executable as a user runs it: synth-model, generate,
// tokenize, perplexity, and the one-line errors with exit code 2 for bad
// model folders and bad flags.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/formats/safetensors.h"
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

TEST_CASE("tokenize --model DIR with only tokenizer.json: text and Jinja-rendered chats", "[cli]") {
    const fs::path dir = tokenizer_json_model_dir(
        "tokenize-json", read_file(shared_data_dir() / "chat_templates" / "Qwen-Qwen3-0.6B.jinja"));
    // No BOS: the vocabulary has none (tokenizer_config.json's bos_token is null).
    CommandResult t = moe({"tokenize", "--model", dir.string(), "--text", "the the"});
    INFO(t.err);
    REQUIRE(t.exit_code == 0);
    CHECK(json::parse(t.out)["tokens"] == json::array({116, 257, 258}));
    // A chat file: rendered by the template, its <|im_start|> / <|im_end|> as ids,
    // chat_template_kwargs reaching it.
    const fs::path chat = dir / "chat.json";
    std::ofstream(chat) << R"({"messages":[{"role":"user","content":"the"}],
                               "chat_template_kwargs":{"enable_thinking":false}})";
    CommandResult c = moe({"tokenize", "--model", dir.string(), "--chat", chat.string()});
    INFO(c.err);
    REQUIRE(c.exit_code == 0);
    const std::vector<int> got = json::parse(c.out)["tokens"];
    REQUIRE(got.size() > 4);
    CHECK(got[0] == 260);
    CHECK(std::count(got.begin(), got.end(), 260) == 2);
    CHECK(std::count(got.begin(), got.end(), 261) == 1);
    CHECK(std::count(got.begin(), got.end(), 262) == 1);  // <think>, an added token
    CHECK(std::count(got.begin(), got.end(), 263) == 1);
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

TEST_CASE("plain-text prompts start with BOS only when the tokenizer adds one", "[cli]") {
    const auto prompt_tokens = [](const CommandResult& r) {
        const size_t at = r.err.find("prompt ");
        REQUIRE(at != std::string::npos);
        return std::stoi(r.err.substr(at + 7));
    };
    const fs::path text = test_temp_dir("prompt-bos") / "text.txt";
    SECTION("Qwen-style tokenizer.json: no bos_token, add_bos_token false") {
        const fs::path dir = tokenizer_json_model_dir(
            "prompt-bos-json", read_file(shared_data_dir() / "chat_templates" / "Qwen-Qwen3-0.6B.jinja"));
        std::ofstream(text) << "the the";
        CommandResult t = moe({"tokenize", "--model", dir.string(), "--text", "the the"});
        INFO(t.err);
        REQUIRE(json::parse(t.out)["tokens"] == json::array({116, 257, 258}));
        CommandResult g = moe({"generate", "--model", dir.string(), "--prompt", "the the", "--max-tokens", "1",
                               "--greedy", "--threads", "2"});
        INFO(g.err);
        REQUIRE(g.exit_code == 0);
        CHECK(prompt_tokens(g) == 3);
        CommandResult b = moe({"generate", "--model", dir.string(), "--prompt", "the the", "--max-tokens", "1",
                               "--beam-width", "2", "--threads", "2"});
        INFO(b.err);
        CHECK(prompt_tokens(b) == 3);
        CommandResult p = moe({"perplexity", "--model", dir.string(), "--text", text.string(), "--json"});
        INFO(p.err);
        REQUIRE(p.exit_code == 0);
        CHECK(json::parse(p.out)["tokens"] == 2);  // 257 after 116, 258 after both
        // The BOS would be <|endoftext|> (259, config.json's bos_token_id): never the first id.
    }
    SECTION("synth: Qwen preset: a BOS piece and add_bos_token false") {
        CommandResult t = moe({"tokenize", "--model", "synth:qwen3-moe-mini", "--text", "Hello world"});
        INFO(t.err);
        REQUIRE(t.exit_code == 0);
        const std::vector<int> ids = json::parse(t.out)["tokens"];
        REQUIRE(!ids.empty());
        CHECK(ids[0] != 50256);  // the stand-in's <|endoftext|>, its config's bos_token_id
        CommandResult n = moe({"tokenize", "--model", "synth:qwen3-moe-mini", "--text", "Hello world", "--no-bos"});
        CHECK(json::parse(n.out)["tokens"] == json::parse(t.out)["tokens"]);
    }
    SECTION("Mixtral's SentencePiece tokenizer: BOS first") {
        const fs::path dir = test_model_dir("tiny");
        std::ofstream(text) << "Hello world";
        CommandResult g = moe({"generate", "--model", dir.string(), "--prompt", "Hello world", "--max-tokens", "1",
                               "--greedy", "--threads", "2"});
        INFO(g.err);
        REQUIRE(g.exit_code == 0);
        CHECK(prompt_tokens(g) == 3);  // 1, 22557, 1526
        CommandResult p = moe({"perplexity", "--model", dir.string(), "--text", text.string(), "--json"});
        INFO(p.err);
        REQUIRE(p.exit_code == 0);
        CHECK(json::parse(p.out)["tokens"] == 2);
    }
}

TEST_CASE("bench server renders its in-process prompt as the server renders the chat", "[cli]") {
    // Qwen2.5's template (ChatML with a default system turn, no BOS): the
    // engine's prompt and the HTTP request's first turn are the same tokens.
    const std::string model = tokenizer_json_model_dir("bench-server", read_file(shared_data_dir() / "chat_templates" /
                                                                                 "Qwen-Qwen2.5-7B-Instruct.jinja"))
                                  .string();
    CommandResult r = moe({"bench", "server", "--model", model, "--tokens", "4", "--conversations", "1", "--repeats",
                           "1", "--reply-tokens", "2"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<json> lines;
    std::istringstream out(r.out);
    for (std::string line; std::getline(out, line);) lines.push_back(json::parse(line));
    REQUIRE(lines.size() == 2);
    REQUIRE(lines[0]["bench"] == "server_decode");
    REQUIRE(lines[1]["bench"] == "server_ttft");
    CHECK(lines[0]["prompt_tokens"] == lines[1]["per_conversation"][0]["turn1_prompt_tokens"]);
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
    // std::filesystem throws for these (a loop of links fails for root too,
    // where chmod 000 does not): each must still be a MoeError naming the path.
    SECTION("config.json a loop of symbolic links") {
        fs::path dir = copy_of_tiny("cfg-loop");
        fs::remove(dir / "config.json");
        fs::create_symlink("config.json", dir / "config.json");
        require_clean_error(moe({"generate", "--model", dir.string(), "--prompt", "hi"}),
                            (dir / "config.json").string() + ": cannot access");
    }
    SECTION("the model folder a loop of symbolic links") {
        fs::path dir = test_temp_dir("dir-loop") / "model";
        fs::create_symlink("model", dir);
        require_clean_error(moe({"tokenize", "--model", dir.string(), "--text", "hi"}),
                            dir.string() + ": cannot access");
    }
    SECTION("weights and generation_config.json loops of symbolic links") {
        for (const char* name : {"model.safetensors", "generation_config.json", "tokenizer.model"}) {
            fs::path dir = copy_of_tiny(std::string("loop-") + name);
            fs::remove(dir / name);
            fs::create_symlink(name, dir / name);
            require_clean_error(moe({"generate", "--model", dir.string(), "--prompt", "hi"}), (dir / name).string());
        }
    }
    SECTION("config.json a folder, the model a file") {
        fs::path dir = copy_of_tiny("cfg-dir");
        fs::remove(dir / "config.json");
        fs::create_directory(dir / "config.json");
        require_clean_error(moe({"generate", "--model", dir.string(), "--prompt", "hi"}),
                            (dir / "config.json").string() + ": not a regular file");
        require_clean_error(moe({"generate", "--model", (dir / "model.safetensors").string(), "--prompt", "hi"}),
                            (dir / "model.safetensors").string() + ": not a folder");
    }
    SECTION("an unreadable folder") {
        if (::geteuid() == 0) {
            WARN("skipped: running as root, chmod 000 does not stop reads (the loops of links cover the same path)");
            return;
        }
        fs::path dir = copy_of_tiny("unreadable");
        fs::permissions(dir, fs::perms::none);
        CommandResult r = moe({"generate", "--model", dir.string(), "--prompt", "hi"});
        fs::permissions(dir, fs::perms::owner_all);
        require_clean_error(r, dir.string());
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

TEST_CASE("a wrong path says what is wrong with it", "[cli]") {
    fs::path dir = test_temp_dir("cli-paths");
    require_clean_error(moe({"perplexity", "--model", test_model_dir("tiny").string(), "--text", dir.string()}),
                        dir.string() + ": is a folder, not a file");
    // statvfs of /proc says 0 bytes free: the problem is that nothing can be
    // created there, not the space.
    require_clean_error(moe({"synth-model", "--preset", "tiny", "--out", "/proc/moe-server-test"}),
                        "/proc/moe-server-test: cannot create a folder there");
}

namespace {

// A copy of the tiny model whose vocab_size is `vocab`: the embedding and
// output rows cut, or padded with rows of zeros, to match.
fs::path tiny_with_vocab(const std::string& tag, int vocab) {
    fs::path dir = copy_of_tiny(tag);
    json config = json::parse(read_file(dir / "config.json"));
    const int64_t old_vocab = config["vocab_size"].get<int64_t>();
    config["vocab_size"] = vocab;
    std::ofstream(dir / "config.json", std::ios::trunc) << config.dump(2);
    std::deque<std::string> storage;  // stays put as it grows: views point into it
    std::vector<TensorView> views;
    {
        SafetensorsSet set(dir);
        for (const auto& [name, t] : set.tensors()) {
            TensorView v = t;
            if (t.shape.size() == 2 && t.shape[0] == old_vocab) {
                const size_t row = t.nbytes / size_t(old_vocab);
                std::string bytes(static_cast<const char*>(t.data), std::min(t.nbytes, row * size_t(vocab)));
                bytes.resize(row * size_t(vocab), '\0');
                storage.push_back(std::move(bytes));
                v.shape[0] = vocab;
                v.data = storage.back().data();
                v.nbytes = storage.back().size();
            }
            views.push_back(v);
        }
        safetensors_write(dir / "padded.safetensors", views);
    }
    fs::rename(dir / "padded.safetensors", dir / "model.safetensors");
    return dir;
}

}  // namespace

TEST_CASE("a vocab_size padded above the tokenizer loads, a smaller one is refused", "[cli]") {
    // Larger (Qwen's padding): the ids above the tokenizer's are never generated.
    fs::path big = tiny_with_vocab("vocab-big", 32064);
    for (const std::vector<std::string>& how :
         {std::vector<std::string>{"--temperature", "2"}, std::vector<std::string>{"--beam-width", "2"}}) {
        std::vector<std::string> args = {"generate", "--model",      big.string(), "--prompt",
                                         "hi",       "--max-tokens", "16",         "--ignore-eos"};
        args.insert(args.end(), how.begin(), how.end());
        CommandResult r = moe(args);
        INFO(r.err);
        CHECK(r.exit_code == 0);
    }
    // Prompt ids are the tokenizer's.
    CommandResult t = moe({"tokenize", "--model", big.string(), "--text", "Hello world"});
    CHECK(json::parse(t.out)["tokens"] == json::array({1, 22557, 1526}));
    // Smaller: the tokenizer's ids would index past the embeddings.
    fs::path small = tiny_with_vocab("vocab-small", 31000);
    require_clean_error(moe({"generate", "--model", small.string(), "--prompt", "hi", "--max-tokens", "4"}),
                        "exceeds the model's vocab_size 31000");
}

TEST_CASE("every numeric flag refuses non-finite negative or overflowing values", "[cli][slow]") {
    const std::string model = test_model_dir("tiny").string();
    struct Row {
        std::vector<std::string> command;  // up to the flag
        std::string flag;
    };
    const std::vector<std::string> generate = {"generate", "--model", model, "--prompt", "x"};
    const std::vector<std::string> beam = {"generate", "--model", model, "--prompt", "x", "--beam-width", "2"};
    const std::vector<std::string> perplexity = {"perplexity", "--model", model, "--text", "/etc/hostname"};
    const std::vector<std::string> profile = {"profile", "--model", model, "--prompts", "p.json", "--out", "o.json"};
    const std::vector<std::string> synth = {"synth-model", "--preset", "tiny", "--out", "/nonexistent/never"};
    const std::vector<std::string> serve = {"serve", "--model", model};
    const std::vector<std::string> calibrate = {"calibrate", "--model", model};
    const std::vector<Row> rows = {
        {generate, "--max-tokens"},
        {generate, "--temperature"},
        {generate, "--top-k"},
        {generate, "--top-p"},
        {generate, "--min-p"},
        {generate, "--repeat-penalty"},
        {generate, "--presence-penalty"},
        {generate, "--frequency-penalty"},
        {generate, "--seed"},
        {generate, "--threads"},
        {generate, "--ctx"},
        {generate, "--beam-width"},
        {beam, "--length-penalty"},
        {beam, "--num-return"},
        {generate, "--emulate-gpu"},
        {generate, "--gpu-memory"},
        {generate, "--gpu-device"},
        {perplexity, "--ctx"},
        {perplexity, "--threads"},
        {perplexity, "--emulate-gpu"},
        {synth, "--seed"},
        {synth, "--shard-mb"},
        {profile, "--limit"},
        {profile, "--gen-tokens"},
        {profile, "--threads"},
        {profile, "--ctx"},
        {calibrate, "--threads"},
        {calibrate, "--reps"},
        {calibrate, "--gpu-device"},
        {serve, "--port"},
        {serve, "--ctx"},
        {serve, "--threads"},
        {serve, "--max-queue"},
        {serve, "--emulate-gpu"},
        {serve, "--gpu-memory"},
        {{"bench", "decode", "--model", model}, "--tokens"},
        {{"bench", "prefill", "--model", model}, "--repeat"},
        {{"bench", "beam", "--model", model}, "--widths"},
        {{"bench", "beam", "--model", model}, "--tokens"},
        {{"bench", "latency", "--model", model}, "--reps"},
        {{"bench", "placement", "--model", model, "--profile", "a", "--eval", "b"}, "--seeds"},
        {{"bench", "gpu"}, "--reps"},
        {{"bench", "server", "--model", model}, "--conversations"},
        {{"bench", "server", "--model", model}, "--reply-tokens"},
    };
    for (const Row& row : rows) {
        for (const char* value : {"nan", "-inf", "1e99", "-99999999999999999999"}) {
            std::vector<std::string> words = row.command;
            words.push_back(row.flag);
            words.push_back(value);
            CommandResult r = moe(words);
            INFO(row.command[0] << " " << row.flag << " " << value << ": " << r.err);
            REQUIRE(r.exit_code == 2);  // serve words its one line its own way ("moe-server serve: ")
            REQUIRE(one_line(r.err));
            REQUIRE(r.err.find(row.flag + ": ") != std::string::npos);
        }
    }
}

TEST_CASE("bench kernels --kernel names the kernel families it knows", "[cli]") {
    // Refused before the ceilings are measured: one line naming the choices.
    require_clean_error(moe({"bench", "kernels", "--kernel", "mla"}),
                        "--kernel: 'mla' is not one of all, expert, delta_rule, attention");
}

TEST_CASE("serve refuses an empty --api-key or --host, and prints an IPv6 address in brackets", "[cli]") {
    const std::string tiny = test_model_dir("tiny").string();
    // An empty key would turn authentication off without a word.
    require_clean_error(moe({"serve", "--model", tiny, "--api-key", ""}), "--api-key: empty");
    require_clean_error(moe({"serve", "--model", tiny, "--api-key="}), "--api-key: empty");
    // An empty host listened on [::1] only and printed http://:PORT/.
    require_clean_error(moe({"serve", "--model", tiny, "--host", ""}), "--host: empty");
    // The start line's URL is one a browser opens: [::1], not :::1. The
    // server is stopped by SIGTERM once it has printed it.
    CommandResult r = run_command({"/usr/bin/timeout", "--preserve-status", "-s", "TERM", "2", moe_server_binary().string(), "serve",
                                   "--model", tiny, "--host", "::1", "--port", "0"});
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("listening on http://[::1]:") != std::string::npos);
    CHECK(r.err.find("http://::1") == std::string::npos);
}

TEST_CASE("MOE_CPU_ISA is checked as --cpu-isa is", "[cli]") {
    const std::string tiny = test_model_dir("tiny").string();
    const std::vector<std::string> generate = {"generate", "--model", tiny, "--prompt", "x", "--max-tokens", "1"};
    auto with_env = [&](const std::string& value) {
        std::vector<std::string> argv = {"/usr/bin/env", "MOE_CPU_ISA=" + value, moe_server_binary().string()};
        argv.insert(argv.end(), generate.begin(), generate.end());
        return run_command(argv);
    };
    require_clean_error(with_env("bogus"), "MOE_CPU_ISA: unknown path 'bogus' (scalar, avx2, avx512, avx512bf16)");
    std::vector<std::string> flag = generate;
    flag.insert(flag.end(), {"--cpu-isa", "bogus"});
    require_clean_error(moe(flag), "--cpu-isa: unknown path 'bogus' (scalar, avx2, avx512, avx512bf16)");
    // Every CPU runs the scalar path.
    CommandResult scalar = with_env("scalar");
    INFO(scalar.err);
    CHECK(scalar.exit_code == 0);
}

TEST_CASE("every placement flag without a device is refused by the same rule", "[cli]") {
    const std::string tiny = test_model_dir("tiny").string();
    const std::vector<std::vector<std::string>> flags = {
        {"--cache-policy", "lru"}, {"--cache-share", "0.5"}, {"--cache-scope", "layer"},
        {"--prefetch", "off"},     {"--profile", "/nonexistent.json"},
    };
    for (const std::vector<std::string>& f : flags) {
        std::vector<std::string> words = {"generate",     "--model", tiny, "--prompt", "x", "--max-tokens", "1",
                                          "--gpu-device", "none"};
        words.insert(words.end(), f.begin(), f.end());
        require_clean_error(moe(words), f[0] + ": needs a device (a GPU, or --emulate-gpu) to place experts on");
    }
}

TEST_CASE("quantize checks --out before any work", "[cli]") {
    const fs::path dir = test_temp_dir("quantize-out");
    const std::string tiny = test_model_dir("tiny").string();
    auto quantize = [&](const std::string& out) {
        return moe({"quantize", "--model", tiny, "--type", "q8_0", "--out", out});
    };
    // No progress bar (the work) before the refusal: one line only.
    require_clean_error(quantize(""), "--out: empty");
    require_clean_error(quantize(dir.string()), "not a regular file");
    require_clean_error(quantize(dir.string() + "/"), "names a folder");
    require_clean_error(quantize((dir / "missing" / "x.gguf").string()),
                        "--out: cannot write into " + (dir / "missing").string());
    std::ofstream(dir / "file") << "x";
    require_clean_error(quantize((dir / "file" / "x.gguf").string()),
                        "--out: cannot write into " + (dir / "file").string());
    for (const auto& e : fs::directory_iterator(fs::current_path()))
        CHECK(e.path().filename().string().find(".tmp.") != 0);  // no temporary file left in the working folder
}

TEST_CASE("a CLI error quoting a template's control characters prints them escaped", "[cli]") {
    const std::string esc = "\x1b[31m";
    const fs::path dir =
        tokenizer_json_model_dir("cli-esc", "{{ raise_exception('stop here " + esc + "red\x07') }}");
    CommandResult r = moe({"generate", "--model", dir.string(), "--user", "hi", "--max-tokens", "1"});
    INFO(r.err);
    REQUIRE(r.exit_code == 2);
    const size_t error = r.err.rfind("moe-server: error: ");
    REQUIRE(error != std::string::npos);
    CHECK(one_line(r.err.substr(error)));  // the load lines come first
    CHECK(r.err.find('\x1b') == std::string::npos);
    CHECK(r.err.find('\x07') == std::string::npos);
    CHECK(r.err.find("stop here \\x1b[31mred\\x07") != std::string::npos);
}

TEST_CASE("SUBCOMMAND --help prints that subcommand's flags and --help every subcommand's", "[cli]") {
    CommandResult all = moe({"--help"});
    REQUIRE(all.exit_code == 0);
    for (const char* name :
         {"serve", "generate", "tokenize", "perplexity", "synth-model", "quantize", "profile", "calibrate", "bench"}) {
        INFO(name);
        CHECK(all.out.find(std::string("  ") + name + " ") != std::string::npos);
        CommandResult one = moe({name, "--help"});
        CHECK(one.exit_code == 0);
        CHECK(one.out.find(std::string("  ") + name + " ") != std::string::npos);
        CHECK(one.out.size() < all.out.size());
        for (const char* other : {"serve", "tokenize", "synth-model", "bench"})
            if (std::string(other) != name) CHECK(one.out.find(std::string("  ") + other + "  ") == std::string::npos);
    }
    const std::string gen = moe({"generate", "--help"}).out;
    CHECK(gen.find("--beam-width") != std::string::npos);
    CHECK(gen.find("--gpu-memory") != std::string::npos);  // generate takes the device flags
    CHECK(gen.find("synth:PRESET") != std::string::npos);
    const std::string synth = moe({"synth-model", "--help"}).out;
    CHECK(synth.find("--preset") != std::string::npos);
    CHECK(synth.find("--gpu-memory") == std::string::npos);
    CommandResult unknown = moe({"frobnicate", "--help"});
    CHECK(unknown.exit_code == 2);
    CHECK(unknown.err.find("unknown subcommand 'frobnicate'") != std::string::npos);
}
