// Fuzzes the GGUF header parser (engine/formats/gguf.h). The input is the
// head of a file (magic, version, counts, metadata, tensor infos, maybe
// data); it is checked both as a whole file and as the head of a much
// larger one, so the offset, alignment and overlap checks run without the
// data being there. Every refusal must be a MoeError; every accepted tensor
// must be well-formed and lie in the data; every metadata value must decode
// through the generic and the typed accessors.
#include <bit>
#include <cstdlib>
#include <optional>

#include "base/errors.h"
#include "engine/formats/gguf.h"
#include "fuzz_support.h"

namespace {

void check_tensors(const GgufHeader& h, uint64_t file_size) {
    if (h.alignment == 0 || (h.alignment & (h.alignment - 1)) != 0 || h.data_start % h.alignment != 0) std::abort();
    if (h.tensors.size() != h.offsets.size() || h.tensors.size() != h.index.size()) std::abort();
    for (size_t i = 0; i < h.tensors.size(); ++i) {
        const TensorView& t = h.tensors[i];
        if (t.shape.empty() || t.shape.size() > 4) std::abort();
        for (int64_t d : t.shape)
            if (d <= 0) std::abort();
        if (t.nbytes != tensor_nbytes(t.dtype, t.shape, t.name)) std::abort();
        if (h.offsets[i] % h.alignment != 0 || h.data_start > file_size) std::abort();
        if (t.nbytes > file_size - h.data_start || h.offsets[i] > file_size - h.data_start - t.nbytes) std::abort();
        if (h.index.at(t.name) != i) std::abort();
    }
}

// Every value through get_value, and through the typed accessor its type
// has. Once the header is accepted, decoding never fails: only an integer
// out of the range of the type asked for is refused (a MoeError).
void check_metadata(const GgufMetadata& m) {
    for (const GgufKv& kv : m.entries()) {
        const GgufValue v = m.get_value(kv.key);
        if (v.type() != kv.type || m.find(kv.key) != &kv) std::abort();
        const bool array = kv.type == GgufType::ARRAY;
        if (array && (v.items().size() != kv.count || v.elem_type() != kv.elem_type)) std::abort();
        switch (array ? kv.elem_type : kv.type) {
        case GgufType::STRING:
            if (array ? m.get_strings(kv.key).size() != kv.count : m.get_string(kv.key) != v.as_string()) std::abort();
            break;
        case GgufType::FLOAT32:
        case GgufType::FLOAT64:
            if (array ? m.get_floats(kv.key).size() != kv.count
                      : std::bit_cast<uint64_t>(m.get_float(kv.key)) != std::bit_cast<uint64_t>(v.as_float()))
                std::abort();
            break;
        case GgufType::BOOL:
            if (!array && m.get_bool(kv.key) != (v.as_unsigned() != 0)) std::abort();
            break;
        case GgufType::ARRAY: break;
        default:
            fuzz_expect<MoeError>(
                [&] {
                    if (array) {
                        if (m.get_ints<uint64_t>(kv.key).size() != kv.count) std::abort();
                    } else {
                        m.get_int<uint64_t>(kv.key);
                    }
                },
                [](const MoeError&) {});
            fuzz_expect<MoeError>(
                [&] {
                    if (array) m.get_ints<int8_t>(kv.key);
                    else m.get_int<int64_t>(kv.key);
                },
                [](const MoeError&) {});
        }
    }
}

void check(std::string_view head, uint64_t file_size) {
    std::optional<GgufHeader> h;
    fuzz_expect<MoeError>([&] { h = gguf_parse_header(head, file_size, "fuzz.gguf"); }, [](const MoeError&) {});
    if (!h) return;
    check_tensors(*h, file_size);
    check_metadata(h->metadata);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_file_head(data, size, check);
    return 0;
}
