// Fuzzes the Jinja interpreter (chat/jinja.h) with hostile chat
// templates: the input is a template's text, parsed and rendered with a
// fixed conversation (messages, tools, special tokens) under a small
// WorkBudget (steps, bytes, output, wall time). Refusals only as MoeError.
// The budget must hold: a template that hangs, exhausts memory or overflows
// the stack is a finding through libFuzzer's -timeout, -rss_limit_mb and
// AddressSanitizer (the limits below are far inside them).
#include <chrono>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "chat/jinja.h"
#include "fuzz_support.h"

namespace {

const JinjaChatInput& conversation() {
    static const JinjaChatInput input = [] {
        JinjaChatInput in;
        in.messages = nlohmann::ordered_json::parse(
            R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9 <s>"},
                {"role": "assistant", "content": "Hello.", "tool_calls": [{"type": "function", "function":
                 {"name": "f", "arguments": {"x": [1, 2.5, null, true]}}}]},
                {"role": "tool", "content": "42"}, {"role": "user", "content": "Thanks"}])");
        in.tools = nlohmann::ordered_json::parse(
            R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
        in.add_generation_prompt = true;
        in.bos_token = "<s>";
        in.eos_token = "</s>";
        return in;
    }();
    return input;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    JinjaRenderOptions options;
    options.limits.max_steps = 200'000;
    options.limits.max_bytes = 64u << 20;
    options.limits.max_output_bytes = 4u << 20;
    options.limits.max_list_items = 100'000;
    options.limits.max_time = std::chrono::seconds(2);
    std::tm fixed{};
    options.now = fixed;
    fuzz_expect<MoeError>(
        [&] {
            const JinjaTemplate tmpl(fuzz_text(data, size), "fuzz template");
            jinja_render_chat(tmpl, conversation(), options);
        },
        [](const MoeError&) {});
    return 0;
}
