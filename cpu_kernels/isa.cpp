// ISA detection (the only CPUID reader) and the active-path switch.
#include "cpu_kernels/isa.h"

#include <atomic>
#include <cpuid.h>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

struct CpuFeatures {
    bool avx2 = false, fma = false, f16c = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512bf16 = false, avx512vnni = false;
    bool os_avx = false, os_avx512 = false;
};

uint64_t xgetbv0() {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t(hi) << 32) | lo;
}

CpuFeatures read_cpuid() {
    CpuFeatures f;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    bool osxsave = c & (1u << 27);
    f.fma = c & (1u << 12);
    f.f16c = c & (1u << 29);
    if (osxsave) {
        uint64_t xcr0 = xgetbv0();
        f.os_avx = (xcr0 & 0x6) == 0x6;             // XMM + YMM state
        f.os_avx512 = (xcr0 & 0xe6) == 0xe6;        // + opmask, ZMM_Hi256, Hi16_ZMM
    }
    if (__get_cpuid_max(0, nullptr) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = b & (1u << 5);
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512vnni = c & (1u << 11);
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512bf16 = a & (1u << 5);
    return f;
}

// Leaves 0x80000002..4: 48 bytes of brand string, padded with spaces or NULs.
std::string read_brand_string() {
    unsigned regs[12] = {};
    if (__get_cpuid_max(0x80000000, nullptr) < 0x80000004) return "unknown-x86";
    for (unsigned leaf = 0; leaf < 3; leaf++)
        __get_cpuid(0x80000002 + leaf, &regs[4 * leaf], &regs[4 * leaf + 1], &regs[4 * leaf + 2], &regs[4 * leaf + 3]);
    std::string s(reinterpret_cast<const char*>(regs), sizeof(regs));
    s = s.substr(0, s.find('\0'));
    size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
    return b == std::string::npos ? "unknown-x86" : s.substr(b, e - b + 1);
}

const CpuFeatures& features() {
    static const CpuFeatures f = read_cpuid();
    return f;
}

Isa initial_isa() {
    if (const char* env = std::getenv("MOE_CPU_ISA")) {
        auto isa = isa_parse(env);
        if (isa && isa_supported(*isa)) return *isa;
    }
    return isa_detect();
}

std::atomic<int>& active() {
    static std::atomic<int> a{int(initial_isa())};
    return a;
}

}  // namespace

bool isa_supported(Isa isa) {
    const CpuFeatures& f = features();
    bool avx2 = f.os_avx && f.avx2 && f.fma && f.f16c;
    bool avx512 = avx2 && f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
    switch (isa) {
    case Isa::SCALAR: return true;
    case Isa::AVX2: return avx2;
    case Isa::AVX512: return avx512;
    case Isa::AVX512BF16:
        return avx512 && f.avx512bf16 && f.avx512vnni;  // every AVX512_BF16 CPU has VNNI
    }
    return false;
}

Isa isa_detect() {
    for (Isa isa : {Isa::AVX512BF16, Isa::AVX512, Isa::AVX2})
        if (isa_supported(isa)) return isa;
    return Isa::SCALAR;
}

const char* isa_name(Isa isa) {
    switch (isa) {
    case Isa::SCALAR: return "scalar";
    case Isa::AVX2: return "avx2";
    case Isa::AVX512: return "avx512";
    case Isa::AVX512BF16: return "avx512bf16";
    }
    return "?";
}

std::optional<Isa> isa_parse(std::string_view name) {
    for (Isa isa : {Isa::SCALAR, Isa::AVX2, Isa::AVX512, Isa::AVX512BF16})
        if (name == isa_name(isa)) return isa;
    return std::nullopt;
}

bool isa_select(Isa isa) {
    if (!isa_supported(isa)) return false;
    active().store(int(isa));
    return true;
}

const char* cpu_model_name() {
    static const std::string name = read_brand_string();
    return name.c_str();
}

Isa isa_active() { return Isa(active().load(std::memory_order_relaxed)); }
