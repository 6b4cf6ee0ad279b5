// The element-type table of dtype.h.
#include "cpu_kernels/dtype.h"

#include <cstdlib>
#include <iterator>

namespace {

// ggml's type names by id (ggml.h's enum ggml_type); nullptr for ids it
// removed or never used.
constexpr const char* kGgmlNames[] = {
    "f32",     "f16",     "q4_0",    "q4_1",   nullptr,   nullptr, "q5_0",    "q5_1",   "q8_0",    "q8_1",
    "q2_K",    "q3_K",    "q4_K",    "q5_K",   "q6_K",    "q8_K",  "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
    "iq4_nl",  "iq3_s",   "iq2_s",   "iq4_xs", "i8",      "i16",   "i32",     "i64",    "f64",     "iq1_m",
    "bf16",    nullptr,   nullptr,   nullptr,  "tq1_0",   "tq2_0", nullptr,   nullptr,  nullptr,   "mxfp4",
};

}  // namespace

std::optional<size_t> dtype_row_bytes(DType dtype, int64_t n) {
    const DTypeInfo& info = dtype_info(dtype);
    if (n < 0 || n % info.block != 0) return std::nullopt;
    return size_t(n / info.block) * size_t(info.block_bytes);
}

std::optional<DType> dtype_interleaved(DType dtype) {
    for (size_t i = 0; i < std::size(DTYPE_INFO); ++i)
        if (DTYPE_INFO[i].row_group > 1 && DTYPE_INFO[i].plain == dtype) return static_cast<DType>(i);
    return std::nullopt;
}

std::optional<DType> dtype_from_ggml(uint32_t ggml_id) {
    for (size_t i = 0; i < std::size(DTYPE_INFO); ++i)
        if (DTYPE_INFO[i].in_files && DTYPE_INFO[i].ggml_id != DTYPE_NO_GGML && DTYPE_INFO[i].ggml_id == ggml_id)
            return static_cast<DType>(i);
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
