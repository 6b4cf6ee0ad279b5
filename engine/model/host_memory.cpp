// host_memory_available and HostArena (see host_memory.h).
#include "engine/model/host_memory.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "base/errors.h"

uint64_t host_memory_available() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    std::fclose(f);
    return uint64_t(kib) * 1024;
}

std::byte* HostArena::map_chunk(size_t bytes) {
    HugeBuffer chunk = huge_alloc(bytes);
    if (!chunk)
        throw MoeError("host memory: cannot map " + std::to_string(bytes >> 20) + " MiB for the model's weights");
    chunks_.push_back(std::move(chunk));
    return chunks_.back().get();
}

std::byte* HostArena::alloc(size_t bytes) {
    bytes = (std::max(bytes, size_t(1)) + ALIGN - 1) / ALIGN * ALIGN;
    // A big matrix gets a mapping of its own (at most 2 MiB of rounding), so
    // the space a chunk leaves unused is always less than a quarter of it.
    if (bytes > CHUNK / 4) return map_chunk(bytes);
    if (bytes > left_) {
        next_ = map_chunk(CHUNK);
        left_ = CHUNK;
    }
    std::byte* p = next_;
    next_ += bytes;
    left_ -= bytes;
    return p;
}

size_t HostArena::mapped_bytes() const {
    size_t n = 0;
    for (const auto& c : chunks_) n += c.get_deleter().bytes;
    return n;
}
