// tokenizer.json -> Tokenizer (see hf_tokenizer.h): parsing every part into
// plain steps (normalizer and pre-tokenizer steps as functions over strings,
// the BPE merge table, every id's decoded bytes), and the BPE backend that
// runs them. Behaviour follows Hugging Face tokenizers: a text segment (the
// text between matched added tokens) is normalized, split into pieces by the
// pre-tokenizers in order, and every piece is merged by BPE on its own, the
// lowest merge rank first and the leftmost of equal ranks first.
// The file is untrusted: every step charges the thread's WorkBudget (the
// encode's, see tokenizer.h, or the load's, LOAD_LIMITS) before it builds a
// string, by the size it will have (a Replace by a long string, stacked
// ByteLevel steps each doubling the text), and a step per match and merge.
#include "engine/text/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/errors.h"
#include "base/files.h"
#include "base/utf8.h"
#include "engine/text/work_budget.h"

namespace {

using json = nlohmann::json;

// What loading may spend: every id's decoded bytes (a decoder Replace may
// lengthen them) and the vocabulary's table. One token decodes to at most
// max_buffer_bytes; real vocabularies are far below all three.
const WorkLimits LOAD_LIMITS{0, uint64_t(256) << 20, uint64_t(64) << 10, std::chrono::milliseconds(60'000)};

constexpr std::string_view GPT2_REGEX =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& what) {
    std::string message = source;
    message += ": ";
    message += key;
    message += ": ";
    message += what;
    throw MoeError(message);
}

// ---- JSON fields ------------------------------------------------------------

// One object of the document with its key path, for typed reads that fail
// naming "SOURCE: PATH.NAME".
struct Node {
    const json& j;
    std::string key;
    const std::string& source;

    std::string sub(std::string_view name) const {
        return key.empty() ? std::string(name) : key + "." + std::string(name);
    }
    const json* find(std::string_view name) const {
        const auto it = j.find(name);
        return it == j.end() || it->is_null() ? nullptr : &*it;
    }
    Node at(std::string_view name) const {
        const json* v = find(name);
        if (!v) fail(source, sub(name), "missing key");
        return Node{*v, sub(name), source};
    }
    Node at(size_t i) const { return Node{j[i], key + "[" + std::to_string(i) + "]", source}; }
    std::string str(std::string_view name) const {
        const Node v = at(name);
        if (!v.j.is_string()) fail(source, v.key, "not a string");
        return v.j.get<std::string>();
    }
    std::string str_or(std::string_view name, std::string fallback) const { return find(name) ? str(name) : fallback; }
    bool flag(std::string_view name, bool fallback) const {
        const json* v = find(name);
        if (!v) return fallback;
        if (!v->is_boolean()) fail(source, sub(name), "not a boolean");
        return v->get<bool>();
    }
    int64_t integer(std::string_view name) const {
        const Node v = at(name);
        if (!v.j.is_number_integer()) fail(source, v.key, "not an integer");
        return v.j.get<int64_t>();
    }
    void require_object() const {
        if (!j.is_object()) fail(source, key, "not an object");
    }
    void require_array() const {
        if (!j.is_array()) fail(source, key, "not an array");
    }
};

// ---- UTF-8 ------------------------------------------------------------------

// The bytes of the character at s[pos] as its lead byte announces them, cut
// at the end of s.
size_t utf8_char_len(std::string_view s, size_t pos) {
    return std::min(utf8_lead_length(static_cast<uint8_t>(s[pos])), s.size() - pos);
}

// ---- the GPT-2 byte-level alphabet -------------------------------------------

// Printable bytes stand for themselves; the others (controls, space, DEL,
// NBSP, soft hyphen ...) take code points from U+0100 on, in byte order.
struct ByteLevelAlphabet {
    std::string chars[256];
    std::unordered_map<std::string, unsigned char> bytes;  // a character -> its byte
    ByteLevelAlphabet() {
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            utf8_append(chars[b], printable ? uint32_t(b) : next++);
            bytes.emplace(chars[b], static_cast<unsigned char>(b));
        }
    }
};

const ByteLevelAlphabet& alphabet() {
    static const ByteLevelAlphabet a;
    return a;
}

std::string to_byte_level(std::string_view text) {
    size_t n = 0;
    for (char c : text) n += alphabet().chars[static_cast<unsigned char>(c)].size();
    work_charge_grow(0, n);
    std::string out;
    out.reserve(n);
    for (char c : text) out += alphabet().chars[static_cast<unsigned char>(c)];
    return out;
}

// Characters of the alphabet back to their bytes; others stay as they are.
std::string from_byte_level(std::string_view piece) {
    std::string out;
    for (size_t i = 0; i < piece.size();) {
        const size_t n = utf8_char_len(piece, i);
        const auto it = alphabet().bytes.find(std::string(piece.substr(i, n)));
        if (it != alphabet().bytes.end())
            out += char(it->second);
        else
            out.append(piece, i, n);
        i += n;
    }
    return out;
}

// ---- PCRE2 ------------------------------------------------------------------

// A compiled pattern (UTF, Unicode properties; JIT when available). The
// match data is made per call, so one Regex serves many threads.
class Regex {
public:
    Regex(const std::string& pattern, const std::string& source, const std::string& key) {
        int code = 0;
        PCRE2_SIZE offset = 0;
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &code, &offset, nullptr);
        if (!code_) fail(source, key, "bad regex at offset " + std::to_string(offset) + ": " + error_text(code));
        pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // optional: the interpreter is used when it fails
    }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;
    ~Regex() { pcre2_code_free(code_); }

    // Every non-empty match in `text`, in order. The first match checks that
    // the text is valid UTF-8 (MoeError when not), the later ones skip it.
    std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const {
        std::vector<std::pair<size_t, size_t>> out;
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
        if (!md) throw MoeError("regex: out of memory");
        const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        size_t pos = 0;
        while (pos <= text.size()) {
            const int rc =
                pcre2_match(code_, subject, text.size(), pos, pos == 0 ? 0 : PCRE2_NO_UTF_CHECK, md, nullptr);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                pcre2_match_data_free(md);
                if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
                    throw MoeError("cannot encode text: not valid UTF-8 (" + error_text(rc) + ")");
                throw MoeError("regex match failed: " + error_text(rc));
            }
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            const size_t start = ov[0], end = ov[1];
            work_charge_steps(1);
            if (end > start) {
                out.emplace_back(start, end);
                pos = end;
            } else {
                if (start >= text.size()) break;
                pos = start + utf8_char_len(text, start);  // an empty match: step over one character
            }
        }
        pcre2_match_data_free(md);
        return out;
    }

private:
    static std::string error_text(int code) {
        PCRE2_UCHAR buffer[256];
        pcre2_get_error_message(code, buffer, sizeof buffer);
        return reinterpret_cast<const char*>(buffer);
    }
    pcre2_code* code_ = nullptr;
};

// A Split / Replace pattern: {"String": literal} or {"Regex": pcre}.
struct Pattern {
    std::string literal;
    std::shared_ptr<const Regex> regex;

    std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const {
        if (regex) return regex->find_all(text);
        std::vector<std::pair<size_t, size_t>> out;
        if (literal.empty()) return out;
        for (size_t p = text.find(literal); p != std::string_view::npos; p = text.find(literal, p + literal.size())) {
            work_charge_steps(1);
            out.emplace_back(p, p + literal.size());
        }
        return out;
    }
    // Charged by the size of the result before it is built.
    std::string replace_all(std::string_view text, std::string_view content) const {
        const std::vector<std::pair<size_t, size_t>> matches = find_all(text);
        uint64_t size = text.size();
        for (const auto& [s, e] : matches) size = size - (e - s) + content.size();
        work_charge_grow(0, size);
        std::string out;
        out.reserve(size);
        size_t prev = 0;
        for (const auto& [s, e] : matches) {
            out.append(text, prev, s - prev);
            out.append(content);
            prev = e;
        }
        out.append(text, prev);
        return out;
    }
};

Pattern parse_pattern(const Node& n) {
    n.require_object();
    Pattern p;
    if (n.find("String")) {
        p.literal = n.str("String");
    } else if (n.find("Regex")) {
        p.regex = std::make_shared<const Regex>(n.str("Regex"), n.source, n.sub("Regex"));
    } else {
        fail(n.source, n.key, "neither String nor Regex");
    }
    return p;
}

// ---- pre-tokenization ---------------------------------------------------------

// A piece of a segment; `first`: it starts the text (offset 0 of the input).
struct Piece {
    std::string text;
    bool first = false;
};

struct EncodeFlags {
    bool add_dummy_prefix = true;
};

using NormalizeStep = std::function<void(std::string*, const EncodeFlags&)>;
using PreTokenizeStep = std::function<void(std::vector<Piece>*, const EncodeFlags&)>;

enum class SplitBehavior { REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS };

// Hugging Face's SplitDelimiterBehavior over the matches of one piece.
void split_piece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
                 bool invert, std::vector<Piece>* out) {
    struct Span {
        size_t start, end;
        bool match;
    };
    std::vector<Span> spans;
    size_t prev = 0;
    for (const auto& [s, e] : matches) {
        if (s > prev) spans.push_back({prev, s, invert});
        spans.push_back({s, e, !invert});
        prev = e;
    }
    if (prev < piece.text.size()) spans.push_back({prev, piece.text.size(), invert});

    std::vector<Span> merged;
    bool previous_match = false;
    switch (behavior) {
    case SplitBehavior::REMOVED:
        for (const Span& s : spans)
            if (!s.match) merged.push_back(s);
        break;
    case SplitBehavior::ISOLATED:
        merged = spans;
        break;
    case SplitBehavior::MERGED_WITH_PREVIOUS:
        for (const Span& s : spans) {
            if (s.match && !previous_match && !merged.empty())
                merged.back().end = s.end;
            else
                merged.push_back(s);
            previous_match = s.match;
        }
        break;
    case SplitBehavior::MERGED_WITH_NEXT:
        for (size_t i = spans.size(); i-- > 0;) {
            const Span& s = spans[i];
            if (s.match && !previous_match && !merged.empty())
                merged.back().start = s.start;
            else
                merged.push_back(s);
            previous_match = s.match;
        }
        std::reverse(merged.begin(), merged.end());
        break;
    case SplitBehavior::CONTIGUOUS:
        for (const Span& s : spans) {
            if (s.match && previous_match && !merged.empty())
                merged.back().end = s.end;
            else
                merged.push_back(s);
            previous_match = s.match;
        }
        break;
    }
    for (const Span& s : merged)
        if (s.end > s.start) {
            work_charge_bytes(s.end - s.start + sizeof(Piece));
            out->push_back(Piece{piece.text.substr(s.start, s.end - s.start), piece.first && s.start == 0});
        }
}

PreTokenizeStep split_step(Pattern pattern, SplitBehavior behavior, bool invert) {
    return [pattern = std::move(pattern), behavior, invert](std::vector<Piece>* pieces, const EncodeFlags&) {
        std::vector<Piece> out;
        out.reserve(pieces->size());
        for (const Piece& p : *pieces) split_piece(p, pattern.find_all(p.text), behavior, invert, &out);
        *pieces = std::move(out);
    };
}

SplitBehavior parse_behavior(const Node& n) {
    const std::string b = n.str("behavior");
    if (b == "Removed") return SplitBehavior::REMOVED;
    if (b == "Isolated") return SplitBehavior::ISOLATED;
    if (b == "MergedWithPrevious") return SplitBehavior::MERGED_WITH_PREVIOUS;
    if (b == "MergedWithNext") return SplitBehavior::MERGED_WITH_NEXT;
    if (b == "Contiguous") return SplitBehavior::CONTIGUOUS;
    fail(n.source, n.sub("behavior"), "unknown behavior '" + b + "'");
}

enum class Prepend { FIRST, ALWAYS, NEVER };

Prepend parse_prepend_scheme(const Node& n) {
    if (!n.find("prepend_scheme")) return n.flag("add_prefix_space", true) ? Prepend::ALWAYS : Prepend::NEVER;
    const std::string s = n.str("prepend_scheme");
    if (s == "first") return Prepend::FIRST;
    if (s == "always") return Prepend::ALWAYS;
    if (s == "never") return Prepend::NEVER;
    fail(n.source, n.sub("prepend_scheme"), "unknown scheme '" + s + "' (first, always, never)");
}

std::string one_char(const Node& n, std::string_view name, std::string fallback) {
    std::string s = n.str_or(name, std::move(fallback));
    if (s.empty() || utf8_char_len(s, 0) != s.size()) fail(n.source, n.sub(name), "not one character");
    return s;
}

void parse_pre_tokenizer(const Node& n, std::vector<PreTokenizeStep>* steps, int depth) {
    n.require_object();
    if (depth > 8) fail(n.source, n.key, "nested too deeply");
    const std::string type = n.str("type");
    if (type == "Sequence") {
        const Node list = n.at("pretokenizers");
        list.require_array();
        for (size_t i = 0; i < list.j.size(); ++i) parse_pre_tokenizer(list.at(i), steps, depth + 1);
    } else if (type == "Split") {
        steps->push_back(split_step(parse_pattern(n.at("pattern")), parse_behavior(n), n.flag("invert", false)));
    } else if (type == "Digits") {
        auto digits = std::make_shared<const Regex>("\\p{N}", n.source, n.key);
        steps->push_back(split_step(
            Pattern{{}, digits},
            n.flag("individual_digits", false) ? SplitBehavior::ISOLATED : SplitBehavior::CONTIGUOUS, false));
    } else if (type == "ByteLevel") {
        // A space before every piece that lacks one (with the caller's dummy prefix on).
        if (n.flag("add_prefix_space", true))
            steps->push_back([](std::vector<Piece>* pieces, const EncodeFlags& f) {
                if (f.add_dummy_prefix)
                    for (Piece& p : *pieces)
                        if (!p.text.starts_with(' ')) {
                            work_charge_grow(p.text.size(), 1);
                            p.text.insert(0, 1, ' ');
                        }
            });
        if (n.flag("use_regex", true))
            steps->push_back(
                split_step(Pattern{{}, std::make_shared<const Regex>(std::string(GPT2_REGEX), n.source, n.key)},
                           SplitBehavior::ISOLATED, false));
        steps->push_back([](std::vector<Piece>* pieces, const EncodeFlags&) {
            for (Piece& p : *pieces) p.text = to_byte_level(p.text);
        });
    } else if (type == "Metaspace") {
        const std::string replacement = one_char(n, "replacement", "\xE2\x96\x81");
        const Prepend scheme = parse_prepend_scheme(n);
        const bool split = n.flag("split", true);
        steps->push_back([replacement, scheme, split](std::vector<Piece>* pieces, const EncodeFlags& f) {
            std::vector<Piece> out;
            for (Piece& p : *pieces) {
                Piece q{Pattern{" ", nullptr}.replace_all(p.text, replacement), p.first};
                // Also before a text that starts with a space, as SentencePiece's
                // dummy prefix does (Hugging Face's fast tokenizer skips it there,
                // which changes the ids of such texts from the model's own).
                const bool prepend =
                    f.add_dummy_prefix && (scheme == Prepend::ALWAYS || (scheme == Prepend::FIRST && q.first));
                if (prepend) {
                    work_charge_grow(q.text.size(), replacement.size());
                    q.text.insert(0, replacement);
                }
                if (split)
                    split_piece(q, Pattern{replacement, nullptr}.find_all(q.text), SplitBehavior::MERGED_WITH_NEXT,
                                false, &out);
                else
                    out.push_back(std::move(q));
            }
            *pieces = std::move(out);
        });
    } else {
        fail(n.source, n.sub("type"), "unsupported pre-tokenizer type '" + type + "'");
    }
}

// ---- normalization ------------------------------------------------------------

NormalizeStep unicode_form(utf8proc_option_t options) {
    return [options](std::string* text, const EncodeFlags&) {
        work_charge_grow(0, text->size());
        utf8proc_uint8_t* out = nullptr;
        const utf8proc_ssize_t n =
            utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text->data()), utf8proc_ssize_t(text->size()), &out,
                         utf8proc_option_t(options | UTF8PROC_STABLE));
        if (n < 0) throw MoeError(std::string("cannot normalize text: ") + utf8proc_errmsg(n));
        try {
            // What utf8proc built, beyond the text's size charged before.
            work_charge_grow(text->size(), size_t(n) > text->size() ? size_t(n) - text->size() : 0);
        } catch (...) {
            std::free(out);
            throw;
        }
        text->assign(reinterpret_cast<const char*>(out), size_t(n));
        std::free(out);
    };
}

void parse_normalizer(const Node& n, std::vector<NormalizeStep>* steps, int depth) {
    n.require_object();
    if (depth > 8) fail(n.source, n.key, "nested too deeply");
    const std::string type = n.str("type");
    if (type == "Sequence") {
        const Node list = n.at("normalizers");
        list.require_array();
        for (size_t i = 0; i < list.j.size(); ++i) parse_normalizer(list.at(i), steps, depth + 1);
    } else if (type == "NFC") {
        steps->push_back(unicode_form(utf8proc_option_t(UTF8PROC_COMPOSE)));
    } else if (type == "NFD") {
        steps->push_back(unicode_form(utf8proc_option_t(UTF8PROC_DECOMPOSE)));
    } else if (type == "NFKC") {
        steps->push_back(unicode_form(utf8proc_option_t(UTF8PROC_COMPOSE | UTF8PROC_COMPAT)));
    } else if (type == "NFKD") {
        steps->push_back(unicode_form(utf8proc_option_t(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT)));
    } else if (type == "Prepend") {
        steps->push_back([prepend = n.str("prepend")](std::string* text, const EncodeFlags& f) {
            if (f.add_dummy_prefix && !text->empty()) {
                work_charge_grow(text->size(), prepend.size());
                text->insert(0, prepend);
            }
        });
    } else if (type == "Replace") {
        steps->push_back([pattern = parse_pattern(n.at("pattern")), content = n.str("content")](
                             std::string* text, const EncodeFlags&) { *text = pattern.replace_all(*text, content); });
    } else {
        fail(n.source, n.sub("type"), "unsupported normalizer type '" + type + "'");
    }
}

// ---- decoding: every id's bytes ------------------------------------------------

// The per-token part of a decoder chain, applied to one piece.
struct DecodeRules {
    std::vector<std::function<void(std::string*, bool* is_byte)>> steps;
    bool byte_level = false;   // a ByteLevel decoder: bytes join across tokens
    bool strip_first = false;  // the text's first space goes (Metaspace, Strip)
};

void parse_decoder(const Node& n, DecodeRules* rules, int depth) {
    n.require_object();
    if (depth > 8) fail(n.source, n.key, "nested too deeply");
    const std::string type = n.str("type");
    if (type == "Sequence") {
        const Node list = n.at("decoders");
        list.require_array();
        for (size_t i = 0; i < list.j.size(); ++i) parse_decoder(list.at(i), rules, depth + 1);
    } else if (type == "ByteLevel") {
        rules->byte_level = true;
        rules->steps.push_back([](std::string* t, bool* is_byte) {
            if (!*is_byte) *t = from_byte_level(*t);
        });
    } else if (type == "ByteFallback") {
        rules->steps.push_back([](std::string* t, bool* is_byte) {
            if (const int v = byte_piece_value(*t); v >= 0 && !*is_byte) {
                *t = std::string(1, char(v));
                *is_byte = true;
            }
        });
    } else if (type == "Fuse") {
        // Joining the tokens' strings is what decoding does anyway.
    } else if (type == "Replace") {
        rules->steps.push_back(
            [pattern = parse_pattern(n.at("pattern")), content = n.str("content")](std::string* t, bool* is_byte) {
                if (!*is_byte) *t = pattern.replace_all(*t, content);
            });
    } else if (type == "Metaspace") {
        const std::string replacement = one_char(n, "replacement", "\xE2\x96\x81");
        if (parse_prepend_scheme(n) != Prepend::NEVER) rules->strip_first = true;
        rules->steps.push_back([replacement](std::string* t, bool* is_byte) {
            if (!*is_byte) *t = Pattern{replacement, nullptr}.replace_all(*t, " ");
        });
    } else if (type == "Strip") {
        // Only the form real tokenizers use after Fuse: one leading space of the text.
        const int64_t start = n.integer("start"), stop = n.integer("stop");
        if (n.str("content") != " " || start > 1 || start < 0 || stop != 0)
            fail(n.source, n.key, "only Strip of one leading space (content ' ', start 1, stop 0) is supported");
        if (start == 1) rules->strip_first = true;
    } else {
        fail(n.source, n.sub("type"), "unsupported decoder type '" + type + "'");
    }
}

// ---- the BPE backend ----------------------------------------------------------------

class BpeModel final : public TokenizerModel {
public:
    std::string source;
    std::vector<NormalizeStep> normalizer;
    std::vector<PreTokenizeStep> pre_tokenizer;
    std::unordered_map<std::string, int> vocab;  // the model's vocabulary
    // (left id, right id) -> (rank, merged id)
    std::unordered_map<uint64_t, std::pair<int, int>> merges;
    int unk = -1;
    bool byte_fallback = false;
    bool fuse_unk = false;
    bool ignore_merges = false;
    int byte_ids[256];  // <0xNN> ids for byte fallback (-1: absent)

    static uint64_t pair_key(int a, int b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

    void encode(std::string_view text, bool at_start, bool add_dummy_prefix, std::vector<int>* ids) const override {
        const EncodeFlags flags{add_dummy_prefix};
        work_charge_grow(0, text.size());
        std::string normalized(text);
        if (normalized.empty()) return;
        for (const auto& step : normalizer) step(&normalized, flags);
        std::vector<Piece> pieces{Piece{std::move(normalized), at_start}};
        for (const auto& step : pre_tokenizer) step(&pieces, flags);
        for (const Piece& p : pieces) encode_word(p.text, ids);
    }

private:
    struct Symbol {
        int id;
        int prev, next;
        bool alive;
    };
    struct Candidate {
        int rank, pos, new_id;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };

    void encode_word(const std::string& word, std::vector<int>* ids) const {
        if (word.empty()) return;
        if (ignore_merges)
            if (const auto it = vocab.find(word); it != vocab.end()) {
                ids->push_back(it->second);
                return;
            }
        work_charge_bytes(word.size() * (sizeof(Symbol) + 2 * sizeof(Candidate) + sizeof(int)));
        std::vector<Symbol> sym;
        sym.reserve(word.size());
        bool last_unk = false;
        for (size_t i = 0; i < word.size();) {
            const size_t n = utf8_char_len(word, i);
            const auto it = vocab.find(word.substr(i, n));
            if (it != vocab.end()) {
                sym.push_back({it->second, 0, 0, true});
                last_unk = false;
            } else if (byte_fallback && [&] {
                           for (size_t k = i; k < i + n; ++k)
                               if (byte_ids[static_cast<unsigned char>(word[k])] < 0) return false;
                           return true;
                       }()) {
                for (size_t k = i; k < i + n; ++k)
                    sym.push_back({byte_ids[static_cast<unsigned char>(word[k])], 0, 0, true});
                last_unk = false;
            } else if (unk >= 0) {
                if (!(fuse_unk && last_unk)) sym.push_back({unk, 0, 0, true});
                last_unk = true;
            } else {
                throw MoeError(source + ": cannot encode '" + word.substr(i, n) +
                               "': it is not in the vocabulary and the model has no unk_token");
            }
            i += n;
        }
        const int count = int(sym.size());
        for (int i = 0; i < count; ++i) {
            sym[i].prev = i - 1;
            sym[i].next = i + 1 < count ? i + 1 : -1;
        }
        std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
        const auto consider = [&](int left) {
            if (left < 0 || sym[left].next < 0) return;
            const auto it = merges.find(pair_key(sym[left].id, sym[sym[left].next].id));
            if (it != merges.end()) queue.push({it->second.first, left, it->second.second});
        };
        for (int i = 0; i + 1 < count; ++i) consider(i);
        while (!queue.empty()) {
            work_charge_steps(1);
            const Candidate c = queue.top();
            queue.pop();
            Symbol& left = sym[c.pos];
            if (!left.alive || left.next < 0) continue;
            Symbol& right = sym[left.next];
            const auto it = merges.find(pair_key(left.id, right.id));
            if (it == merges.end() || it->second.second != c.new_id) continue;  // stale
            left.id = c.new_id;
            right.alive = false;
            left.next = right.next;
            if (left.next >= 0) sym[left.next].prev = c.pos;
            consider(left.prev);
            consider(c.pos);
        }
        for (const Symbol& s : sym)
            if (s.alive) ids->push_back(s.id);
    }
};

std::unique_ptr<BpeModel> parse_bpe(const Node& m, TokenizerVocab* v) {
    m.require_object();
    const std::string type = m.str_or("type", "BPE");
    if (type != "BPE") fail(m.source, m.sub("type"), "unsupported model type '" + type + "' (only BPE)");
    for (const char* unsupported : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (!m.str_or(unsupported, "").empty()) fail(m.source, m.sub(unsupported), "not supported");
    if (const json* d = m.find("dropout"); d && !(d->is_number() && d->get<double>() == 0.0))
        fail(m.source, m.sub("dropout"), "BPE dropout is not supported");

    auto model = std::make_unique<BpeModel>();
    model->source = m.source;
    const Node vocab = m.at("vocab");
    vocab.require_object();
    model->vocab.reserve(vocab.j.size());
    for (const auto& [piece, id_json] : vocab.j.items()) {
        if (!id_json.is_number_integer()) fail(m.source, vocab.key + "[\"" + piece + "\"]", "not an integer id");
        const int64_t id = id_json.get<int64_t>();
        if (id < 0 || id >= (int64_t(1) << 24))
            fail(m.source, vocab.key + "[\"" + piece + "\"]", "id " + std::to_string(id) + " is out of range");
        if (size_t(id) >= v->pieces.size()) {
            work_charge_bytes((size_t(id) + 1 - v->pieces.size()) * sizeof(std::string));
            v->pieces.resize(size_t(id) + 1);
        }
        if (!v->pieces[id].empty())
            fail(m.source, vocab.key + "[\"" + piece + "\"]",
                 "id " + std::to_string(id) + " is also '" + v->pieces[id] + "'");
        if (piece.empty()) fail(m.source, vocab.key, "an empty token");
        v->pieces[id] = piece;
        model->vocab.emplace(piece, int(id));
    }

    const Node merges = m.at("merges");
    merges.require_array();
    model->merges.reserve(merges.j.size());
    std::string left, right;
    for (size_t r = 0; r < merges.j.size(); ++r) {
        const Node e = merges.at(r);
        if (e.j.is_string()) {
            const std::string& s = e.j.get_ref<const std::string&>();
            const size_t space = s.find(' ');
            if (space == std::string::npos || space == 0 || space + 1 >= s.size() ||
                s.find(' ', space + 1) != std::string::npos)
                fail(m.source, e.key, "'" + s + "' is not two tokens separated by one space");
            left = s.substr(0, space);
            right = s.substr(space + 1);
        } else if (e.j.is_array() && e.j.size() == 2 && e.j[0].is_string() && e.j[1].is_string()) {
            left = e.j[0].get<std::string>();
            right = e.j[1].get<std::string>();
        } else {
            fail(m.source, e.key, "not a string \"a b\" nor an array [\"a\", \"b\"]");
        }
        const auto find = [&](const std::string& t) {
            const auto it = model->vocab.find(t);
            if (it == model->vocab.end()) fail(m.source, e.key, "token '" + t + "' is not in the vocabulary");
            return it->second;
        };
        const int a = find(left), b = find(right), merged = find(left + right);
        // The first (lowest-ranked) of a repeated merge wins.
        model->merges.emplace(BpeModel::pair_key(a, b), std::pair{int(r), merged});
    }

    model->byte_fallback = m.flag("byte_fallback", false);
    model->fuse_unk = m.flag("fuse_unk", false);
    model->ignore_merges = m.flag("ignore_merges", false);
    for (int b = 0; b < 256; ++b) {
        static const char* hex = "0123456789ABCDEF";
        const std::string piece = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
        const auto it = model->vocab.find(piece);
        model->byte_ids[b] = it == model->vocab.end() ? -1 : it->second;
    }
    if (const std::string unk = m.str_or("unk_token", ""); !unk.empty()) {
        const auto it = model->vocab.find(unk);
        if (it == model->vocab.end()) fail(m.source, m.sub("unk_token"), "'" + unk + "' is not in the vocabulary");
        model->unk = it->second;
    }
    return model;
}

}  // namespace

const std::string& byte_level_char(unsigned char b) {
    return alphabet().chars[b];
}

namespace {

Tokenizer from_json_budgeted(const json& doc, const std::string& source, const HfSpecialTokens& specials);

}  // namespace

Tokenizer hf_tokenizer_from_json(const json& doc, const std::string& source, const HfSpecialTokens& specials) {
    WorkBudget budget(LOAD_LIMITS, "loading");
    WorkBudget::Scope scope(budget);
    try {
        return from_json_budgeted(doc, source, specials);
    } catch (const WorkBudgetError& e) {
        throw WorkBudgetError(source + ": " + e.what(), e.end);
    }
}

namespace {

Tokenizer from_json_budgeted(const json& doc, const std::string& source, const HfSpecialTokens& specials) {
    const Node root{doc, "", source};
    if (!doc.is_object()) fail(source, "(document)", "not a JSON object");

    TokenizerVocab v;
    std::unique_ptr<BpeModel> model = parse_bpe(root.at("model"), &v);

    // Added tokens: given ids, maybe past the model's vocabulary.
    if (const json* list = root.find("added_tokens")) {
        const Node added{*list, "added_tokens", source};
        added.require_array();
        for (size_t i = 0; i < list->size(); ++i) {
            const Node t = added.at(i);
            t.require_object();
            const int64_t id = t.integer("id");
            if (id < 0 || id >= (int64_t(1) << 24)) fail(source, t.sub("id"), std::to_string(id) + " is out of range");
            AddedToken a{t.str("content"),         int(id),
                         t.flag("special", false), t.flag("lstrip", false),
                         t.flag("rstrip", false),  t.flag("single_word", false)};
            if (a.content.empty()) fail(source, t.sub("content"), "empty");
            if (size_t(id) >= v.pieces.size()) {
                work_charge_bytes((size_t(id) + 1 - v.pieces.size()) * sizeof(std::string));
                v.pieces.resize(size_t(id) + 1);
            }
            if (v.pieces[id].empty())
                v.pieces[id] = a.content;
            else if (v.pieces[id] != a.content)
                fail(source, t.sub("content"),
                     "'" + a.content + "', but id " + std::to_string(id) + " is '" + v.pieces[id] +
                         "' in the vocabulary");
            v.added.push_back(std::move(a));
        }
    }
    const size_t n = v.pieces.size();
    if (n == 0) fail(source, "model.vocab", "no tokens");
    for (size_t id = 0; id < n; ++id)
        if (v.pieces[id].empty()) fail(source, "model.vocab", "id " + std::to_string(id) + " has no token");

    if (const json* d = root.find("normalizer"))
        parse_normalizer(Node{*d, "normalizer", source}, &model->normalizer, 0);
    if (const json* d = root.find("pre_tokenizer"))
        parse_pre_tokenizer(Node{*d, "pre_tokenizer", source}, &model->pre_tokenizer, 0);
    DecodeRules rules;
    if (const json* d = root.find("decoder")) parse_decoder(Node{*d, "decoder", source}, &rules, 0);

    // Every id's bytes and kind.
    v.bytes.resize(n);
    v.kinds.assign(n, PieceKind::NORMAL);
    v.space_first.assign(n, false);
    v.byte_level = rules.byte_level;
    for (size_t id = 0; id < n; ++id) {
        bool is_byte = false;
        std::string bytes = v.pieces[id];
        for (const auto& step : rules.steps) step(&bytes, &is_byte);
        v.bytes[id] = std::move(bytes);
        if (is_byte) v.kinds[id] = PieceKind::BYTE;
    }
    if (model->unk >= 0) v.kinds[model->unk] = PieceKind::UNKNOWN;
    // Added tokens are text as written (not through the decoder); special ones
    // decode to nothing, except the unknown token.
    for (const AddedToken& a : v.added) {
        if (a.id == model->unk) continue;  // stays UNKNOWN, decoding to its text
        v.kinds[a.id] = a.special ? PieceKind::CONTROL : PieceKind::NORMAL;
        v.bytes[a.id] = a.special ? std::string() : a.content;
    }
    if (rules.strip_first)
        for (size_t id = 0; id < n; ++id)
            v.space_first[id] = v.kinds[id] == PieceKind::NORMAL && v.bytes[id].starts_with(' ');

    const auto special_id = [&](const std::string& piece, const char* what) {
        if (piece.empty()) return -1;
        for (size_t id = 0; id < n; ++id)
            if (v.pieces[id] == piece) return int(id);
        fail(source, what, "'" + piece + "' is not a token of the vocabulary");
    };
    v.bos = special_id(specials.bos, "bos_token");
    v.eos = special_id(specials.eos, "eos_token");
    v.add_bos = specials.add_bos.value_or(true);
    return Tokenizer::from_parts(source, std::move(v), std::move(model));
}

}  // namespace

Tokenizer hf_tokenizer_parse(std::string_view text, const std::string& source, const HfSpecialTokens& specials) {
    json doc;
    try {
        doc = json_parse_bounded(text, JSON_FILE_LIMITS, source);
    } catch (const JsonError& e) {
        fail(source, "(document)", e.detail);
    }
    return hf_tokenizer_from_json(doc, source, specials);
}

Tokenizer hf_tokenizer_load_dir(const std::filesystem::path& dir) {
    const std::filesystem::path path = dir / "tokenizer.json";
    HfSpecialTokens specials;
    const std::filesystem::path config_path = dir / "tokenizer_config.json";
    if (file_exists(config_path)) {
        const json config = file_read_json(config_path);
        const auto piece = [&](const char* name) -> std::string {
            const auto it = config.find(name);
            if (it == config.end() || it->is_null()) return {};
            if (it->is_string()) return it->get<std::string>();
            if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
                return (*it)["content"].get<std::string>();
            fail(config_path.string(), name, "neither a string nor {\"content\": string}");
        };
        specials.bos = piece("bos_token");
        specials.eos = piece("eos_token");
        if (const auto it = config.find("add_bos_token"); it != config.end() && !it->is_null()) {
            if (!it->is_boolean()) fail(config_path.string(), "add_bos_token", "not true or false");
            specials.add_bos = it->get<bool>();
        }
    }
    return hf_tokenizer_parse(file_read_text(path, JSON_FILE_LIMITS.max_bytes), path.string(), specials);
}

std::string chat_template_from_config(const nlohmann::json& config, const std::string& where, std::string* note) {
    if (!config.is_object()) throw MoeError(where + ": expected a JSON object");
    const auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) return {};
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_array()) throw MoeError(where + ": chat_template: expected a string or a list of {name, template}");
    std::string names;
    for (size_t i = 0; i < it->size(); ++i) {
        const nlohmann::json& entry = (*it)[i];
        const auto name = entry.is_object() ? entry.find("name") : entry.end();
        const auto text = entry.is_object() ? entry.find("template") : entry.end();
        if (!entry.is_object() || name == entry.end() || !name->is_string() || text == entry.end() ||
            !text->is_string())
            throw MoeError(where + ": chat_template[" + std::to_string(i) +
                           "]: expected an object with string fields name and template");
        if (name->get<std::string>() == "default") return text->get<std::string>();
        names += (names.empty() ? "" : ", ") + name->get<std::string>();
    }
    *note = where + ": chat_template has no \"default\" entry (found: " + names + ")";
    return {};
}
