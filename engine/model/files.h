// Whole-file reads for the small text files of a model folder (config.json,
// the safetensors index, tokenizer_config.json, chat files). Failures are
// MoeError naming the path.
#pragma once
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

// "<path>: cannot open file" when it cannot be read.
std::string file_read_text(const std::filesystem::path& path);
// file_read_text, then "<path>: not valid JSON" when it does not parse.
nlohmann::json file_read_json(const std::filesystem::path& path);
