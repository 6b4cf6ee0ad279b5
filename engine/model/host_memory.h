// Host memory the kernel says a process can still take: MemAvailable from
// /proc/meminfo. Read fresh on every call; never allocates model memory.
#pragma once
#include <cstdint>

// MemAvailable in bytes; 0 when unknown (no /proc/meminfo, no such line).
uint64_t host_memory_available();
