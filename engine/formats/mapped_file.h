// A model file mapped read-only into memory, for the readers that hand out
// zero-copy views into it (safetensors, GGUF). Owns the mapping and nothing
// else: it does not look at the bytes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string_view>

class MappedFile {
public:
    // Throws MoeError "<path>: cannot open (<reason>)", "<path>: not a
    // regular file" or "<path>: mmap failed (<reason>)". An empty file maps
    // to no bytes.
    explicit MappedFile(const std::filesystem::path& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    // The whole file; valid as long as the object.
    std::string_view bytes() const { return {static_cast<const char*>(map_), size_}; }

private:
    void* map_ = nullptr;
    uint64_t size_ = 0;
};
