// Fuzzes the tokenizer.json reader and BPE backend (engine/text/hf_tokenizer.h):
// the input is a tokenizer.json document, refused only with a MoeError; a
// tokenizer it builds must work: encoding fixed texts and the input's own
// bytes, with and without specials and the prefix, refuses only with a
// MoeError (a character outside a vocabulary without unk or byte fallback,
// invalid UTF-8 for a regex or a normalizer) and otherwise yields ids inside
// the vocabulary (a document whose merges spell a special token may give its
// id, as Hugging Face would); decoding and streaming them never fail and
// stream valid UTF-8.
#include <cstdlib>
#include <optional>
#include <vector>

#include "base/errors.h"
#include "engine/text/hf_tokenizer.h"
#include "fuzz_support.h"
#include "server/openai.h"

namespace {

void check_tokenizer(const Tokenizer& t, std::string_view input) {
    if (t.vocab_size() <= 0) std::abort();
    for (const std::string_view text :
         {std::string_view("Hello world 123"), std::string_view(" a  b\n\t\xc3\xa9 \xf0\x9f\x98\x80"),
          input.substr(input.size() / 2, 64)}) {
        for (const SpecialTokens specials : {SpecialTokens::AS_TEXT, SpecialTokens::PARSE}) {
            std::vector<int> ids;
            fuzz_expect<MoeError>([&] { ids = t.encode(text, specials == SpecialTokens::AS_TEXT, specials); },
                                  [](const MoeError&) {});
            for (int id : ids)
                if (id < 0 || id >= t.vocab_size()) std::abort();
            fuzz_decode_and_stream(t, ids);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    std::optional<Tokenizer> t;
    fuzz_expect<MoeError>(
        [&] {
            t.emplace(hf_tokenizer_parse(input, "tokenizer.json", {"", ""}));
        },
        [](const MoeError&) {});
    if (t) check_tokenizer(*t, input);
    return 0;
}
