// Tool calls in a model's reply: the one table of tool-call formats per
// chat-template family (how a template is recognised, what starts a call in
// the output, the arguments key, one call or several, the id style), the
// parser that turns a reply (whole, or streamed piece by piece) into content
// and calls, and the GBNF envelope that forces a call (tool_choice
// "required" or a named function) around argument grammars made elsewhere.
//
// Calls are native structs here; the OpenAI response JSON is server/'s. The
// parser never throws on model output: a call whose JSON is malformed (or
// never completes) stays plain content.
//
// Parser input is text. A trigger that is a control token (Mistral v3's
// [TOOL_CALLS], Llama's <|python_tag|>) decodes to nothing, so the parser
// takes generated tokens with their decoded text (push_token) and splices
// the trigger's piece in when the token is the trigger's id
// (tool_call_trigger_token): one text path serves every family, the
// one-shot parse of a stored reply is the same code, and tests feed plain
// text. The argument grammars come from json_schema.* (GbnfBuilder).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

class GbnfBuilder;
class Tokenizer;

enum class ToolCallFamily { NONE, HERMES, MISTRAL, LLAMA3 };

// How a call's id is made when the model gives none.
enum class ToolCallIdStyle {
    OPENAI,  // "call_" + 24 letters and digits
    ALNUM9,  // 9 letters and digits (Mistral's templates refuse others in history)
};

// One row of the table (tool_call_formats()).
struct ToolCallFormat {
    ToolCallFamily family;
    const char* name;           // "hermes", "mistral", "llama3", "none"
    std::string_view marker;    // text in a template's source that names the family (rows tried in order)
    std::string_view trigger;   // text (or a control token's piece) that starts a call in the output
    std::string_view close;     // text that ends a call block ("</tool_call>"), "" when none
    bool array;                 // the trigger is followed by a JSON array of calls (else one object)
    bool multiple;              // several calls per reply (blocks, or array elements)
    bool object_at_start;       // a reply that starts with '{' is a call without the trigger
    std::string_view args_key;  // "arguments" or "parameters" (the parser accepts either)
    ToolCallIdStyle id_style;
    // The envelope as GBNF fragments ("" when none): before the calls, around
    // each call's {"name": ..., "ARGS_KEY": ...} object, between calls, after.
    std::string_view gbnf_open, gbnf_call_open, gbnf_call_close, gbnf_separator, gbnf_close;
};

// Every row, NONE last.
std::span<const ToolCallFormat> tool_call_formats();
const ToolCallFormat& tool_call_format(ToolCallFamily family);
// The family of a Jinja chat template, from its source text (the template a
// request with tools renders: a tokenizer_config.json's "tool_use" one when
// it has one); the NONE row when it has no format this table knows
// (Functionary's ">>>", Command-R's "Action:", templates without tools).
const ToolCallFormat& tool_call_format_detect(std::string_view template_source);

// The id of the control token whose piece is the format's trigger (decoding
// to something other than the trigger's text), -1 when the trigger is plain
// text in this vocabulary or absent from it.
int tool_call_trigger_token(const ToolCallFormat& format, const Tokenizer& tokenizer);

struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // compact JSON text of the arguments object
};

// A whole reply: content is the text around the calls (nullopt when there
// are calls and no other text; the reply unchanged when there are none).
struct ToolCallReply {
    std::optional<std::string> content;
    std::vector<ToolCall> calls;
};

// One streaming event: a content delta, or a finished call (index >= 0, its
// position in the reply's tool_calls). A call is reported once, whole, when
// its JSON is complete (for Mistral's array: when the array is), so the
// first and only tool_calls delta of a call carries id, type, name and the
// whole arguments string; OpenAI's clients accumulate either shape.
struct ToolCallEvent {
    std::string content;
    int index = -1;
    ToolCall call;
};

// The bracket depth of JSON text read one character at a time, brackets
// inside strings (escapes honoured) not counted.
struct JsonBrackets {
    int depth = 0;
    bool in_string = false, escape = false;
    // +1 when c opens a bracket, -1 when it closes one, else 0.
    int step(char c);
};

// The incremental parser. Text that can no longer start a call is released
// as content; a possible start of a trigger is held back (like a stop-string
// matcher), as is a whitespace run, which is dropped when a call follows it
// or directly precedes it. Ids are drawn deterministically from id_seed in
// the family's style (a call JSON's own "id" of that style is kept).
class ToolCallParser {
public:
    ToolCallParser(const ToolCallFormat& format, uint64_t id_seed, int trigger_token = -1);

    // Generated text (UTF-8, as the Detokenizer hands it out).
    std::vector<ToolCallEvent> push(std::string_view text);
    // A generated token and its decoded text; the trigger's piece is spliced
    // in when token is trigger_token.
    std::vector<ToolCallEvent> push_token(int token, std::string_view text);
    // End of the reply: releases what is held (an unfinished call as content).
    std::vector<ToolCallEvent> finish();

    // Everything so far (after finish(): the reply).
    ToolCallReply reply() const;

private:
    enum class State { TEXT, CALL, CLOSE };
    void run(std::vector<ToolCallEvent>& out);
    bool scan_text(std::vector<ToolCallEvent>& out);
    bool scan_call(std::vector<ToolCallEvent>& out);
    bool scan_close();
    void fail_call(std::vector<ToolCallEvent>& out);
    void release(std::string_view text, std::vector<ToolCallEvent>& out);
    std::string next_id();

    const ToolCallFormat* format_;
    int trigger_token_;
    uint64_t rng_;
    State state_ = State::TEXT;
    std::string buf_;        // TEXT: unreleased text; CLOSE: text after a call's JSON
    std::string ws_before_;  // the whitespace run before the current call's trigger
    std::string trigger_;    // the current call's trigger text ("" for a reply starting with '{')
    std::string body_;       // CALL: text after the trigger
    size_t scan_pos_ = 0;    // CALL: how far body_ has been scanned
    JsonBrackets brackets_;  // CALL: the call JSON's nesting so far
    bool started_ = false;
    bool at_start_ = true;     // nothing released or called yet
    bool after_call_ = false;  // whitespace directly after a call is dropped
    std::string content_;
    std::vector<ToolCall> calls_;
};

// The whole reply at once (the same as pushing it and finishing).
ToolCallReply tool_calls_parse(const ToolCallFormat& format, std::string_view text, uint64_t id_seed);

// A call in the shape of a message's tool_calls element, as templates and
// OpenAI take it: {"id", "type": "function", "function": {"name", "arguments"}}.
nlohmann::ordered_json tool_call_json(const ToolCall& call);

// A tool's arguments grammar: the function's name and the rule of its
// arguments object, already in the GbnfBuilder (GbnfBuilder::add_schema).
struct ToolArgsGrammar {
    std::string name;
    std::string rule;
};

// Adds the rules of a reply that is nothing but calls in the format's
// envelope to `builder`, each call to one of `tools` (one tool: a named
// tool_choice) with arguments matching its rule, several calls when
// `parallel` and the format allows it; returns the whole grammar. E.g.
// Hermes: root ::= tool-call, tool-call-0 ::= "<tool_call>\n" "{\"name\":
// \"get_weather\", \"arguments\": " get-weather-args "}" "\n</tool_call>";
// Mistral's starts with the control token <[[TOOL_CALLS]]>. MoeError for the
// NONE format or no tools.
std::string tool_call_envelope_gbnf(const ToolCallFormat& format, std::span<const ToolArgsGrammar> tools, bool parallel,
                                    GbnfBuilder& builder);

// The grammar of tool_choice "required" (forced_name empty) or a named
// function, from the request's `tools` ([{"type": "function", "function":
// {"name", "parameters"}}], each tool's parameters through the JSON-Schema
// converter; no parameters: any object). MoeError naming the place
// ("tools[1].function.name: ...", "tools[0].function.parameters/...: ...",
// "tool_choice: no tool named 'x'") for what it cannot take.
std::string tool_call_grammar(const ToolCallFormat& format, const nlohmann::ordered_json& tools,
                              std::string_view forced_name, bool parallel);
