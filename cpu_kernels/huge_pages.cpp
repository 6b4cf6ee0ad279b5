// huge_alloc (see huge_pages.h).
#include "cpu_kernels/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

void HugeUnmap::operator()(std::byte* p) const {
    munmap(p, bytes);
}

HugeBuffer huge_alloc(size_t bytes) {
    // Map one huge page more than needed and trim both ends to 2 MiB.
    const size_t size = (bytes + HUGE_PAGE_BYTES - 1) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    void* m = mmap(nullptr, size + HUGE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return HugeBuffer();
    auto* raw = static_cast<std::byte*>(m);
    const uintptr_t a = reinterpret_cast<uintptr_t>(raw);
    auto* base = raw + ((HUGE_PAGE_BYTES - a % HUGE_PAGE_BYTES) % HUGE_PAGE_BYTES);
    if (base > raw) munmap(raw, size_t(base - raw));
    if (std::byte* end = base + size; end < raw + size + HUGE_PAGE_BYTES)
        munmap(end, size_t(raw + size + HUGE_PAGE_BYTES - end));
    madvise(base, size, MADV_HUGEPAGE);
    return HugeBuffer(base, HugeUnmap{size});
}
