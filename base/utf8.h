// UTF-8: the one place that knows its byte patterns. Well-formed is Unicode's
// Table 3-7: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above
// U+10FFFF. These functions say which bytes are well-formed; what to do with
// the others (a U+FFFD, an escape, an error, the byte as it is) stays each
// caller's choice. Plain functions over bytes: no allocation beyond what they
// return, no knowledge of who reads the text.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

// What a decoder takes for a character: WELL_FORMED, or GENERALIZED, which
// also takes the three-byte forms of the surrogates, the bytes utf8_append
// writes for them (Jinja's strings hold Python's lone surrogates so).
enum class Utf8Form { WELL_FORMED, GENERALIZED };

// ---- One character ---------------------------------------------------------

enum class Utf8Status {
    VALID,       // a character
    INCOMPLETE,  // the start of a character that the string ends before completing
    INVALID,     // a byte that starts no character here
};
struct Utf8Char {
    uint32_t cp;  // the code point; for INCOMPLETE and INVALID, the byte's value
    size_t len;   // bytes to step over: the character's, 1 for INCOMPLETE and INVALID
    Utf8Status status;
};
// The character at s[pos] (pos < s.size()).
Utf8Char utf8_decode(std::string_view s, size_t pos = 0, Utf8Form form = Utf8Form::WELL_FORMED);

// The bytes the lead byte b announces by its high bits, the rest unchecked,
// as SentencePiece (and llama.cpp) split text into characters: 1 for
// 0xxxxxxx and for a continuation byte 10xxxxxx, 2 for 110xxxxx, 3 for
// 1110xxxx, 4 for 1111xxxx.
size_t utf8_lead_length(uint8_t b);

// Appends the bytes of cp (at most U+10FFFF). A surrogate becomes its three
// bytes, which are not well-formed: callers that must not write one check
// cp first.
void utf8_append(std::string& out, uint32_t cp);

// ---- Strings ---------------------------------------------------------------

// Every byte of s belongs to a well-formed character.
bool utf8_valid(std::string_view s);
// s with each byte that belongs to no well-formed character (an incomplete
// one at the end included) replaced by U+FFFD.
std::string utf8_sanitize(std::string_view s);
// The bytes at the end of s that start a well-formed character and miss its
// last bytes (1 to 3); 0 when s ends on a character boundary or in bytes
// that no further byte can make well-formed.
size_t utf8_incomplete_tail(std::string_view s);

// Strings measured in characters, as Python's str is: every byte that is not
// a continuation byte (10xxxxxx) starts one, so on well-formed text (and the
// generalized form) these are the characters, and a stray continuation byte
// joins the character before it.
// The byte offset of each character, then s.size().
std::vector<size_t> utf8_offsets(std::string_view s);
size_t utf8_length(std::string_view s);
// The code points of s in order, as utf8_decode reads them (a byte that is
// no character: its value).
std::u32string utf8_code_points(std::string_view s, Utf8Form form = Utf8Form::WELL_FORMED);

// ---- Byte by byte ----------------------------------------------------------

// A character in progress: the bytes so far of one UTF-8 sequence.
struct Utf8State {
    uint32_t cp = 0;          // bits so far
    uint32_t need = 0;        // continuation bytes still to come (0: between characters)
    uint32_t lo = 0, hi = 0;  // the code points the sequence can still become
};
enum class Utf8Step { INVALID, PARTIAL, COMPLETE };
// Takes the next byte: COMPLETE (u.cp is the character), PARTIAL (more bytes
// to come; u.lo..u.hi the code points it can still become) or INVALID (the
// byte cannot start, or continue, a character here; u is then of no further
// use). A sequence is refused at the first byte no character can follow
// from: 0xE0 0x80 at the 0x80. Inline: the grammar feeds every byte of its
// vocabulary walk through it.
inline Utf8Step utf8_feed(Utf8State& u, uint8_t b, Utf8Form form = Utf8Form::WELL_FORMED) {
    if (u.need == 0) {
        if (b < 0x80) {
            u.cp = b;
            return Utf8Step::COMPLETE;
        }
        if (b >= 0xC2 && b <= 0xDF) {
            u = {b & 0x1Fu, 1, (b & 0x1Fu) << 6, ((b & 0x1Fu) << 6) | 0x3F};
        } else if (b >= 0xE0 && b <= 0xEF) {
            u = {b & 0x0Fu, 2, std::max(0x800u, (b & 0x0Fu) << 12), ((b & 0x0Fu) << 12) | 0xFFF};
            if (b == 0xED && form == Utf8Form::WELL_FORMED) u.hi = 0xD7FF;
        } else if (b >= 0xF0 && b <= 0xF4) {
            u = {b & 0x07u, 3, std::max(0x10000u, (b & 0x07u) << 18),
                 std::min(0x10FFFFu, ((b & 0x07u) << 18) | 0x3FFFF)};
        } else {
            return Utf8Step::INVALID;
        }
        return Utf8Step::PARTIAL;
    }
    if ((b & 0xC0) != 0x80) return Utf8Step::INVALID;
    u.cp = (u.cp << 6) | (b & 0x3Fu);
    u.need--;
    const uint32_t shift = 6 * u.need;
    const uint32_t lo = std::max(u.lo, u.cp << shift);
    const uint32_t hi = std::min(u.hi, (u.cp << shift) | ((1u << shift) - 1));
    if (lo > hi) return Utf8Step::INVALID;
    u.lo = lo;
    u.hi = hi;
    return u.need == 0 ? Utf8Step::COMPLETE : Utf8Step::PARTIAL;
}
