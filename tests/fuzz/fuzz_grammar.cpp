// Fuzzes the GBNF grammar engine (engine/text/grammar.h) with arbitrary
// text: Grammar::parse against the real Mistral vocabulary refuses it with a
// MoeError or gives a grammar whose matcher then walks up to 24 tokens
// (fuzz_grammar_walk), refusing only with MoeError.
#include "engine/text/grammar.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_expect<MoeError>(
        [&] { fuzz_grammar_walk(Grammar::parse(fuzz_text(data, size), fuzz_grammar_vocab(), "fuzz"), data, size); },
        [](const MoeError&) {});
    return 0;
}
