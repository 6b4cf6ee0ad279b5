// Fuzzes JSON Schema -> GBNF (chat/json_schema.h) with arbitrary
// JSON: json_schema_gbnf refuses a schema with a MoeError or writes a
// grammar that Grammar::parse accepts (a refusal there would be the
// converter's bug, so it aborts), whose matcher then walks up to 24 tokens
// (fuzz_grammar_walk).
#include <cstdlib>

#include "chat/json_schema.h"
#include "engine/text/grammar.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string gbnf;
    try {  // a schema as a request body carries it (JsonError is a MoeError)
        const auto schema = json_parse_bounded<nlohmann::ordered_json>(
            std::string_view(reinterpret_cast<const char*>(data), size), JSON_BODY_LIMITS, "schema");
        gbnf = json_schema_gbnf(schema, "schema");
    } catch (const MoeError&) {
        return 0;
    }
    std::shared_ptr<const Grammar> grammar;
    try {
        grammar = Grammar::parse(gbnf, fuzz_grammar_vocab(), "schema");
    } catch (const MoeError&) {
        std::abort();
    }
    fuzz_expect<MoeError>([&] { fuzz_grammar_walk(grammar, data, size); }, [](const MoeError&) {});
    return 0;
}
