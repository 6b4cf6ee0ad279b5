// Host memory: what the kernel says a process can still take, and the arena
// that holds weights the loader keeps in a layout of its own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu_kernels/huge_pages.h"

// MemAvailable in bytes; 0 when unknown (no /proc/meminfo, no such line).
uint64_t host_memory_available();

// Memory for weights held in their own layout (rows reordered, interleaved),
// in huge-page-advised mappings (cpu_kernels/huge_pages.h): decode streams
// them once per token. Allocations up to CHUNK / 4 are carved from
// CHUNK-sized mappings, bigger ones (a real model's expert matrix) get a
// mapping each, so at most 2 MiB of one is rounding. Freed all at once with
// the arena. Movable, not copyable; alloc throws MoeError when the kernel
// refuses the memory.
class HostArena {
public:
    static constexpr size_t CHUNK = size_t(64) << 20;
    static constexpr size_t ALIGN = 64;  // of every allocation

    std::byte* alloc(size_t bytes);
    // Bytes mapped so far (whole mappings).
    size_t mapped_bytes() const;

private:
    std::byte* map_chunk(size_t bytes);

    std::vector<HugeBuffer> chunks_;
    std::byte* next_ = nullptr;
    size_t left_ = 0;
};
