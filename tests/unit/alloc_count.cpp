// The replaceable global operator new of the test_unit binary, counting
// every allocation (alloc_count.h). The array and sized forms route here.
#include "alloc_count.h"

#include <atomic>
#include <cstdlib>
#include <new>

// Every global allocation of this test binary is counted, so a test can
// check that a hot path allocates nothing (replaceable global operator new;
// the array and sized forms route here by default).
namespace {
std::atomic<long> global_allocations{0};
}

long global_allocation_count() {
    return global_allocations.load();
}

void* operator new(size_t bytes) {
    global_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(bytes ? bytes : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, size_t) noexcept {
    std::free(p);
}
// Every other form that pairs with these, so no allocation of another
// allocator (e.g. a sanitizer's nothrow or array new) reaches std::free.
void* operator new[](size_t bytes) {
    return operator new(bytes);
}
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
    global_allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(bytes ? bytes : 1);
}
void* operator new[](size_t bytes, const std::nothrow_t& tag) noexcept {
    return operator new(bytes, tag);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
    std::free(p);
}
