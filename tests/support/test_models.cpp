// On-demand synthetic models for tests (kept apart from test_support.cpp so
// tests that need no model do not link the synth-model writer).
#include <filesystem>
#include <string>
#include <system_error>
#include <unistd.h>

#include "engine/model/synth_model.h"
#include "test_support.h"

namespace fs = std::filesystem;

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

