// Test helpers: shared data lookup and on-demand synthetic models.
#include "test_support.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include "engine/synth_model.h"

namespace fs = std::filesystem;

fs::path shared_data_dir() {
    if (const char* env = std::getenv("MOE_SHARED_DATA")) return env;
    return MOE_SHARED_DATA_DIR;
}

fs::path test_model_dir(const std::string& preset, unsigned seed) {
    fs::path dir = fs::path(MOE_TEST_BUILD_DIR) / "test-models" / (preset + "-seed" + std::to_string(seed));
    if (fs::exists(dir / "config.json")) return dir;
    fs::create_directories(dir.parent_path());
    fs::path tmp = dir.string() + ".tmp" + std::to_string(getpid());
    fs::remove_all(tmp);
    SynthOptions options;
    options.preset = preset;
    options.out = tmp;
    options.seed = seed;
    synth_model_write(options);
    std::error_code ec;
    fs::rename(tmp, dir, ec);  // another process may have won the race
    fs::remove_all(tmp);
    return dir;
}

fs::path test_temp_dir(const std::string& tag) {
    static std::atomic<int> counter{0};
    fs::path dir = fs::path(MOE_TEST_BUILD_DIR) / "test-tmp" /
                   (tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

fs::path moe_server_binary() { return MOE_SERVER_BINARY; }

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
