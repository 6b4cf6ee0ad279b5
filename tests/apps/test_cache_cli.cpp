// `moe-server profile --trace` and `bench cache` on the tiny synthetic
// model as a user runs them: the trace validates, carries the model's
// fingerprint, and sums to the profile written in the same run, phase by
// phase; the replay prints its setup (the latency model, which without a
// calibration is the default roofline, the synthetic-router caveat) and one
// line per budget and policy, Belady's hit rate at least every other
// policy's, its copied bytes whole experts and no more copies than the
// trace routes; a trace of another model is refused. And
// --eval-profile: a trace drawn from Fiddler's Mixtral counts replayed on
// Mixtral-8x7B's shape, seeded, its flags refused in one line.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/fingerprint.h"
#include "engine/model/model_config.h"
#include "profiles/profile.h"
#include "profiles/routing_trace.h"
#include "test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// bench cache's output: its setup line and its rows.
std::pair<json, std::vector<json>> cache_lines(const std::string& out) {
    std::istringstream lines(out);
    std::string line;
    std::pair<json, std::vector<json>> r;
    while (std::getline(lines, line)) {
        json j = json::parse(line);
        if (j["bench"] == "cache_setup") r.first = j;
        if (j["bench"] == "cache") r.second.push_back(j);
    }
    return r;
}

// profile --trace of `limit` prompts of a shared prompt file; returns the trace path.
fs::path profile_with_trace(const fs::path& model, const std::string& prompts, const std::string& tag, Profile* out) {
    const fs::path dir = test_temp_dir(tag);
    const fs::path profile = dir / "p.json", trace = dir / "t.jsonl";
    CommandResult r = moe({"profile", "--model", model.string(), "--prompts",
                           (shared_data_dir() / "prompts" / prompts).string(), "--limit", "3", "--gen-tokens", "6",
                           "--threads", "2", "--out", profile.string(), "--trace", trace.string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.err.find("routing trace of ") != std::string::npos);
    *out = profile_read(profile);
    return trace;
}

}  // namespace

TEST_CASE("profile --trace writes a trace that sums to the profile of the same run", "[profile_cli][cache_cli]") {
    const fs::path model = test_model_dir("tiny", 1);
    Profile p;
    const fs::path path = profile_with_trace(model, "sharegpt_v3_filtered_1000.json", "trace-cli", &p);
    const RoutingTrace t = routing_trace_read(path);  // validates
    REQUIRE(t.model == model_fingerprint(model_config_load(model)));
    REQUIRE(t.n_tokens() == p.workload.prefill_tokens + p.workload.decode_tokens);
    const Profile summed = routing_trace_profile(t);
    CHECK(summed.prefill == p.prefill);
    CHECK(summed.decode == p.decode);
    CHECK(summed.workload.prefill_tokens == p.workload.prefill_tokens);
    CHECK(summed.workload.decode_tokens == p.workload.decode_tokens);
    CHECK(summed.workload.generated_tokens == p.workload.generated_tokens);
    // Three requests, each its prefill positions 0.. and then its decode positions on from there.
    CHECK(t.request.front() == 0);
    CHECK(t.request.back() == 2);
    for (size_t i = 1; i < t.n_tokens(); i++)
        if (t.request[i] == t.request[i - 1]) CHECK(t.position[i] == t.position[i - 1] + 1);
}

TEST_CASE("bench cache prints one line per budget and policy, Belady's hit rate the highest", "[cache_cli]") {
    const fs::path model = test_model_dir("tiny", 1);
    Profile a, b;
    const fs::path ta = profile_with_trace(model, "sharegpt_v3_filtered_1000.json", "cache-cli-a", &a);
    const fs::path tb = profile_with_trace(model, "mt_bench_question.jsonl", "cache-cli-b", &b);
    // An empty calibration cache (XDG_CACHE_HOME of its own): the latency
    // model is the one default, whatever this machine has calibrated.
    const fs::path no_calibration = test_temp_dir("cache-cli-xdg");
    CommandResult r = moe({"bench", "cache", "--model", model.string(), "--trace", ta.string(), "--eval-trace",
                           tb.string(), "--budgets", "10,25,50%", "--threads", "2"},
                          {{"XDG_CACHE_HOME", no_calibration.string()}});
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    const auto [setup, rows] = cache_lines(r.out);
    REQUIRE(setup.is_object());
    CHECK(setup["note"].get<std::string>().find("poor stand-in for a trained router") != std::string::npos);
    const std::string latency = setup["latency_model"];
    CHECK(latency.rfind("default: CPU roofline", 0) == 0);
    REQUIRE(rows.size() == 3 * 5);
    // Copies against the evaluation trace: each copy moves one expert's
    // bytes, and no replay copies more experts than the trace routes tokens
    // to experts (a copy serves at least one routed token).
    const RoutingTrace eval = routing_trace_read(tb);
    const double expert_bytes = setup["expert_bytes"].get<double>();
    REQUIRE(expert_bytes > 0);
    const uint64_t routed = eval.experts.size();  // (tokens, MoE layers, top_k)
    std::map<double, std::map<std::string, double>> hit;
    for (const json& j : rows) {
        hit[j["budget_frac"].get<double>()][j["policy"].get<std::string>()] = j["hit_rate"].get<double>();
        CHECK(j["decode_tok_s"].get<double>() > 0);
        CHECK(j["bytes_copied"].get<double>() == double(j["copies"].get<uint64_t>()) * expert_bytes);
        CHECK(j["copies"].get<uint64_t>() <= routed);
        CHECK(j["pinned"].get<int>() + j["cache_slots"].get<int>() == j["capacity"].get<int>());
    }
    REQUIRE(hit.size() == 3);
    for (auto& [frac, by_policy] : hit) {
        INFO("budget " << frac);
        REQUIRE(by_policy.size() == 5);
        for (const char* other : {"static", "lru", "lfu", "score"}) CHECK(by_policy["belady"] >= by_policy[other]);
    }
    // A trace of another model is refused in one line.
    CommandResult bad =
        moe({"bench", "cache", "--model", "synth:small", "--trace", ta.string(), "--eval-trace", tb.string()});
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("a routing trace of another model") != std::string::npos);
}

TEST_CASE("bench cache --eval-profile replays a draw from Fiddler's Mixtral counts on Mixtral's shape", "[cache_cli][slow]") {
    const fs::path dir = shared_data_dir() / "profiles/fiddler-mixtral-8x7b-instruct";
    const std::string cs = (dir / "expert_popularity_college_computer_science.json").string();
    const std::string bio = (dir / "expert_popularity_high_school_biology.json").string();
    const std::vector<std::string> flags = {"bench",
                                            "cache",
                                            "--model",
                                            "synth:mixtral-8x7b",
                                            "--profile",
                                            cs,
                                            "--eval-profile",
                                            bio,
                                            "--sample-requests",
                                            "3",
                                            "--sample-prefill",
                                            "8",
                                            "--sample-decode",
                                            "5",
                                            "--seed",
                                            "9",
                                            "--budgets",
                                            "25,50%",
                                            "--threads",
                                            "2"};
    CommandResult r = moe(flags);
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    const auto [setup, rows] = cache_lines(r.out);
    REQUIRE(setup.is_object());
    CHECK(setup["trace"].is_null());
    CHECK(setup["eval"]["requests"] == 3);
    CHECK(setup["eval"]["tokens"] == 3 * 13);
    CHECK(setup["eval"]["decode_tokens"] == 3 * 5);
    CHECK(setup["eval_from"].get<std::string>().find("drawn from profile " + bio +
                                                     ": 3 requests x (8 prefill + 5 "
                                                     "decode) tokens, seed 9") == 0);
    CHECK(setup["popularity_from"] == "profile " + cs);
    CHECK(setup["expert_bytes"] == 352321536.0);  // 3 x 4096 x 14336 bf16
    CHECK(setup["note"].get<std::string>().find("no temporal locality") != std::string::npos);
    CHECK(setup["note"].get<std::string>().find("synthetic model's random router") == std::string::npos);
    REQUIRE(rows.size() == 2 * 5);
    for (const json& j : rows) {
        CHECK(j["experts"] == 256);
        CHECK(j["decode_tokens"] == 15);
        CHECK(j["note"] == "i.i.d. draw from aggregate counts: no temporal locality");
    }
    // The same flags give the same draw: the static plan's hit rates (a
    // cache's follow its fills, which follow the latency model, and so the
    // CPU ceiling measured at start).
    CommandResult again = moe(flags);
    REQUIRE(again.exit_code == 0);
    const std::vector<json> rows2 = cache_lines(again.out).second;
    REQUIRE(rows2.size() == rows.size());
    for (size_t i = 0; i < rows.size(); i++) {
        const json& j = rows2[i];
        CHECK(j["policy"] == rows[i]["policy"]);
        if (j["policy"] == "static") {
            CHECK(j["hit_rate"] == rows[i]["hit_rate"]);
            CHECK(j["decode_hit_rate"] == rows[i]["decode_hit_rate"]);
            CHECK(j["token_hit_rate"] == rows[i]["token_hit_rate"]);
        }
    }

    // Bad flags: one line, exit code 2.
    auto refused = [&](std::vector<std::string> args, const std::string& part) {
        std::vector<std::string> words = {"bench", "cache", "--model", "synth:mixtral-8x7b"};
        words.insert(words.end(), args.begin(), args.end());
        CommandResult bad = moe(words);
        INFO(bad.err);
        CHECK(bad.exit_code == 2);
        CHECK(bad.err.find(part) != std::string::npos);
        // One error line (after the synthetic preset's notice).
        size_t errors = 0;
        for (size_t at = bad.err.find("moe-server: error: "); at != std::string::npos;
             at = bad.err.find("moe-server: error: ", at + 1))
            errors++;
        CHECK(errors == 1);
        CHECK(bad.err.find("internal error") == std::string::npos);
    };
    refused({"--eval-profile", bio}, "give --profile P.json or --trace A.jsonl");
    refused({"--profile", cs}, "give one of --eval-trace B.jsonl or --eval-profile B.json");
    refused({"--profile", cs, "--eval-profile", bio, "--eval-trace", "x.jsonl"}, "give one of --eval-trace");
    refused({"--profile", cs, "--eval-trace", "x.jsonl", "--seed", "3"}, "--seed: only with --eval-profile");
    refused({"--profile", cs, "--eval-profile", bio, "--sample-requests", "0"}, "--sample-requests");
    refused({"--profile", cs, "--eval-profile", bio, "--sample-decode", "x"}, "--sample-decode");
    refused({"--profile", cs, "--eval-profile", bio, "--seed", "-1"}, "--seed");
    // A profile of another shape: Mixtral's counts against an 8-layer model.
    CommandResult other =
        moe({"bench", "cache", "--model", "synth:mixtral-mini", "--profile", cs, "--eval-profile", bio});
    CHECK(other.exit_code == 2);
    CHECK(other.err.find("Fiddler popularity table is 32 layers x 8 experts, the model has 8 x 8") !=
          std::string::npos);
}
