// Anonymous memory for data streamed at memory-bus speed (weights laid out
// by the loader, the benchmarks' buffers): 2 MiB aligned and advised for
// transparent huge pages (MADV_HUGEPAGE; a hint: where the kernel has them
// off the pages are 4 KiB). With 2 MiB pages the hardware prefetchers keep
// running where 4 KiB pages stop them at every page boundary.
#pragma once
#include <cstddef>
#include <memory>

constexpr size_t HUGE_PAGE_BYTES = size_t(2) << 20;

struct HugeUnmap {
    size_t bytes = 0;  // the whole mapping
    void operator()(std::byte* p) const;
};
using HugeBuffer = std::unique_ptr<std::byte, HugeUnmap>;

// At least `bytes` (rounded up to 2 MiB; the size is get_deleter().bytes),
// zero-filled as the kernel hands it out; empty when the kernel refuses.
HugeBuffer huge_alloc(size_t bytes);
