// Fuzzes the SentencePiece tokenizer and the streaming detokenizer
// (engine/text/tokenizer.h) with arbitrary bytes: encoding with and without
// the dummy prefix never yields a control id or one outside the vocabulary;
// decoding the input read as ids, whole or one id at a time, never fails and
// the streamed text is valid UTF-8.
#include <cstdlib>
#include <vector>

#include "engine/text/tokenizer.h"
#include "fuzz_support.h"
#include "server/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const Tokenizer& t = fuzz_tokenizer_model();
    std::string text = fuzz_text(data, size);
    for (bool prefix : {true, false}) {
        std::vector<int> ids = t.encode(text, prefix);
        for (int id : ids)
            if (id < 0 || id >= t.vocab_size() || t.is_control(id)) std::abort();
        t.decode(ids);
    }
    std::vector<int> ids;
    for (size_t i = 0; i + 1 < size; i += 2) ids.push_back(((data[i] << 8) | data[i + 1]) % t.vocab_size());
    fuzz_decode_and_stream(t, ids, size > 0 && (data[0] & 1));
    return 0;
}
