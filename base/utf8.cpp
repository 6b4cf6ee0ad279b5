// UTF-8 (see utf8.h). Every check of well-formedness is utf8_feed's.
#include "base/utf8.h"

Utf8Char utf8_decode(std::string_view s, size_t pos, Utf8Form form) {
    const auto b0 = static_cast<uint8_t>(s[pos]);
    Utf8State u;
    for (size_t i = pos; i < s.size(); ++i) {
        const Utf8Step step = utf8_feed(u, static_cast<uint8_t>(s[i]), form);
        if (step == Utf8Step::COMPLETE) return {u.cp, i - pos + 1, Utf8Status::VALID};
        if (step == Utf8Step::INVALID) return {b0, 1, Utf8Status::INVALID};
    }
    return {b0, 1, Utf8Status::INCOMPLETE};
}

size_t utf8_lead_length(uint8_t b) {
    return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

bool utf8_valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const Utf8Char c = utf8_decode(s, i);
        if (c.status != Utf8Status::VALID) return false;
        i += c.len;
    }
    return true;
}

std::string utf8_sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const Utf8Char c = utf8_decode(s, i);
        if (c.status == Utf8Status::VALID)
            out.append(s, i, c.len);
        else
            out += "\xEF\xBF\xBD";
        i += c.len;
    }
    return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
    // An incomplete character is at most 3 bytes, a lead and continuation
    // bytes: the last byte that is no continuation byte is its lead.
    for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
        const auto b = static_cast<uint8_t>(s[s.size() - back]);
        if ((b & 0xC0) == 0x80) continue;
        return utf8_decode(s, s.size() - back).status == Utf8Status::INCOMPLETE ? back : 0;
    }
    return 0;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
    std::vector<size_t> offsets;
    offsets.reserve(s.size() + 1);
    for (size_t i = 0; i < s.size(); ++i)
        if ((static_cast<uint8_t>(s[i]) & 0xC0) != 0x80) offsets.push_back(i);
    offsets.push_back(s.size());
    return offsets;
}

size_t utf8_length(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    return n;
}

std::u32string utf8_code_points(std::string_view s, Utf8Form form) {
    std::u32string out;
    for (size_t i = 0; i < s.size();) {
        const Utf8Char c = utf8_decode(s, i, form);
        out += static_cast<char32_t>(c.cp);
        i += c.len;
    }
    return out;
}
