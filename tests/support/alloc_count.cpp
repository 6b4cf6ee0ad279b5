// The replaceable global operator new of the test_unit binary, counting
// every allocation (alloc_count.h). The array and sized forms route here.
#include "alloc_count.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

// Every global allocation of this test binary is counted, so a test can
// check that a hot path allocates nothing (replaceable global operator new;
// the array and sized forms route here by default).
namespace {
std::atomic<long> global_allocations{0};
std::atomic<long long> live_bytes{0}, peak_bytes{0};

void* counted(void* p) {
    if (!p) return p;
    global_allocations.fetch_add(1, std::memory_order_relaxed);
    const long long live =
        live_bytes.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed) +
        static_cast<long long>(malloc_usable_size(p));
    long long peak = peak_bytes.load(std::memory_order_relaxed);
    while (live > peak && !peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
    }
    return p;
}

void release(void* p) {
    if (p) live_bytes.fetch_sub(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
    std::free(p);
}
}  // namespace

long global_allocation_count() {
    return global_allocations.load();
}
long long global_live_bytes() {
    return live_bytes.load();
}
long long global_peak_bytes() {
    return peak_bytes.load();
}
void global_peak_reset() {
    peak_bytes.store(live_bytes.load());
}

void* operator new(size_t bytes) {
    if (void* p = counted(std::malloc(bytes ? bytes : 1))) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    release(p);
}
void operator delete(void* p, size_t) noexcept {
    release(p);
}
// Every other form that pairs with these, so no allocation of another
// allocator (e.g. a sanitizer's nothrow or array new) reaches std::free.
void* operator new[](size_t bytes) {
    return operator new(bytes);
}
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
    return counted(std::malloc(bytes ? bytes : 1));
}
void* operator new[](size_t bytes, const std::nothrow_t& tag) noexcept {
    return operator new(bytes, tag);
}
void operator delete[](void* p) noexcept {
    release(p);
}
void operator delete[](void* p, size_t) noexcept {
    release(p);
}
