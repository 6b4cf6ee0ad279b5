// The calibration file: key and cache path, write / read round trip, the
// cache lookup, and one MoeError naming the file and the problem for
// each kind of bad file (not JSON, wrong version, missing field, wrong type,
// negative values, a key that does not match).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/errors.h"
#include "profiles/calibration.h"
#include "test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

Calibration sample_calibration() {
    Calibration c;
    c.cpu_name = "AMD EPYC 9654 96-Core Processor";
    c.isa = "avx512bf16";
    c.threads = 2;
    c.device_name = "none";
    c.dim = 1024;
    c.hidden_dim = 3584;
    c.dtype = "bf16";
    c.read_gbs = 55.5;
    c.fma_gflops = 235.25;
    c.expert_bytes = 22020096;
    c.expert_flops_per_token = 22020096;
    for (int n = 1; n <= 256; n *= 2) c.cpu_points.push_back({double(n), 0.5 + 0.0625 * n});
    c.cpu = {0.1875, 0.34375, 0.0703125, 32, 1.0, 0.0625};
    return c;
}

void write_text(const fs::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary);
    out << text;
}

// A sample file with one edit applied to its JSON.
fs::path edited_file(const std::string& tag, void (*edit)(json&)) {
    fs::path p = test_temp_dir("calibration-" + tag) / "cal.json";
    calibration_write(sample_calibration(), p);
    json j = json::parse(read_file(p));
    edit(j);
    write_text(p, j.dump(2));
    return p;
}

// The MoeError message of reading path ("" when it reads fine).
std::string read_error(const fs::path& p) {
    try {
        calibration_read(p);
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

void require_error(const fs::path& p, const std::string& field, const std::string& what) {
    std::string msg = read_error(p);
    INFO("message: " << msg);
    REQUIRE(msg.rfind(p.string() + ": ", 0) == 0);
    REQUIRE(msg.find(field) != std::string::npos);
    REQUIRE(msg.find(what) != std::string::npos);
}

// Sets XDG_CACHE_HOME for the scope of one test.
struct ScopedCacheHome {
    explicit ScopedCacheHome(const fs::path& dir) {
        if (const char* old = std::getenv("XDG_CACHE_HOME")) saved = old, had = true;
        setenv("XDG_CACHE_HOME", dir.c_str(), 1);
    }
    ~ScopedCacheHome() {
        if (had)
            setenv("XDG_CACHE_HOME", saved.c_str(), 1);
        else
            unsetenv("XDG_CACHE_HOME");
    }
    std::string saved;
    bool had = false;
};

}  // namespace

TEST_CASE("calibration_key is a sanitised file name made of every key field", "[calibration]") {
    REQUIRE(calibration_key("AMD EPYC 9654 96-Core Processor", "avx512bf16", 2, "none", 1024, 3584) ==
            "AMD_EPYC_9654_96-Core_Processor_avx512bf16_t2_none_1024x3584-bf16");
    REQUIRE(calibration_key("Intel(R) Core(TM) i9-13900K", "avx2", 16, "NVIDIA GeForce RTX 4090", 4096, 14336) ==
            "Intel_R_Core_TM_i9-13900K_avx2_t16_NVIDIA_GeForce_RTX_4090_4096x14336-bf16");
    REQUIRE(calibration_key("a/b/../c", "x", 1, "", 1, 2) == "a_b_.._c_x_t1_unknown_1x2-bf16");
    REQUIRE(calibration_key(sample_calibration()) ==
            calibration_key("AMD EPYC 9654 96-Core Processor", "avx512bf16", 2, "none", 1024, 3584, "bf16"));
    // Each field changes the key.
    std::string k = calibration_key("cpu", "avx2", 2, "none", 64, 128);
    REQUIRE(calibration_key("cpu", "avx512", 2, "none", 64, 128) != k);
    REQUIRE(calibration_key("cpu", "avx2", 4, "none", 64, 128) != k);
    REQUIRE(calibration_key("cpu", "avx2", 2, "gpu", 64, 128) != k);
    REQUIRE(calibration_key("cpu", "avx2", 2, "none", 64, 256) != k);
    REQUIRE(calibration_key("cpu", "avx2", 2, "none", 64, 128, "f16") != k);
}

TEST_CASE("calibration file round trip, with and without a device", "[calibration]") {
    fs::path dir = test_temp_dir("calibration-roundtrip");
    Calibration c = sample_calibration();
    calibration_write(c, dir / "sub" / "cpu.json");  // creates the folder
    Calibration r = calibration_read(dir / "sub" / "cpu.json");
    REQUIRE(r.version == CALIBRATION_VERSION);
    REQUIRE(r.cpu_name == c.cpu_name);
    REQUIRE(r.isa == c.isa);
    REQUIRE(r.threads == 2);
    REQUIRE(r.device_name == "none");
    REQUIRE(r.dim == 1024);
    REQUIRE(r.hidden_dim == 3584);
    REQUIRE(r.dtype == "bf16");
    REQUIRE(r.read_gbs == c.read_gbs);
    REQUIRE(r.fma_gflops == c.fma_gflops);
    REQUIRE(r.expert_bytes == c.expert_bytes);
    REQUIRE(r.expert_flops_per_token == c.expert_flops_per_token);
    REQUIRE(r.cpu_points.size() == 9);
    REQUIRE(r.cpu_points[8].x == 256);
    REQUIRE(r.cpu_points[8].ms == c.cpu_points[8].ms);
    REQUIRE(r.cpu.fixed_ms == c.cpu.fixed_ms);
    REQUIRE(r.cpu.stream_ms == c.cpu.stream_ms);
    REQUIRE(r.cpu.per_token_ms == c.cpu.per_token_ms);
    REQUIRE(r.cpu.large_from == 32);
    REQUIRE(r.cpu.pack_ms == c.cpu.pack_ms);
    REQUIRE(r.cpu.large_per_token_ms == c.cpu.large_per_token_ms);
    REQUIRE_FALSE(r.has_device);
    REQUIRE(json::parse(read_file(dir / "sub" / "cpu.json"))["key"] == calibration_key(c));

    c.has_device = true;
    c.device_name = "NVIDIA GeForce RTX 4090";
    c.device_points = {{1, 0.05}, {256, 0.2}};
    c.device = {0.02, 0.03, 0.0005};
    c.copy_points = {{1e6, 0.05}, {2.2e7, 0.9}};
    c.copy = {0.01, 2.5e7};
    calibration_write(c, dir / "gpu.json");
    r = calibration_read(dir / "gpu.json");
    REQUIRE(r.has_device);
    REQUIRE(r.device_name == c.device_name);
    REQUIRE(r.device.per_token_ms == c.device.per_token_ms);
    REQUIRE(r.device_points.size() == 2);
    REQUIRE(r.copy.bytes_per_ms == c.copy.bytes_per_ms);
    REQUIRE(r.copy_points[1].x == 2.2e7);
    REQUIRE_FALSE(r.has_side_by_side);  // as files of earlier builds: no side_by_side object
    REQUIRE_FALSE(json::parse(read_file(dir / "gpu.json")).contains("side_by_side"));

    c.has_side_by_side = true;
    c.cpu_beside_copies_points = {{1, 9.0}, {256, 40.0}};
    c.cpu_beside_copies = {1.5, 7.5, 0.15};
    c.copy_beside_cpu_points = {{1e6, 0.08}, {2.2e7, 1.4}};
    c.copy_beside_cpu = {0.02, 1.6e7};
    calibration_write(c, dir / "side.json");
    r = calibration_read(dir / "side.json");
    REQUIRE(r.has_side_by_side);
    REQUIRE(r.cpu_beside_copies.stream_ms == c.cpu_beside_copies.stream_ms);
    REQUIRE(r.cpu_beside_copies_points[1].ms == 40.0);
    REQUIRE(r.copy_beside_cpu.bytes_per_ms == c.copy_beside_cpu.bytes_per_ms);
    REQUIRE(r.copy_beside_cpu_points[0].x == 1e6);
}

TEST_CASE("calibration cache: path under XDG_CACHE_HOME, lookup by key", "[calibration]") {
    fs::path home = test_temp_dir("calibration-cache");
    ScopedCacheHome scoped(home);
    Calibration c = sample_calibration();
    std::string key = calibration_key(c);
    REQUIRE(calibration_cache_dir() == home / "moe-server" / "calibration");
    REQUIRE(calibration_cache_path(key) == home / "moe-server" / "calibration" / (key + ".json"));
    REQUIRE_FALSE(calibration_find_cached(key).has_value());
    calibration_write(c, calibration_cache_path(key));
    auto found = calibration_find_cached(key);
    REQUIRE(found.has_value());
    REQUIRE(found->cpu.per_token_ms == c.cpu.per_token_ms);
    // A file under another key's name is refused, not silently used.
    std::string other = calibration_key("other cpu", "avx2", 2, "none", 1024, 3584);
    fs::copy_file(calibration_cache_path(key), calibration_cache_path(other));
    REQUIRE_THROWS_AS(calibration_find_cached(other), MoeError);
}

TEST_CASE("calibration_write refuses invalid content and names the file", "[calibration]") {
    fs::path p = test_temp_dir("calibration-write-bad") / "bad.json";
    Calibration c = sample_calibration();
    c.cpu.stream_ms = -1;
    try {
        calibration_write(c, p);
        FAIL("no error");
    } catch (const MoeError& e) {
        std::string msg = e.what();
        REQUIRE(msg.find(p.string()) == 0);
        REQUIRE(msg.find("cpu.stream_ms") != std::string::npos);
    }
    REQUIRE_FALSE(fs::exists(p));
}

TEST_CASE("bad calibration files: one MoeError naming the file and the problem", "[calibration]") {
    SECTION("missing file") {
        fs::path p = test_temp_dir("calibration-missing") / "nope.json";
        require_error(p, "cannot open", "");
    }
    SECTION("not JSON") {
        fs::path p = test_temp_dir("calibration-notjson") / "cal.json";
        write_text(p, "{\"version\": 1, ");
        require_error(p, "not valid JSON", "");
    }
    SECTION("top level not an object") {
        fs::path p = test_temp_dir("calibration-array") / "cal.json";
        write_text(p, "[1, 2]");
        require_error(p, "(top level)", "expected an object");
    }
    SECTION("wrong version") {
        require_error(edited_file("version", [](json& j) { j["version"] = 99; }), "version", "99");
    }
    SECTION("missing field") {
        require_error(edited_file("missing", [](json& j) { j["cpu"].erase("per_token_ms"); }), "cpu.per_token_ms",
                      "missing");
        require_error(edited_file("missing-top", [](json& j) { j.erase("ceiling"); }), "ceiling", "missing");
        require_error(edited_file("missing-device", [](json& j) { j["has_device"] = true; }), "device", "missing");
        require_error(edited_file("side-missing", [](json& j) { j["side_by_side"] = json::object(); }),
                      "side_by_side.cpu", "missing");
        require_error(edited_file("side-no-device",
                                  [](json& j) {
                                      j["side_by_side"] = {
                                          {"cpu", j["cpu"]},
                                          {"copy",
                                           {{"latency_ms", 0.0},
                                            {"bytes_per_ms", 1e7},
                                            {"points", json::array({{{"bytes", 1e6}, {"ms", 0.1}},
                                                                    {{"bytes", 2e6}, {"ms", 0.2}}})}}}};
                                  }),
                      "side_by_side", "without a device");
    }
    SECTION("wrong type") {
        require_error(edited_file("type", [](json& j) { j["threads"] = "two"; }), "threads", "expected an integer");
        require_error(edited_file("type-points", [](json& j) { j["cpu"]["points"] = 3; }), "cpu.points",
                      "expected an array");
    }
    SECTION("negative values") {
        require_error(edited_file("neg-curve", [](json& j) { j["cpu"]["fixed_ms"] = -0.5; }), "cpu.fixed_ms",
                      "non-negative");
        require_error(edited_file("neg-point", [](json& j) { j["cpu"]["points"][3]["ms"] = -1.0; }), "cpu.points[3].ms",
                      "positive");
        require_error(edited_file("neg-bw", [](json& j) { j["ceiling"]["read_gbs"] = 0; }), "ceiling.read_gbs",
                      "positive");
        require_error(edited_file("neg-threads", [](json& j) { j["threads"] = 0; }), "threads", ">= 1");
        require_error(edited_file("frac-n", [](json& j) { j["cpu"]["points"][1]["n"] = 1.5; }), "cpu.points[1].n",
                      "whole number");
    }
    SECTION("too few points") {
        require_error(edited_file("points",
                                  [](json& j) {
                                      j["cpu"]["points"] = json::array({{{"n", 1}, {"ms", 0.5}}});
                                  }),
                      "cpu.points", "at least 2");
    }
    SECTION("key that does not match the fields") {
        require_error(edited_file("key", [](json& j) { j["threads"] = 8; }), "key", "does not match");
    }
}
