// Fuzzes the tokenizer and chat template built from GGUF metadata
// (engine/text/gguf_tokenizer.h). The input is a GGUF file's head, as for
// fuzz_gguf; once the header parses, building the tokenizer may refuse the
// metadata only with a MoeError (never a SentencePiece failure or a crash),
// and a tokenizer it builds must work: encoding fixed texts and the input's
// own bytes yields ids inside the vocabulary and never BOS or EOS, decoding
// and streaming them never fail, and BOS and EOS (when there) are control ids. The chat
// template's detection refuses only with a MoeError (a value of the wrong type).
#include <cstdlib>
#include <optional>
#include <vector>

#include "base/errors.h"
#include "engine/formats/gguf.h"
#include "engine/text/gguf_tokenizer.h"
#include "fuzz_support.h"
#include "server/openai.h"

namespace {

void check_tokenizer(const Tokenizer& t, std::string_view head) {
    // A gpt2 vocabulary may lack BOS or EOS (-1); a llama one has both.
    if (t.vocab_size() <= 0) std::abort();
    for (int id : {t.bos_id(), t.eos_id()})
        if (id != -1 && !t.is_control(id)) std::abort();
    for (const std::string_view text :
         {std::string_view("Hello world"), std::string_view(" a  b\n\t\xc3\xa9 \xf0\x9f\x98\x80"),
          head.substr(head.size() / 2, 64)}) {
        for (bool prefix : {true, false}) {
            const std::vector<int> ids = t.encode(text, prefix);
            for (int id : ids)
                if (id < 0 || id >= t.vocab_size() || id == t.bos_id() || id == t.eos_id()) std::abort();
            fuzz_decode_and_stream(t, ids);
        }
    }
}

void check(std::string_view head, uint64_t file_size) {
    std::optional<GgufHeader> h;
    fuzz_expect<MoeError>([&] { h = gguf_parse_header(head, file_size, "fuzz.gguf"); }, [](const MoeError&) {});
    if (!h) return;
    std::optional<Tokenizer> t;
    fuzz_expect<MoeError>([&] { t.emplace(tokenizer_from_gguf(h->metadata, "fuzz.gguf")); }, [](const MoeError&) {});
    if (t) check_tokenizer(*t, head);
    std::string warning;
    fuzz_expect<MoeError>([&] { chat_template_from_gguf(h->metadata, "fuzz.gguf", &warning); }, [](const MoeError&) {});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_file_head(data, size, check);
    return 0;
}
