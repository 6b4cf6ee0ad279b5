// Fuzzes the OpenAI request parser (server/openai.h): any body must
// parse into the request structs of every endpoint or be refused with an
// ApiError of status 4xx whose error body serialises as the server sends it.
// Also: utf8_sanitize always yields valid UTF-8.
#include <cstdlib>

#include "base/utf8.h"
#include "fuzz_support.h"
#include "server/openai.h"

namespace {

void refused(const ApiError& e) {
    if (e.status < 400 || e.status > 499) std::abort();
    if (json_dump(api_error_json(e)).empty()) std::abort();
}

template <class F>
void parse(F f) {
    fuzz_expect<ApiError>(f, refused);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string body = fuzz_text(data, size);
    if (!utf8_valid(utf8_sanitize(body))) std::abort();
    nlohmann::ordered_json j;
    bool ok = false;
    parse([&] {
        j = parse_json_body(body);
        ok = true;
    });
    if (!ok) return 0;
    parse([&] { chat_request_parse(j, 4096); });
    parse([&] { completion_request_parse(j, 4096, 32000); });
    parse([&] { chat_messages_parse(j); });
    parse([&] { tokenize_request_parse(j); });
    parse([&] { detokenize_request_parse(j, 32000); });
    return 0;
}
