// Prompt-file readers (see prompts.h for the formats and the `auto` rules).
// Errors name the file and the 1-based line (JSON lines) or 0-based array
// index (ShareGPT) of the bad entry.
#include "profiles/prompts.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "base/files.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* const FORMAT_NAMES[] = {"auto", "sharegpt", "mtbench", "jsonl", "text"};

bool blank(std::string_view s) {
    return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// The lines of text without their "\n" or "\r\n".
std::vector<std::string_view> lines_of(const std::string& text) {
    std::vector<std::string_view> lines;
    std::string_view rest = text;
    while (!rest.empty()) {
        size_t end = std::min(rest.find('\n'), rest.size());
        std::string_view line = rest.substr(0, end);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        lines.push_back(line);
        rest.remove_prefix(std::min(end + 1, rest.size()));
    }
    return lines;
}

// Adds a prompt, or counts it as skipped when it is only whitespace.
void keep(PromptSet& set, std::string text) {
    if (blank(text)) {
        set.n_skipped++;
    } else {
        set.prompts.push_back(std::move(text));
    }
}

void read_sharegpt(const std::string& text, const std::string& source, PromptSet& set) {
    json j;
    try {
        j = json_parse_bounded(text, JSON_FILE_LIMITS, source);
    } catch (const JsonError& e) {
        throw MoeError(source + ": not JSON (sharegpt format): " + e.detail);
    }
    if (!j.is_array()) throw MoeError(source + ": sharegpt format: the top level must be an array of conversations");
    for (size_t i = 0; i < j.size(); i++) {
        const json& item = j[i];
        std::string where = source + ": [" + std::to_string(i) + "]";
        if (!item.is_object() || !item.contains("conversations") || !item["conversations"].is_array())
            throw MoeError(where + ": needs a \"conversations\" array");
        const json* first_human = nullptr;
        const json& turns = item["conversations"];
        for (size_t t = 0; t < turns.size(); t++) {
            const json& turn = turns[t];
            if (!turn.is_object() || !turn.contains("from") || !turn["from"].is_string() || !turn.contains("value") ||
                !turn["value"].is_string())
                throw MoeError(where + ".conversations[" + std::to_string(t) +
                               "]: needs string \"from\" and \"value\"");
            const std::string& from = turn["from"].get_ref<const std::string&>();
            if (!first_human && (from == "human" || from == "user")) first_human = &turn["value"];
        }
        if (first_human) {
            keep(set, first_human->get<std::string>());
        } else {
            set.n_skipped++;
        }
    }
}

// Each non-blank line parsed as a JSON object; fn(object, "<source>:<line>").
template <class Fn>
void for_each_json_line(const std::string& text, const std::string& source, const char* format, Fn&& fn) {
    std::vector<std::string_view> lines = lines_of(text);
    for (size_t i = 0; i < lines.size(); i++) {
        if (blank(lines[i])) continue;
        std::string where = source + ":" + std::to_string(i + 1);
        json j;
        try {
            j = json_parse_bounded(lines[i], JSON_FILE_LIMITS, where);
        } catch (const JsonError& e) {
            throw MoeError(where + ": not JSON (" + format + " format): " + e.detail);
        }
        if (!j.is_object()) throw MoeError(where + ": " + format + " format: each line must be a JSON object");
        fn(j, where);
    }
}

// The first element of obj[name] when it is a non-empty array holding a string.
const json* first_string_of(const json& obj, const char* name) {
    auto it = obj.find(name);
    if (it == obj.end() || !it->is_array() || it->empty() || !(*it)[0].is_string()) return nullptr;
    return &(*it)[0];
}

const json* jsonl_prompt(const json& j) {
    for (const char* name : {"prompt", "text", "question"}) {
        auto it = j.find(name);
        if (it != j.end() && it->is_string()) return &*it;
    }
    if (const json* t = first_string_of(j, "turns")) return t;
    auto choices = j.find("choices");
    if (choices != j.end() && choices->is_array() && !choices->empty() && (*choices)[0].is_object())
        return first_string_of((*choices)[0], "turns");
    return nullptr;
}

void read_jsonl(const std::string& text, const std::string& source, PromptFormat format, PromptSet& set) {
    const bool mtbench = format == PromptFormat::MTBENCH;
    for_each_json_line(text, source, prompt_format_name(format), [&](const json& j, const std::string& where) {
        const json* p = mtbench ? first_string_of(j, "turns") : jsonl_prompt(j);
        if (!p)
            throw MoeError(where + (mtbench ? ": needs \"turns\": a non-empty array of strings"
                                            : ": none of \"prompt\", \"text\", \"question\", \"turns\"[0], "
                                              "\"choices\"[0].\"turns\"[0] is a string"));
        keep(set, p->get<std::string>());
    });
}

void read_text(const std::string& text, PromptSet& set) {
    std::string paragraph;
    for (std::string_view line : lines_of(text)) {
        if (blank(line)) {
            if (!paragraph.empty()) set.prompts.push_back(std::move(paragraph));
            paragraph.clear();
        } else {
            if (!paragraph.empty()) paragraph += '\n';
            paragraph += line;
        }
    }
    if (!paragraph.empty()) set.prompts.push_back(std::move(paragraph));
}

// mtbench when the first record has "turns" and no field jsonl would try
// first; a first line that is not a JSON object is left to the reader to report.
PromptFormat detect_json_lines(const std::string& text) {
    for (std::string_view line : lines_of(text)) {
        if (blank(line)) continue;
        json j;
        try {
            j = json_parse_bounded(line, JSON_FILE_LIMITS, "");
        } catch (const JsonError&) {
        }
        bool mtbench = j.is_object() && j.contains("turns") && !j.contains("prompt") && !j.contains("text") &&
                       !j.contains("question");
        return mtbench ? PromptFormat::MTBENCH : PromptFormat::JSONL;
    }
    return PromptFormat::JSONL;
}

PromptFormat detect(const std::string& text, const std::string& source) {
    std::string ext = fs::path(source).extension().string();
    for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (ext == ".json") return PromptFormat::SHAREGPT;
    if (ext == ".jsonl") return detect_json_lines(text);
    if (ext == ".txt" || ext == ".md") return PromptFormat::TEXT;
    size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '[') return PromptFormat::SHAREGPT;
    if (first != std::string::npos && text[first] == '{') return detect_json_lines(text);
    return PromptFormat::TEXT;
}

}  // namespace

const char* prompt_format_name(PromptFormat format) {
    return FORMAT_NAMES[int(format)];
}

std::optional<PromptFormat> prompt_format_parse(std::string_view name) {
    for (int i = 0; i < int(std::size(FORMAT_NAMES)); i++)
        if (name == FORMAT_NAMES[i]) return PromptFormat(i);
    return std::nullopt;
}

PromptSet prompts_parse(const std::string& text, const std::string& source, PromptFormat format) {
    PromptSet set;
    set.format = format == PromptFormat::AUTO ? detect(text, source) : format;
    switch (set.format) {
    case PromptFormat::SHAREGPT:
        read_sharegpt(text, source, set);
        break;
    case PromptFormat::MTBENCH:
    case PromptFormat::JSONL:
        read_jsonl(text, source, set.format, set);
        break;
    case PromptFormat::TEXT:
        read_text(text, set);
        break;
    case PromptFormat::AUTO:
        break;
    }
    if (set.prompts.empty())
        throw MoeError(source + ": no prompts found (read as " + prompt_format_name(set.format) + ", " +
                       std::to_string(set.n_skipped) + " entries without a usable prompt)");
    return set;
}

PromptSet prompts_read(const fs::path& path, PromptFormat format) {
    return prompts_parse(file_read_text(path), path.string(), format);
}
