// Tensor sizes and the printable spelling of names and shapes (tensor_view.h).
#include "engine/formats/tensor_view.h"

#include <optional>

#include "base/errors.h"

std::string printable(std::string_view s) {
    std::string out;
    for (char c : s.substr(0, 200)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
    if (s.size() > 200) out += "...";
    return out;
}

std::string tensor_shape_string(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

size_t tensor_nbytes(DType dtype, const std::vector<int64_t>& shape, const std::string& what) {
    for (int64_t d : shape)
        if (d < 0) throw MoeError(what + ": negative dimension in shape " + tensor_shape_string(shape));
    // A row (the last dimension) is whole blocks; the other dimensions count rows.
    std::optional<size_t> row = dtype_row_bytes(dtype, shape.empty() ? 1 : shape.back());
    if (!row)
        throw MoeError(what + ": " + dtype_name(dtype) + " rows must hold a multiple of " +
                       std::to_string(dtype_info(dtype).block) + " elements, not " + tensor_shape_string(shape));
    size_t n = *row;
    for (size_t i = 0; i + 1 < shape.size(); ++i)
        if (__builtin_mul_overflow(n, size_t(shape[i]), &n))
            throw MoeError(what + ": shape " + tensor_shape_string(shape) + " is too large");
    return n;
}
