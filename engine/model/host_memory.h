// Host memory: what the kernel says a process can still take, and the arena
// that holds weights the loader keeps in a layout of its own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

// MemAvailable in bytes; 0 when unknown (no /proc/meminfo, no such line).
uint64_t host_memory_available();

// Memory for weights held in their own layout (rows reordered, interleaved):
// anonymous mappings, 2 MiB aligned and advised for transparent huge pages
// (MADV_HUGEPAGE; ignored where the kernel has them off). Allocations up to
// CHUNK / 4 are carved from CHUNK-sized mappings, bigger ones (a real
// model's expert matrix) get a mapping each. Decode streams these once per token, and
// 2 MiB pages keep the hardware prefetchers running where 4 KiB pages stop
// them at every page. Freed all at once with the arena. Movable, not
// copyable; alloc throws MoeError when the kernel refuses the memory.
class HostArena {
public:
    static constexpr size_t CHUNK = size_t(64) << 20;
    static constexpr size_t ALIGN = 64;  // of every allocation

    std::byte* alloc(size_t bytes);
    // Bytes mapped so far (whole chunks).
    size_t mapped_bytes() const;

private:
    std::byte* map_chunk(size_t bytes);

    struct Unmap {
        size_t bytes = 0;
        void operator()(std::byte* p) const;
    };
    std::vector<std::unique_ptr<std::byte, Unmap>> chunks_;
    std::byte* next_ = nullptr;
    size_t left_ = 0;
};
