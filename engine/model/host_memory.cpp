// host_memory_available and HostArena (see host_memory.h).
#include "engine/model/host_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "profiles/errors.h"

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

namespace {

constexpr size_t HUGE_PAGE = size_t(2) << 20;

size_t round_up(size_t n, size_t to) {
    return (n + to - 1) / to * to;
}

}  // namespace

void HostArena::Unmap::operator()(std::byte* p) const {
    munmap(p, bytes);
}

std::byte* HostArena::map_chunk(size_t bytes) {
    // 2 MiB aligned: map one huge page more and trim.
    const size_t size = round_up(bytes, HUGE_PAGE);
    void* m = mmap(nullptr, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        throw MoeError("host memory: cannot map " + std::to_string(size >> 20) + " MiB for the model's weights");
    auto* raw = static_cast<std::byte*>(m);
    auto* base = reinterpret_cast<std::byte*>(round_up(reinterpret_cast<uintptr_t>(raw), HUGE_PAGE));
    if (base > raw) munmap(raw, size_t(base - raw));
    if (std::byte* end = base + size; end < raw + size + HUGE_PAGE) munmap(end, size_t(raw + size + HUGE_PAGE - end));
    madvise(base, size, MADV_HUGEPAGE);  // a hint: without THP the pages are just smaller
    chunks_.emplace_back(base, Unmap{size});
    return base;
}

std::byte* HostArena::alloc(size_t bytes) {
    bytes = round_up(bytes == 0 ? 1 : bytes, ALIGN);
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
