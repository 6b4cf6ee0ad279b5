// Element types of weight tensors: the float types of safetensors and GGUF
// files and the GGUF block-quantized types the kernels read. The one list of
// them: names, GGUF (ggml) type ids, block sizes and bytes per block live
// here and nowhere else. A quantized type stores a row of n weights as
// n / block blocks of block_bytes each (the layouts are in quant.h); a float
// type is a "block" of one element. WeightView is how a weight matrix of any
// of them is handed around: its type, its pointer and its row size.
//
// Three types exist only in memory, never in a file: Q8_0_R8, Q4_K_R8 and
// Q6_K_R8, the blocks of 8 consecutive rows interleaved (quant.h), the
// layouts the CPU's kernels read fastest. A matrix of one keeps its plain
// type's row size, but its rows go in groups of 8 (row_group): group g's
// bytes are the 8 * row_bytes from data + 8 g * row_bytes. Its `plain`
// type, that of one row taken out of the group, is Q8_0 / Q4_K / Q6_K.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q4_K_R8, Q6_K_R8, Q8_0_R8, MXFP4, U8 };

// The ggml id of a type no GGUF file holds (U8).
inline constexpr uint32_t DTYPE_NO_GGML = 0xFFFFFFFFu;

struct DTypeInfo {
    const char* name;     // "BF16", "Q4_K", ...: safetensors' spelling for the float types, ggml's for the rest
    uint32_t ggml_id;     // the type id GGUF tensor infos carry
    int block;            // elements per block (1 for a float type)
    int block_bytes;      // bytes per block (per row)
    int row_group;        // rows interleaved together (1: none)
    DType plain;          // the type of one row out of its group (the type itself when row_group is 1)
    bool in_files;        // a type of safetensors or GGUF files (not the _R8 ones)
};

// Indexed by DType. Block layouts: quant.h.
// Q4_K: fp16 d, dmin + 12 bytes of 6-bit scales / mins + 128 bytes of nibbles.
// Q6_K: 128 bytes of low nibbles + 64 of high 2 bits + 16 int8 scales + fp16 d.
inline constexpr DTypeInfo DTYPE_INFO[] = {
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
    {"MXFP4", 39, 32, 17, 1, DType::MXFP4, true},      // e8m0 scale + 32 FP4 (e2m1) nibbles (gpt-oss's experts)
    // Raw bytes of a safetensors file (gpt-oss's MXFP4 *_blocks / *_scales,
    // converted to MXFP4 at load); never a weight the kernels read.
    {"U8", DTYPE_NO_GGML, 1, 1, 1, DType::U8, true},
};

inline const DTypeInfo& dtype_info(DType dtype) { return DTYPE_INFO[static_cast<size_t>(dtype)]; }
inline const char* dtype_name(DType dtype) { return dtype_info(dtype).name; }
inline bool dtype_quantized(DType dtype) { return dtype_info(dtype).block > 1; }
inline int dtype_row_group(DType dtype) {
    return dtype_info(dtype).row_group;
}
inline DType dtype_plain(DType dtype) {
    return dtype_info(dtype).plain;
}
// The row-interleaved form of a type (Q8_0 -> Q8_0_R8, Q4_K -> Q4_K_R8, Q6_K -> Q6_K_R8), if it has one.
std::optional<DType> dtype_interleaved(DType dtype);

// Bytes of a row of n elements; nullopt when n is negative or not a multiple
// of the type's block.
std::optional<size_t> dtype_row_bytes(DType dtype, int64_t n);

// The DType of a ggml type id; nullopt for a type moe-server does not read
// (never an _R8 type, which no file holds).
std::optional<DType> dtype_from_ggml(uint32_t ggml_id);

// ggml's name of any type id it defines ("q2_K", "iq4_xs", ...), supported
// here or not, for errors that name the type; nullptr for an id ggml does not
// define.
const char* ggml_type_name(uint32_t ggml_id);

// A (rows, cols) weight matrix of any type, read in place: row r starts at
// data + r * row_bytes (row_bytes = dtype_row_bytes(type, cols)).
struct WeightView {
    DType type = DType::BF16;
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_bytes = 0;

    bool empty() const { return data == nullptr; }
    size_t bytes() const { return size_t(rows) * row_bytes; }
    const void* row(int64_t r) const { return static_cast<const char*>(data) + size_t(r) * row_bytes; }
};

// The view of rows x cols elements of `type` at data. cols must be whole
// blocks of the type (callers validate shapes first; a bad one aborts).
WeightView weight_view(DType type, const void* data, int64_t rows, int64_t cols);
