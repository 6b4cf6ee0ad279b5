// Whole-file reads and atomic writes for the project's small files: a model
// folder's config.json, safetensors index and tokenizer_config.json, chat
// files, and the popularity, prompt and calibration files of profiles/.
// Failures are MoeError naming the path; no std::filesystem exception leaves
// these functions. Lives in base/, below every module that reads files, so
// profiles/, engine/ and server/ use the same reader.
#pragma once
#include <filesystem>
#include <functional>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "base/json_bounded.h"

// What is at path, following symbolic links: file_type::not_found when
// nothing is (or a parent is not a folder); MoeError "<path>: cannot access
// (<reason>)" when it cannot be looked at (permission, a loop of links).
std::filesystem::file_type file_type_at(const std::filesystem::path& path);
// file_type_at(path) != not_found.
bool file_exists(const std::filesystem::path& path);
// "<path>: cannot open file (<reason>)" when it cannot be opened, "<path>: is
// a folder, not a file" for a folder, "<path>: larger than N bytes" past
// max_bytes (checked as it reads). Pipes and devices are read as streams.
std::string file_read_text(const std::filesystem::path& path, size_t max_bytes = SIZE_MAX);
// file_read_text, then json_parse_bounded (nlohmann::json or ordered_json)
// under limits: a JsonError "<path>: not valid JSON: ..." or naming the limit.
template <class Json = nlohmann::json>
Json file_read_json(const std::filesystem::path& path, const JsonLimits& limits = JSON_FILE_LIMITS);
// The file file_write_atomic(path) replaces: path itself when it is a
// regular file or nothing, the file a symbolic link at path points to when
// that is a regular file (the link stays a link). MoeError when the target
// exists and is not a regular file (a device such as /dev/full, a pipe, a
// folder), for a link to nothing, and when it cannot be looked at: callers
// may check --out flags with it before long work.
std::filesystem::path file_write_target(const std::filesystem::path& path);
// An output flag's path checked before any long work, so that the work is
// not done for nothing: MoeError "<flag>: ..." for an empty path, a name
// ending in '/', what file_write_target refuses, and a parent folder that is
// missing, not a folder or not writable ("<flag>: cannot write into DIR").
void file_check_output(const std::string& flag, const std::filesystem::path& path);
// Writes text to a temporary name beside file_write_target(path), then
// renames it over that target: a reader never sees half a file, and a
// device, pipe or folder at path is never replaced.
void file_write_atomic(const std::filesystem::path& path, const std::string& text);
// The same for a file too large to build in memory: `write` streams the
// content into the temporary file. When it throws (or the stream fails) the
// temporary file is removed, the target is left as it was, and the error
// goes on (a failed stream as "<tmp>: write failed (disk full?)").
void file_write_atomic_stream(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);
