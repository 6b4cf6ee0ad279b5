// On-demand synthetic models for tests (kept apart from test_support.cpp so
// tests that need no model do not link the synth-model writer).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>

#include "engine/model/synth_model.h"
#include "engine/text/hf_tokenizer.h"
#include "test_support.h"

namespace fs = std::filesystem;

fs::path test_model_dir(const std::string& preset, unsigned seed) {
    fs::path dir = fs::path(MOE_TEST_BUILD_DIR) / "test-models" / (preset + "-seed" + std::to_string(seed));
    if (fs::exists(dir / "config.json")) return dir;
    fs::create_directories(dir.parent_path());
    fs::path tmp = dir.string() + ".tmp" + std::to_string(getpid());
    fs::remove_all(tmp);
    SynthOptions options;
    options.preset = synth_preset_parse(preset);
    options.out = tmp;
    options.seed = seed;
    synth_model_write(options);
    std::error_code ec;
    fs::rename(tmp, dir, ec);  // another process may have won the race
    fs::remove_all(tmp);
    return dir;
}

ScratchModel::ScratchModel(const std::string& preset, unsigned seed)
    : dir_(test_temp_dir("scratch-" + preset) / "model") {
    SynthOptions options;
    options.preset = synth_preset_parse(preset);
    options.out = dir_;
    options.seed = seed;
    synth_model_write(options);
}

ScratchModel::~ScratchModel() {
    if (std::getenv("MOE_KEEP_TEST_TMP")) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
}

namespace {

using ojson = nlohmann::ordered_json;

void write_text_file(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error(path.string() + ": cannot write");
}

}  // namespace


fs::path tokenizer_json_model_dir(const std::string& tag, const std::string& chat_template) {
    const fs::path tiny = test_model_dir("tiny");
    const fs::path dir = test_temp_dir(tag);
    fs::copy_file(tiny / "model.safetensors", dir / "model.safetensors");
    ojson config = ojson::parse(read_file(tiny / "config.json"));
    config["bos_token_id"] = 259;  // <|endoftext|>
    config["eos_token_id"] = 261;  // <|im_end|>
    write_text_file(dir / "config.json", config.dump(2));
    write_text_file(dir / "tokenizer.json", byte_level_tokenizer_json_text());
    const ojson tc = {{"chat_template", chat_template},
                      {"eos_token", "<|im_end|>"},
                      {"pad_token", "<|endoftext|>"},
                      {"bos_token", nullptr}};
    write_text_file(dir / "tokenizer_config.json", tc.dump(2));
    return dir;
}
