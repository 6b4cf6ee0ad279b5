// host_memory_available (see host_memory.h).
#include "engine/model/host_memory.h"

#include <cstdint>
#include <cstdio>

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
