// `moe-server profile` on the tiny synthetic model as a user runs it: the
// file validates, carries the model's fingerprint, and every layer's counts
// sum to tokens x top-k for prefill and for decode (prefill tokens checked
// against an independent tokenization of the same prompts); Ctrl-C writes
// what was completed; a profile of one preset is refused by another model;
// the fingerprint's tensor list matches a real synthetic checkpoint.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "chat/chat_template.h"
#include "checkpoint_writer.h"
#include "engine/formats/safetensors.h"
#include "engine/model/fingerprint.h"
#include "engine/model/model_config.h"
#include "engine/model/synth_model.h"
#include "engine/model/tensor_table.h"
#include "engine/text/tokenizer.h"
#include "profiles/profile.h"
#include "profiles/prompts.h"
#include "test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

fs::path sharegpt_file() {
    return shared_data_dir() / "prompts" / "sharegpt_v3_filtered_1000.json";
}

// Sum of counts[layer][*] of a (n_layers, n_experts) table.
uint64_t layer_sum(const std::vector<uint64_t>& t, int layer, int n_experts) {
    uint64_t s = 0;
    for (int e = 0; e < n_experts; e++) s += t[size_t(layer) * n_experts + e];
    return s;
}

// Prompt tokens of prompts[indices], tokenized here as the CLI should.
uint64_t expected_prompt_tokens(const fs::path& model, const std::vector<int>& indices, bool chat) {
    PromptSet set = prompts_read(sharegpt_file());
    Tokenizer tok = Tokenizer::load(model / "tokenizer.model");
    std::string warning;
    ChatTemplate tmpl = ChatTemplate::from_model_dir(model, &warning);
    uint64_t n = 0;
    for (int i : indices) {
        ChatMessage user{ChatRole::USER, set.prompts[size_t(i)]};
        n += chat ? tmpl.encode(tok, {&user, 1}).size() : 1 + tok.encode(user.content).size();
    }
    return n;
}

void require_phase_sums(const Profile& p) {
    const int k = p.model.n_experts_active;
    for (int l = 0; l < p.model.n_layers; l++) {
        INFO("layer " << l);
        REQUIRE(layer_sum(p.prefill, l, p.model.n_experts) == p.workload.prefill_tokens * k);
        REQUIRE(layer_sum(p.decode, l, p.model.n_experts) == p.workload.decode_tokens * k);
    }
}

}  // namespace

TEST_CASE("profile on the tiny model counts tokens x top-k per layer for prefill and decode", "[profile_cli]") {
    const fs::path model = test_model_dir("tiny", 1);
    const fs::path out = test_temp_dir("profile-cli") / "tiny.json";
    CommandResult r = moe({"profile", "--model", model.string(), "--prompts", sharegpt_file().string(), "--limit", "3",
                           "--gen-tokens", "4", "--threads", "2", "--out", out.string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.err.find("3/3 prompts 100%") != std::string::npos);  // the last progress line (not a terminal)
    REQUIRE(r.err.find("-> " + out.string()) != std::string::npos);

    Profile p = profile_read(out);  // validates
    REQUIRE(p.model == model_fingerprint(model_config_load(model)));
    profile_check(p, model_fingerprint(model_config_load(model)), out.string());
    const ProfileWorkload& w = p.workload;
    REQUIRE(w.prompt_indices == std::vector<int>{0, 1, 2});
    REQUIRE(w.prompts_available == 1000);
    REQUIRE(w.prompt_format == "sharegpt");
    REQUIRE(w.chat_template);
    REQUIRE_FALSE(w.interrupted);
    REQUIRE(w.prefill_tokens == expected_prompt_tokens(model, {0, 1, 2}, true));
    REQUIRE(w.generated_tokens >= 3);
    REQUIRE(w.generated_tokens <= 12);
    REQUIRE(w.decode_tokens == w.generated_tokens - 3);
    require_phase_sums(p);
    REQUIRE(p.decode != std::vector<uint64_t>(p.decode.size(), 0));

    // Raw text (BOS + text), prompts spread over the file, one token each: no decode step.
    const fs::path raw = test_temp_dir("profile-cli-raw") / "raw.json";
    CommandResult r2 =
        moe({"profile", "--model", model.string(), "--prompts", sharegpt_file().string(), "--limit", "3", "--spread",
             "--gen-tokens", "1", "--chat-template", "off", "--threads", "2", "--out", raw.string()});
    INFO(r2.err);
    REQUIRE(r2.exit_code == 0);
    Profile q = profile_read(raw);
    REQUIRE(q.workload.prompt_indices == std::vector<int>{0, 333, 666});
    REQUIRE_FALSE(q.workload.chat_template);
    REQUIRE(q.workload.prefill_tokens == expected_prompt_tokens(model, {0, 333, 666}, false));
    REQUIRE(q.workload.generated_tokens == 3);
    REQUIRE(q.workload.decode_tokens == 0);
    REQUIRE(q.decode == std::vector<uint64_t>(q.decode.size(), 0));
    require_phase_sums(q);

    // A context too small for some prompts: they are skipped and counted.
    const fs::path small_ctx = test_temp_dir("profile-cli-ctx") / "ctx.json";
    CommandResult r3 = moe({"profile", "--model", model.string(), "--prompts", sharegpt_file().string(), "--limit",
                            "20", "--gen-tokens", "2", "--ctx", "128", "--threads", "2", "--out", small_ctx.string()});
    INFO(r3.err);
    REQUIRE(r3.exit_code == 0);
    Profile s = profile_read(small_ctx);
    REQUIRE(s.workload.prompts_skipped > 0);
    REQUIRE(s.workload.prompt_indices.size() + size_t(s.workload.prompts_skipped) == 20);
    REQUIRE(s.workload.prefill_tokens == expected_prompt_tokens(model, s.workload.prompt_indices, true));
    require_phase_sums(s);
}

TEST_CASE("a profile of one preset is refused for another model", "[profile_cli]") {
    const fs::path tiny = test_model_dir("tiny", 1);
    const fs::path out = test_temp_dir("profile-mismatch") / "tiny.json";
    CommandResult r = moe({"profile", "--model", tiny.string(), "--prompts",
                           (shared_data_dir() / "prompts" / "vicuna_bench_question.jsonl").string(), "--limit", "2",
                           "--gen-tokens", "2", "--threads", "2", "--out", out.string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    Profile p = profile_read(out);
    REQUIRE(p.workload.prompt_format == "mtbench");
    const ModelFingerprint small = model_fingerprint(synth_preset(SynthPreset::SMALL));
    // bench placement refuses it for the small model, one line, exit code 2.
    CommandResult b = moe({"bench", "placement", "--model", test_model_dir("small", 1).string(), "--profile",
                           out.string(), "--eval", out.string()});
    INFO(b.err);
    REQUIRE(b.exit_code == 2);
    REQUIRE(b.err.find("moe-server: error: " + out.string() + ": profile is for another model") == 0);
    try {
        profile_check(p, small, out.string());
        FAIL("accepted a tiny profile for the small model");
    } catch (const MoeError& e) {
        std::string msg = e.what();
        INFO(msg);
        REQUIRE(msg.find(out.string() + ": profile is for another model") == 0);
        REQUIRE(msg.find("profile " + fingerprint_describe(p.model)) != std::string::npos);
        REQUIRE(msg.find("model " + fingerprint_describe(small)) != std::string::npos);
    }
}

TEST_CASE("bench placement scores static plans against the eval profile", "[profile_cli]") {
    const fs::path tiny = test_model_dir("tiny", 1);
    const fs::path out = test_temp_dir("profile-bench") / "tiny.json";
    CommandResult r = moe({"profile", "--model", tiny.string(), "--prompts", sharegpt_file().string(), "--limit", "4",
                           "--gen-tokens", "3", "--threads", "2", "--out", out.string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CommandResult b = moe({"bench", "placement", "--model", tiny.string(), "--profile", out.string(), "--eval",
                           out.string(), "--seeds", "10"});
    INFO(b.err);
    REQUIRE(b.exit_code == 0);
    std::vector<json> lines;
    for (size_t pos = 0, end; (end = b.out.find('\n', pos)) != std::string::npos; pos = end + 1)
        lines.push_back(json::parse(b.out.substr(pos, end - pos)));
    REQUIRE(lines.size() == 7);  // workloads, then 3 budgets x {all, decode}
    REQUIRE(lines[0]["bench"] == "placement_workloads");
    const Profile p = profile_read(out);
    for (size_t i = 1; i < lines.size(); i++) {
        const json& l = lines[i];
        INFO(l.dump());
        REQUIRE(l["experts"] == 8);
        REQUIRE(l["capacity"] == std::lround(l["budget_frac"].get<double>() * 8));
        // Profiled and evaluated on the same workload, the popularity plan
        // is the oracle (for "all"; the decode plan still ranks by all tokens).
        if (l["phase"] == "all") REQUIRE(l["popularity"] == l["oracle"]);
        REQUIRE(l["popularity"].get<double>() <= l["oracle"].get<double>() + 1e-12);
        REQUIRE(l["popularity_in_sample"] == l["popularity"]);
        REQUIRE(l["random_min"].get<double>() <= l["random_mean"].get<double>());
        REQUIRE(l["random_mean"].get<double>() <= l["random_max"].get<double>());
        REQUIRE(l["random_max"].get<double>() <= l["oracle"].get<double>() + 1e-12);
        const uint64_t tokens =
            l["phase"] == "all" ? p.workload.prefill_tokens + p.workload.decode_tokens : p.workload.decode_tokens;
        REQUIRE(l["eval_routed"] == tokens * 2 * 2);  // x top-2 x 2 layers
    }
}

TEST_CASE("profile refuses bad input with one line and exit code 2", "[profile_cli]") {
    const fs::path tiny = test_model_dir("tiny", 1);
    const fs::path dir = test_temp_dir("profile-bad-input");
    const fs::path bad = dir / "bad.jsonl";
    {
        std::FILE* f = std::fopen(bad.c_str(), "w");
        std::fputs("{\"prompt\": \"ok\"}\n{\"prompt\": 3}\n", f);
        std::fclose(f);
    }
    auto error_of = [&](std::vector<std::string> extra) {
        std::vector<std::string> args{"profile", "--model", tiny.string(), "--out", (dir / "out.json").string()};
        args.insert(args.end(), extra.begin(), extra.end());
        CommandResult r = moe(args);
        INFO(r.err);
        REQUIRE(r.exit_code == 2);
        REQUIRE(r.err.rfind("moe-server: error: ", 0) == 0);
        REQUIRE(r.err.find('\n') == r.err.size() - 1);
        return r.err;
    };
    REQUIRE(error_of({"--prompts", bad.string()}).find(bad.string() + ":2: none of \"prompt\"") != std::string::npos);
    REQUIRE(
        error_of({"--prompts", sharegpt_file().string(), "--format", "csv"}).find("--format: unknown format 'csv'") !=
        std::string::npos);
    REQUIRE(error_of({"--prompts", sharegpt_file().string(), "--chat-template", "maybe"})
                .find("--chat-template: expected on or off") != std::string::npos);
    REQUIRE(error_of({"--limit", "2"}).find("--prompts is required") != std::string::npos);
    CommandResult r = moe({"profile", "--model", tiny.string(), "--prompts", sharegpt_file().string(), "--out",
                           (dir / "no-such-dir" / "out.json").string()});
    REQUIRE(r.exit_code == 2);
    REQUIRE(r.err == "moe-server: error: --out: cannot write into " + (dir / "no-such-dir").string() + "\n");
    REQUIRE_FALSE(fs::exists(dir / "out.json"));
    // A pipe (as /dev/full would be for root) is refused, not replaced.
    const fs::path fifo = dir / "pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CommandResult p = moe({"profile", "--model", tiny.string(), "--prompts", sharegpt_file().string(), "--limit", "1",
                           "--gen-tokens", "1", "--out", fifo.string()});
    INFO(p.err);
    REQUIRE(p.exit_code == 2);
    REQUIRE(p.err.find(fifo.string() + ": exists and is not a regular file") != std::string::npos);
    REQUIRE(fs::is_fifo(fs::symlink_status(fifo)));
}

TEST_CASE("Ctrl-C during profile writes the prompts completed and exits 0", "[profile_cli]") {
    const fs::path tiny = test_model_dir("tiny", 1);
    const fs::path out = test_temp_dir("profile-sigint") / "partial.json";
    const std::vector<std::string> argv{moe_server_binary().string(),
                                        "profile",
                                        "--model",
                                        tiny.string(),
                                        "--prompts",
                                        sharegpt_file().string(),
                                        "--gen-tokens",
                                        "8",
                                        "--threads",
                                        "2",
                                        "--out",
                                        out.string()};
    int pipe_fd[2];
    REQUIRE(pipe(pipe_fd) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(pipe_fd[1], STDERR_FILENO);
        close(pipe_fd[0]);
        close(pipe_fd[1]);
        std::vector<char*> args;
        for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execv(args[0], args.data());
        _exit(127);
    }
    close(pipe_fd[1]);
    // The first progress line comes after the first prompt; interrupt then.
    std::string err;
    char buf[4096];
    bool signalled = false;
    for (ssize_t n; (n = read(pipe_fd[0], buf, sizeof buf)) > 0;) {
        err.append(buf, size_t(n));
        if (!signalled && err.find("prompts") != std::string::npos && err.find("ETA") != std::string::npos) {
            kill(pid, SIGINT);
            signalled = true;
        }
    }
    close(pipe_fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    INFO(err);
    REQUIRE(signalled);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    REQUIRE(err.find("interrupted: wrote the") != std::string::npos);
    Profile p = profile_read(out);
    REQUIRE(p.workload.interrupted);
    REQUIRE(p.workload.prompt_indices.size() >= 1);
    REQUIRE(p.workload.prompt_indices.size() < 1000);
    require_phase_sums(p);
}

TEST_CASE("fingerprint tensor list matches a synthetic checkpoint", "[profile_cli]") {
    const fs::path model = test_model_dir("tiny", 1);
    const ModelConfig config = model_config_load(model);
    REQUIRE(model_fingerprint(config) == model_fingerprint(synth_preset(SynthPreset::TINY)));
    SafetensorsSet files(model);
    const auto tensors = tensor_table(config);
    REQUIRE(tensors.size() == files.tensors().size());
    for (const TensorEntry& t : tensors) {
        INFO(t.name);
        const TensorView* v = files.find(t.name);
        REQUIRE(v);
        REQUIRE(v->shape == t.shape);
    }
}

namespace {

// `moe-server profile` of one small config: the prompts rendered by the
// model's own ChatML template (no BOS), every MoE layer's counts summing to
// tokens x top-k and every dense layer's to 0, the model's fingerprint.
// Returns the profile's path.
fs::path profile_arch_model(const std::string& name, const fs::path& model) {
    INFO(name);
    const fs::path out = test_temp_dir("profile-arch") / "p.json";
    CommandResult r = moe({"profile", "--model", model.string(), "--prompts", sharegpt_file().string(), "--limit", "2",
                           "--gen-tokens", "3", "--threads", "2", "--out", out.string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    Profile p = profile_read(out);
    const ModelConfig c = model_config_load(model);
    REQUIRE(p.model == model_fingerprint(c));
    REQUIRE(p.model.architecture == c.architecture);
    REQUIRE(p.workload.chat_template);
    REQUIRE(p.workload.prefill_tokens > 100);  // the sharegpt prompts in byte tokens
    REQUIRE(p.workload.decode_tokens == 2 * 2);
    for (int l = 0; l < c.n_layers; l++) {
        INFO("layer " << l);
        const uint64_t k = c.layer_is_moe(l) ? uint64_t(c.n_experts_active) : 0;
        REQUIRE(layer_sum(p.prefill, l, c.n_experts) == p.workload.prefill_tokens * k);
        REQUIRE(layer_sum(p.decode, l, c.n_experts) == p.workload.decode_tokens * k);
    }
    return out;
}

}  // namespace

TEST_CASE("profiles of the new architectures: counts, fingerprints, placement", "[profile_cli][profile_arch]") {
    // The small configs of the Qwen3-MoE, OLMoE and Qwen2-MoE presets'
    // features; the fingerprint tells the architectures apart, so one's
    // profile is refused by another.
    const auto configs = small_arch_configs();
    std::vector<fs::path> profiles, models;
    for (size_t i = 0; i < 3; i++) {
        const auto& [name, config] = configs[i];
        models.push_back(test_checkpoint_dir("arch", config));
        profiles.push_back(profile_arch_model(name, models.back()));
    }
    // Three architectures of the same sizes: three fingerprints.
    REQUIRE(profile_read(profiles[0]).model.hash != profile_read(profiles[1]).model.hash);
    REQUIRE(profile_read(profiles[1]).model.hash != profile_read(profiles[2]).model.hash);
    REQUIRE(profile_read(profiles[0]).model.hash != profile_read(profiles[2]).model.hash);
    // A profile places the experts of its own model and is refused by another.
    const std::string bin = moe_server_binary().string();
    CommandResult g = run_command({bin, "generate", "--model", models[0].string(), "--prompt", "Hello", "--max-tokens",
                                   "4", "--greedy", "--emulate-gpu", "25%", "--profile", profiles[0].string()});
    INFO(g.err);
    REQUIRE(g.exit_code == 0);
    REQUIRE(g.err.find("plan: popularity") != std::string::npos);
    REQUIRE(g.err.find("expected hit rate") != std::string::npos);
    CommandResult m = run_command({bin, "generate", "--model", models[1].string(), "--prompt", "Hello", "--max-tokens",
                                   "2", "--emulate-gpu", "25%", "--profile", profiles[0].string()});
    INFO(m.err);
    REQUIRE(m.exit_code == 2);
    REQUIRE(m.err.find("profile is for another model") != std::string::npos);
    REQUIRE(m.err.find("Qwen3MoeForCausalLM") != std::string::npos);
    REQUIRE(m.err.find("OlmoeForCausalLM") != std::string::npos);
    // A model with dense layers among its MoE layers places the MoE layers' experts only.
    CommandResult d = run_command({bin, "generate", "--model", test_checkpoint_dir("arch", configs[3].second).string(),
                                   "--prompt", "Hello", "--max-tokens", "2", "--emulate-gpu", "25%"});
    INFO(d.err);
    REQUIRE(d.exit_code == 0);
    REQUIRE(d.err.find("experts resident") != std::string::npos);
}

TEST_CASE("profiles of models with dense layers among MoE layers", "[profile_cli][profile_dense]") {
    // Dense layers route nothing: their rows are 0, the file names them, and
    // the profile places the MoE layers' experts of its own model.
    const auto configs = small_arch_configs();
    const std::string bin = moe_server_binary().string();
    for (size_t i = 0; i < configs.size(); i++) {
        if (configs[i].first.find("dense") == std::string::npos) continue;
        INFO(configs[i].first);
        const fs::path model = test_checkpoint_dir("arch", configs[i].second);
        const fs::path out = profile_arch_model(configs[i].first, model);
        const ModelConfig c = model_config_load(model);
        REQUIRE_FALSE(c.dense_layers.empty());
        REQUIRE(profile_read(out).model.dense_layers == c.dense_layers);
        REQUIRE(json::parse(read_file(out))["model"]["dense_layers"] == json(c.dense_layers));
        CommandResult g = run_command({bin, "generate", "--model", model.string(), "--prompt", "Hello", "--max-tokens",
                                       "2", "--greedy", "--emulate-gpu", "25%", "--profile", out.string()});
        INFO(g.err);
        REQUIRE(g.exit_code == 0);
        REQUIRE(g.err.find("plan: popularity") != std::string::npos);
        // bench placement plans over the MoE layers only: 25 % of their experts.
        CommandResult b = run_command({bin, "bench", "placement", "--model", model.string(), "--profile", out.string(),
                                       "--eval", out.string(), "--seeds", "2"});
        INFO(b.err);
        REQUIRE(b.exit_code == 0);
        const int moe_experts = c.n_moe_layers() * c.n_experts;
        REQUIRE(b.out.find("\"experts\":" + std::to_string(moe_experts) + ",") != std::string::npos);
    }
}

TEST_CASE("profile of a Qwen2-MoE model: its chat template, 60 experts of top-4, the shared expert never counted",
          "[profile_cli]") {
    const ScratchModel scratch("qwen2-moe-mini", 3);
    const fs::path& model = scratch.dir();
    const fs::path out = test_temp_dir("profile-cli-qwen2") / "qwen2.json";
    CommandResult r = moe({"profile", "--model", model.string(), "--prompts", sharegpt_file().string(), "--limit", "2",
                           "--gen-tokens", "3", "--threads", "2", "--out", out.string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const Profile p = profile_read(out);
    const ModelConfig c = model_config_load(model);
    REQUIRE(p.model == model_fingerprint(c));
    CHECK(p.model.architecture == "Qwen2MoeForCausalLM");
    CHECK(p.model.n_experts == 60);
    CHECK(p.model.n_experts_active == 4);
    // Each token counted at its 4 routed experts per layer: the shared expert is not a routed one.
    require_phase_sums(p);
    // Qwen2.5's template (ChatML with its default system turn), no BOS.
    CHECK(p.workload.prefill_tokens > 2 * 20);
    // Another architecture, another fingerprint.
    CHECK_FALSE(p.model == model_fingerprint(synth_preset(SynthPreset::QWEN3_MOE_MINI)));
    CHECK_FALSE(model_fingerprint(synth_preset(SynthPreset::QWEN3_MOE_MINI)) == model_fingerprint(synth_preset(SynthPreset::OLMOE_MINI)));
}
