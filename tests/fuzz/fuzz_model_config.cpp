// Fuzzes config.json parsing (engine/model/model_config.h): any JSON value
// must either give a ModelConfig whose fields the engine can size buffers
// from, or a MoeError. Non-JSON input is refused before the parser, as
// model_config_load does.
#include <cstdlib>

#include "base/errors.h"
#include "engine/model/model_config.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    nlohmann::json j = fuzz_json(data, size);
    if (j.is_discarded()) return 0;
    fuzz_expect<MoeError>(
        [&] {
            ModelConfig c = model_config_parse(j, "config.json");
            if (c.dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.vocab_size <= 0 || c.head_dim <= 0) std::abort();
        },
        [](const MoeError&) {});
    return 0;
}
