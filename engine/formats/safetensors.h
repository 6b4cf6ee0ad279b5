// Safetensors files: memory-mapped, zero-copy. A SafetensorsSet opens one
// model.safetensors or the shards listed by model.safetensors.index.json and
// validates every header (JSON, dtypes, shapes, offsets inside the data and
// not overlapping) before anything is used. Knows nothing about models.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/formats/mapped_file.h"
#include "engine/formats/tensor_view.h"

// One mapped file. Throws MoeError naming the file (and tensor) on any
// malformed header. The mapping lives as long as the object.
class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::filesystem::path& path);
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::map<std::string, TensorView>& tensors() const { return tensors_; }
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
    MappedFile map_;
    std::map<std::string, TensorView> tensors_;
};

// A validated safetensors header. Views' data pointers are null here;
// offsets holds where each tensor begins in the data, which starts at
// data_start bytes into the file.
struct SafetensorsHeader {
    uint64_t data_start = 0;
    std::map<std::string, TensorView> tensors;
    std::map<std::string, uint64_t> offsets;
};

// Validates the first bytes of a safetensors file of file_size bytes: `head`
// must hold the 8-byte header length and the whole JSON header. Throws
// MoeError naming `file` as SafetensorsFile does. Reads nothing past head.
SafetensorsHeader safetensors_parse_header(std::string_view head, uint64_t file_size, const std::string& file);

// All tensors of a model folder, single file or sharded.
class SafetensorsSet {
public:
    explicit SafetensorsSet(const std::filesystem::path& dir);

    // nullptr when absent.
    const TensorView* find(const std::string& name) const;
    const std::map<std::string, TensorView>& tensors() const { return tensors_; }
    // The file that lists the tensors (model.safetensors or the index), for
    // errors about a tensor that is absent.
    const std::string& source() const { return source_; }

private:
    std::string source_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, TensorView> tensors_;
};

// Writes one safetensors file (used by synth-model and by tests that craft
// bad files). Tensors are written in the given order; data must hold
// nbytes for each.
void safetensors_write(const std::filesystem::path& path, const std::vector<TensorView>& tensors);

// The first bytes of such a file: the 8-byte little-endian header length and
// the JSON header (padded with spaces so the data starts 8-byte aligned),
// with data_offsets laid out back to back in the given order. Only name,
// dtype and shape are read. For writers that stream the data afterwards.
std::string safetensors_header(const std::vector<TensorView>& tensors);
