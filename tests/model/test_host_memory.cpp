// HostArena: allocations are aligned, writable, never overlap, and survive
// the arena's move; one above a quarter chunk gets a mapping of its own and
// leaves the small ones' chunk to go on; mappings are 2 MiB aligned (the
// huge-page advice needs that).
// host_memory_available agrees with /proc/meminfo's MemAvailable.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/host_memory.h"

TEST_CASE("HostArena hands out aligned, disjoint, writable memory in 2 MiB aligned chunks", "[host_memory]") {
    HostArena arena;
    REQUIRE(arena.mapped_bytes() == 0);
    struct Block {
        std::byte* p;
        size_t n;
    };
    std::vector<Block> blocks;
    // Sizes that are not multiples of the alignment; three above a quarter
    // chunk (one above a whole chunk) between small ones.
    const std::vector<size_t> sizes = {1, 63, 64, 65, 4096, 3 << 20, HostArena::CHUNK + 12345, 7, 40 << 20, 40 << 20};
    for (size_t i = 0; i < sizes.size(); i++) {
        std::byte* p = arena.alloc(sizes[i]);
        REQUIRE(reinterpret_cast<uintptr_t>(p) % HostArena::ALIGN == 0);
        std::memset(p, int(i + 1), sizes[i]);
        blocks.push_back({p, sizes[i]});
    }
    size_t total = 0;
    for (size_t s : sizes) total += s;
    REQUIRE(arena.mapped_bytes() >= total);
    REQUIRE(arena.mapped_bytes() % (size_t(2) << 20) == 0);
    // Each block still holds its own fill: nothing overlapped.
    HostArena moved = std::move(arena);
    for (size_t i = 0; i < blocks.size(); i++) {
        const auto* p = reinterpret_cast<const unsigned char*>(blocks[i].p);
        INFO("block " << i << " of " << blocks[i].n << " bytes");
        REQUIRE(p[0] == i + 1);
        REQUIRE(p[blocks[i].n - 1] == i + 1);
        REQUIRE(p[blocks[i].n / 2] == i + 1);
    }
    // Blocks above a quarter chunk get mappings of their own, 2 MiB aligned,
    // and the small ones go on in the chunk they left: one chunk in all for
    // the small ones, each big one rounded up to 2 MiB.
    for (size_t i : {6, 8, 9}) REQUIRE(reinterpret_cast<uintptr_t>(blocks[i].p) % (size_t(2) << 20) == 0);
    REQUIRE(blocks[7].p == blocks[5].p + sizes[5]);
    const size_t mib = size_t(1) << 20;
    REQUIRE(moved.mapped_bytes() == HostArena::CHUNK + (HostArena::CHUNK + 2 * mib) + 80 * mib);
}

TEST_CASE("host_memory_available is /proc/meminfo's MemAvailable", "[host_memory]") {
    std::ifstream in("/proc/meminfo");
    std::string line;
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::getline(in, line))
        found = line.rfind("MemAvailable:", 0) == 0 && (kib = std::stoull(line.substr(13))) > 0;
    if (!found) {
        REQUIRE(host_memory_available() == 0);
        return;
    }
    // The figure moves between the two reads; a few hundred MiB is plenty.
    const double ours = double(host_memory_available()), theirs = double(kib) * 1024;
    REQUIRE(std::abs(ours - theirs) < 512.0 * (1 << 20));
}
