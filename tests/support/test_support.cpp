// Test helpers: shared data lookup and on-demand synthetic models.
#include "test_support.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>


namespace fs = std::filesystem;

fs::path shared_data_dir() {
    if (const char* env = std::getenv("MOE_SHARED_DATA")) return env;
    return MOE_SHARED_DATA_DIR;
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
