// The demo model `serve` falls back to without --model: a small random-weight
// checkpoint (synth-model preset "small", seed 0) written once into
// ${XDG_CACHE_HOME:-~/.cache}/moe-server/demo-small. Its text is gibberish;
// the banner says so and how to serve a real model. Must not be used when
// the user named a model.
#pragma once
#include <filesystem>
#include <string>

// Where the demo model lives (not created).
std::filesystem::path demo_model_dir();

// Writes the demo model unless it is already there; returns its folder.
// Throws MoeError when the cache folder cannot be found or written.
std::filesystem::path demo_model_ensure();

// The banner printed on stderr when serving the demo model.
std::string demo_model_banner(const std::filesystem::path& dir);
