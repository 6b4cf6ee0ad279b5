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
#include <vector>

enum class DType { BF16, F16, F32 };

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);

struct TensorView {
    std::string name;
    DType dtype = DType::BF16;
    std::vector<int64_t> shape;
    const void* data = nullptr;  // points into the mapping
    size_t nbytes = 0;
    std::string file;            // shard file name, for error messages
};

// One mapped file. Throws MoeError naming the file (and tensor) on any
// malformed header. The mapping lives as long as the object.
class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::filesystem::path& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::map<std::string, TensorView>& tensors() const { return tensors_; }

private:
    void* map_ = nullptr;
    size_t map_size_ = 0;
    std::map<std::string, TensorView> tensors_;
};

// All tensors of a model folder, single file or sharded.
class SafetensorsSet {
public:
    explicit SafetensorsSet(const std::filesystem::path& dir);

    // nullptr when absent.
    const TensorView* find(const std::string& name) const;
    const std::map<std::string, TensorView>& tensors() const { return tensors_; }

private:
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, TensorView> tensors_;
};

// Writes one safetensors file (used by synth-model and by tests that craft
// bad files). Tensors are written in the given order; data must hold
// nbytes for each.
void safetensors_write(const std::filesystem::path& path, const std::vector<TensorView>& tensors);
