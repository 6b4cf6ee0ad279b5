// The element-type table of dtype.h.
#include "cpu_kernels/dtype.h"

#include <cstdlib>
#include <iterator>

namespace {

// Indexed by DType. Block layouts: quant.h.
// Q4_K: fp16 d, dmin + 12 bytes of 6-bit scales / mins + 128 bytes of nibbles.
// Q6_K: 128 bytes of low nibbles + 64 of high 2 bits + 16 int8 scales + fp16 d.
constexpr DTypeInfo kInfo[] = {
    {"F32", 0, 1, 4, 1, DType::F32, true},             // F32
    {"F16", 1, 1, 2, 1, DType::F16, true},             // F16
    {"BF16", 30, 1, 2, 1, DType::BF16, true},          // BF16
    {"Q8_0", 8, 32, 34, 1, DType::Q8_0, true},         // fp16 scale + 32 int8
    {"Q4_0", 2, 32, 18, 1, DType::Q4_0, true},         // fp16 scale + 32 nibbles
    {"Q4_K", 12, 256, 144, 1, DType::Q4_K, true},      // see above
    {"Q5_K", 13, 256, 176, 1, DType::Q5_K, true},      // Q4_K's + 32 bytes of fifth bits
    {"Q6_K", 14, 256, 210, 1, DType::Q6_K, true},      // see above
    {"Q4_K_R8", 12, 256, 144, 8, DType::Q4_K, false},  // Q4_K, 8 rows interleaved (memory only)
    {"Q6_K_R8", 14, 256, 210, 8, DType::Q6_K, false},  // Q6_K, 8 rows interleaved (memory only)
    {"Q8_0_R8", 8, 32, 34, 8, DType::Q8_0, false},     // Q8_0, 8 rows interleaved (memory only)
};

// ggml's type names by id (ggml.h's enum ggml_type); nullptr for ids it
// removed or never used.
constexpr const char* kGgmlNames[] = {
    "f32",     "f16",     "q4_0",    "q4_1",   nullptr,   nullptr, "q5_0",    "q5_1",   "q8_0",    "q8_1",
    "q2_K",    "q3_K",    "q4_K",    "q5_K",   "q6_K",    "q8_K",  "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
    "iq4_nl",  "iq3_s",   "iq2_s",   "iq4_xs", "i8",      "i16",   "i32",     "i64",    "f64",     "iq1_m",
    "bf16",    nullptr,   nullptr,   nullptr,  "tq1_0",   "tq2_0", nullptr,   nullptr,  nullptr,   "mxfp4",
};

}  // namespace

const DTypeInfo& dtype_info(DType dtype) { return kInfo[static_cast<size_t>(dtype)]; }

std::optional<size_t> dtype_row_bytes(DType dtype, int64_t n) {
    const DTypeInfo& info = dtype_info(dtype);
    if (n < 0 || n % info.block != 0) return std::nullopt;
    return size_t(n / info.block) * size_t(info.block_bytes);
}

std::optional<DType> dtype_interleaved(DType dtype) {
    for (size_t i = 0; i < std::size(kInfo); ++i)
        if (kInfo[i].row_group > 1 && kInfo[i].plain == dtype) return static_cast<DType>(i);
    return std::nullopt;
}

std::optional<DType> dtype_from_ggml(uint32_t ggml_id) {
    for (size_t i = 0; i < std::size(kInfo); ++i)
        if (kInfo[i].in_files && kInfo[i].ggml_id == ggml_id) return static_cast<DType>(i);
    return std::nullopt;
}

const char* ggml_type_name(uint32_t ggml_id) {
    return ggml_id < std::size(kGgmlNames) ? kGgmlNames[ggml_id] : nullptr;
}

WeightView weight_view(DType type, const void* data, int64_t rows, int64_t cols) {
    std::optional<size_t> row = dtype_row_bytes(type, cols);
    if (!row || rows < 0 || rows % dtype_row_group(type) != 0) std::abort();
    return WeightView{type, data, rows, cols, *row};
}
