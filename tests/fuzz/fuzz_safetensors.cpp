// Fuzzes the safetensors header parser (engine/formats/safetensors.h). The
// input is the head of a file (8-byte length, JSON header, maybe data); it
// is checked both as a whole file and as the head of a much larger one, so
// the offset and overlap checks run without the data being there. Every
// refusal must be a MoeError; every accepted tensor must lie in the data.
#include <cstdlib>

#include "base/errors.h"
#include "engine/formats/safetensors.h"
#include "fuzz_support.h"

namespace {

void check(std::string_view head, uint64_t file_size) {
    fuzz_expect<MoeError>(
        [&] {
            SafetensorsHeader h = safetensors_parse_header(head, file_size, "fuzz.safetensors");
            for (const auto& [name, view] : h.tensors) {
                uint64_t begin = h.offsets.at(name);
                if (view.nbytes > file_size - h.data_start || begin > file_size - h.data_start - view.nbytes)
                    std::abort();
                if (view.nbytes != tensor_nbytes(view.dtype, view.shape, name)) std::abort();
            }
        },
        [](const MoeError&) {});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_file_head(data, size, check);
    return 0;
}
