// Fuzzes tokenizer_config.json reading and chat-template detection
// (chat/chat_template.h): the chat_template is taken from any JSON
// value, or a MoeError says why not; detection runs on the template found
// and on the raw input as a Jinja source.
#include "base/errors.h"
#include "chat/chat_template.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    ChatFamily family = ChatFamily::MISTRAL;
    ChatTemplate::detect(fuzz_text(data, size), &family);
    nlohmann::json j = fuzz_json(data, size);
    if (j.is_discarded()) return 0;
    fuzz_expect<MoeError>(
        [&] {
            std::string note;
            std::string jinja = chat_template_from_config(j, "tokenizer_config.json", &note);
            ChatTemplate::detect(jinja, &family);
        },
        [](const MoeError&) {});
    return 0;
}
