// Demo model location, creation and banner (see demo_model.h).
#include "apps/demo_model.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "base/errors.h"
#include "engine/model/synth_model.h"

namespace fs = std::filesystem;

namespace {
constexpr SynthPreset DEMO_PRESET = SynthPreset::SMALL;
constexpr uint64_t DEMO_SEED = 0;
}  // namespace

fs::path demo_model_dir() {
    fs::path cache;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
        cache = xdg;
    } else if (const char* home = std::getenv("HOME"); home && *home) {
        cache = fs::path(home) / ".cache";
    } else {
        throw MoeError("demo model: neither XDG_CACHE_HOME nor HOME is set; pass --model DIR");
    }
    return cache / "moe-server" / (std::string("demo-") + synth_preset_name(DEMO_PRESET));
}

fs::path demo_model_ensure() {
    fs::path dir = demo_model_dir();
    if (fs::exists(dir / "config.json")) return dir;
    std::error_code ec;
    fs::create_directories(dir.parent_path(), ec);
    if (ec) throw MoeError("demo model: cannot create " + dir.parent_path().string() + ": " + ec.message());
    std::fprintf(stderr, "moe-server: writing the demo model (synth-model preset %s) to %s ...\n", synth_preset_name(DEMO_PRESET),
                 dir.c_str());
    SynthOptions options;
    options.preset = DEMO_PRESET;
    options.seed = DEMO_SEED;
    options.out = dir;
    try {
        synth_model_write(options);
    } catch (const MoeError&) {
        if (fs::exists(dir / "config.json")) return dir;  // another server wrote it meanwhile
        throw;
    }
    return dir;
}

std::string demo_model_banner(const fs::path& dir) {
    return "\n"
           "  ===================================================================\n"
           "   DEMO MODEL: no --model was given, so moe-server serves a small\n"
           "   model with RANDOM weights (" +
           dir.string() +
           ").\n"
           "   Its replies are gibberish; it only shows that the API and UI work.\n"
           "   For real answers, download a Mixtral folder from Hugging Face\n"
           "   (e.g. mistralai/Mixtral-8x7B-Instruct-v0.1) and run\n"
           "     moe-server serve --model /path/to/Mixtral-8x7B-Instruct-v0.1\n"
           "  ===================================================================\n\n";
}
