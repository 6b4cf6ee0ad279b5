// Prompt-file readers for the profiling workload: ShareGPT JSON, MT-Bench
// JSONL, generic JSONL and plain text, plus `auto`, which picks one from the
// file's extension and content. Each returns the prompt texts in file order;
// entries with no usable prompt (no human turn, empty text) are skipped and
// counted, malformed entries are a MoeError naming the file and the line
// or array index. Text only: never tokenizes or runs a model.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

enum class PromptFormat { AUTO, SHAREGPT, MTBENCH, JSONL, TEXT };

const char* prompt_format_name(PromptFormat format);  // "auto", "sharegpt", ...
std::optional<PromptFormat> prompt_format_parse(std::string_view name);

struct PromptSet {
    PromptFormat format = PromptFormat::AUTO;  // the reader used (never AUTO)
    std::vector<std::string> prompts;
    int n_skipped = 0;  // entries without a usable prompt
};

// Reads every prompt of `path`:
//   sharegpt  a JSON array of {"conversations": [{"from", "value"}, ...]}: the
//             first turn whose "from" is "human" or "user";
//   mtbench   JSON lines with "turns": [str, ...]: the first turn only (later
//             turns lean on the model's answer to the first);
//   jsonl     JSON lines; the first string found among "prompt", "text",
//             "question", "turns"[0], "choices"[0]."turns"[0] (a FastChat
//             answer file: the answer text);
//   text      prompts separated by empty lines (a prompt may span lines);
//   auto      .json -> sharegpt; .jsonl -> mtbench when the first record has
//             "turns" and none of "prompt", "text", "question", else jsonl;
//             .txt/.md -> text; any other name by its first character
//             ('[' sharegpt, '{' as .jsonl, else text).
PromptSet prompts_read(const std::filesystem::path& path, PromptFormat format = PromptFormat::AUTO);

// The same over text already in memory; `source` names it in messages and its
// extension drives `auto`.
PromptSet prompts_parse(const std::string& text, const std::string& source, PromptFormat format);
