// A tensor read in place from a model file (safetensors or GGUF): its name,
// element type, row-major shape and a pointer into the file's mapping; the
// bytes such a tensor needs; and the one-line spelling of names and shapes
// that the readers' errors use. Shared by both readers; knows nothing about
// models and never copies data.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cpu_kernels/dtype.h"

struct TensorView {
    std::string name;
    DType dtype = DType::BF16;
    std::vector<int64_t> shape;  // row-major: shape.back() elements per row
    const void* data = nullptr;  // points into the mapping
    size_t nbytes = 0;
    std::string file;  // file name, for error messages
};

// Bytes of a tensor of this dtype and shape (rows of shape.back() elements,
// whole blocks for a quantized type); throws MoeError naming `what` for a
// negative dimension, a row that is not whole blocks, or an overflow.
size_t tensor_nbytes(DType dtype, const std::vector<int64_t>& shape, const std::string& what);

// "[2, 3, 4]".
std::string tensor_shape_string(const std::vector<int64_t>& shape);

// Bytes from a file (a name, a key) on one printable line: control
// characters become '?', and more than 200 bytes end in "...".
std::string printable(std::string_view s);
