// Whole-file reads and atomic writes for the project's small files: a model
// folder's config.json, safetensors index and tokenizer_config.json, chat
// files, and the popularity, prompt and calibration files of this folder.
// Failures are MoeError naming the path. Lives here, the lowest module that
// reads files, so engine/ and server/ use the same reader.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

// "<path>: cannot open file" when it cannot be opened.
std::string file_read_text(const std::filesystem::path& path);
// file_read_text, then "<path>: not valid JSON" when it does not parse.
nlohmann::json file_read_json(const std::filesystem::path& path);
// Writes text to a temporary name beside path, then renames it over path:
// a reader never sees half a file.
void file_write_atomic(const std::filesystem::path& path, const std::string& text);
