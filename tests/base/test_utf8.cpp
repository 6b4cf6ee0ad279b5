// base/utf8: every function against a reference written independently here
// (an encoder by the bit layout, a decoder that reads the lead byte's length
// and then checks continuation bits, overlongs, surrogates and the U+10FFFF
// limit, and the set of proper prefixes of every well-formed encoding, built
// from the encoder), over every string of up to 3 bytes, the 4-byte leads
// with chosen later bytes, every code point, and by name: the boundaries
// U+007F/U+0080, U+07FF/U+0800, U+FFFF/U+10000, U+10FFFF/0x110000,
// surrogates, overlongs, truncated sequences and stray continuation bytes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <iterator>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/utf8.h"

namespace {

// ---- The reference --------------------------------------------------------

std::string ref_encode(uint32_t cp) {
    const auto b = [](uint32_t v) { return static_cast<char>(v); };
    if (cp <= 0x7F) return {b(cp)};
    if (cp <= 0x7FF) return {b(0xC0 + (cp >> 6)), b(0x80 + cp % 64)};
    if (cp <= 0xFFFF) return {b(0xE0 + (cp >> 12)), b(0x80 + (cp >> 6) % 64), b(0x80 + cp % 64)};
    return {b(0xF0 + (cp >> 18)), b(0x80 + (cp >> 12) % 64), b(0x80 + (cp >> 6) % 64), b(0x80 + cp % 64)};
}

bool is_surrogate(uint32_t cp) {
    return cp >= 0xD800 && cp <= 0xDFFF;
}

// Every proper prefix of every encoding (surrogates' included: `generalized`
// says whether they count) and the least and greatest code point that can
// still come of it.
struct Prefixes {
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> ranges[2];  // [WELL_FORMED, GENERALIZED]
    Prefixes() {
        for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
            const std::string e = ref_encode(cp);
            for (int form = 0; form < 2; ++form) {
                if (form == 0 && is_surrogate(cp)) continue;
                for (size_t n = 1; n < e.size(); ++n) {
                    auto [it, added] = ranges[form].try_emplace(e.substr(0, n), cp, cp);
                    it->second.first = std::min(it->second.first, cp);
                    it->second.second = std::max(it->second.second, cp);
                }
            }
        }
    }
    bool has(std::string_view s, Utf8Form form) const { return ranges[int(form)].count(std::string(s)) > 0; }
};

const Prefixes& prefixes() {
    static const Prefixes p;
    return p;
}

// The character at the start of s (non-empty).
Utf8Char ref_decode(std::string_view s, Utf8Form form) {
    const auto b0 = static_cast<uint8_t>(s[0]);
    const Utf8Char ill{b0, 1, Utf8Status::INVALID};
    size_t n;
    uint32_t cp;
    if (b0 < 0x80) return {b0, 1, Utf8Status::VALID};
    if ((b0 & 0xE0) == 0xC0) {
        n = 2, cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
        n = 3, cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
        n = 4, cp = b0 & 0x07;
    } else {
        return ill;
    }
    if (s.size() < n) return prefixes().has(s, form) ? Utf8Char{b0, 1, Utf8Status::INCOMPLETE} : ill;
    for (size_t k = 1; k < n; ++k) {
        const auto b = static_cast<uint8_t>(s[k]);
        if ((b & 0xC0) != 0x80) return ill;
        cp = cp * 64 + (b & 0x3F);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (form == Utf8Form::WELL_FORMED && is_surrogate(cp))) return ill;
    return {cp, n, Utf8Status::VALID};
}

bool ref_valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const Utf8Char c = ref_decode(s.substr(i), Utf8Form::WELL_FORMED);
        if (c.status != Utf8Status::VALID) return false;
        i += c.len;
    }
    return true;
}

std::string ref_sanitize(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const Utf8Char c = ref_decode(s.substr(i), Utf8Form::WELL_FORMED);
        if (c.status == Utf8Status::VALID)
            out.append(s.substr(i, c.len));
        else
            out += "\xEF\xBF\xBD";
        i += c.len;
    }
    return out;
}

size_t ref_incomplete_tail(std::string_view s) {
    for (size_t k = 1; k <= 3 && k <= s.size(); ++k)
        if (prefixes().has(s.substr(s.size() - k), Utf8Form::WELL_FORMED)) return k;
    return 0;
}

std::string bytes_of(std::string_view s) {
    std::string out;
    char buf[8];
    for (char c : s) {
        std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(static_cast<uint8_t>(c)));
        out += buf;
    }
    return out;
}

// Checks utf8_decode (s non-empty) and the string functions on s against the reference.
void check_against_reference(std::string_view s) {
    for (Utf8Form form : {Utf8Form::WELL_FORMED, Utf8Form::GENERALIZED}) {
        const Utf8Char got = utf8_decode(s, 0, form), want = ref_decode(s, form);
        if (got.status != want.status || got.len != want.len || got.cp != want.cp) {
            FAIL_CHECK(bytes_of(s) << (form == Utf8Form::GENERALIZED ? " (generalized)" : "") << ": status "
                                   << int(got.status) << " len " << got.len << " cp " << got.cp << ", expected "
                                   << int(want.status) << " len " << want.len << " cp " << want.cp);
            return;
        }
    }
    if (utf8_valid(s) != ref_valid(s) || utf8_sanitize(s) != ref_sanitize(s) ||
        utf8_incomplete_tail(s) != ref_incomplete_tail(s))
        FAIL_CHECK(bytes_of(s) << ": valid " << utf8_valid(s) << ", incomplete tail " << utf8_incomplete_tail(s)
                               << ", sanitized " << bytes_of(utf8_sanitize(s)));
}

Utf8Char decode(std::string_view s, Utf8Form form = Utf8Form::WELL_FORMED) {
    return utf8_decode(s, 0, form);
}

}  // namespace

TEST_CASE("utf8: the boundaries of each length", "[utf8]") {
    const struct {
        uint32_t cp;
        const char* bytes;
    } edges[] = {{0x7F, "\x7F"},
                 {0x80, "\xC2\x80"},
                 {0x7FF, "\xDF\xBF"},
                 {0x800, "\xE0\xA0\x80"},
                 {0xFFFF, "\xEF\xBF\xBF"},
                 {0x10000, "\xF0\x90\x80\x80"},
                 {0x10FFFF, "\xF4\x8F\xBF\xBF"}};
    for (const auto& e : edges) {
        const std::string s = e.bytes;
        INFO(bytes_of(s));
        const Utf8Char c = decode(s);
        CHECK(c.status == Utf8Status::VALID);
        CHECK(c.cp == e.cp);
        CHECK(c.len == s.size());
        std::string out;
        utf8_append(out, e.cp);
        CHECK(out == s);
        CHECK(utf8_valid(s));
    }
    // 0x110000 would be F4 90 80 80: refused at its second byte, as is every lead above F4.
    CHECK(decode("\xF4\x90\x80\x80").status == Utf8Status::INVALID);
    CHECK(decode("\xF4\x90").status == Utf8Status::INVALID);
    for (int b = 0xF5; b <= 0xFF; ++b)
        CHECK(decode(std::string(1, char(b)) + "\x80\x80\x80").status == Utf8Status::INVALID);
    CHECK_FALSE(utf8_valid("\xF4\x90\x80\x80"));
    CHECK(utf8_sanitize("\xF4\x90\x80\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("utf8: surrogates are refused, and taken in the generalized form", "[utf8]") {
    CHECK(decode("\xED\x9F\xBF").cp == 0xD7FF);
    CHECK(decode("\xEE\x80\x80").cp == 0xE000);
    for (const char* s : {"\xED\xA0\x80", "\xED\xAF\xBF", "\xED\xB0\x80", "\xED\xBF\xBF"}) {
        INFO(bytes_of(s));
        const Utf8Char c = decode(s);
        CHECK(c.status == Utf8Status::INVALID);
        CHECK(c.len == 1);
        CHECK(c.cp == 0xED);
        CHECK_FALSE(utf8_valid(s));
        const Utf8Char g = decode(s, Utf8Form::GENERALIZED);
        CHECK(g.status == Utf8Status::VALID);
        CHECK(g.len == 3);
        CHECK(is_surrogate(g.cp));
    }
    // ED A0 can never be well-formed: not incomplete.
    CHECK(decode("\xED\xA0").status == Utf8Status::INVALID);
    CHECK(decode("\xED\xA0", Utf8Form::GENERALIZED).status == Utf8Status::INCOMPLETE);
    CHECK(utf8_code_points("a\xED\xA0\x80"
                           "b",
                           Utf8Form::GENERALIZED) ==
          U"a\xD800"
          "b");
}

TEST_CASE("utf8: overlong forms are refused at the byte that makes them so", "[utf8]") {
    for (const char* s :
         {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF", "\xF0\x80\x80\x80", "\xF0\x8F\xBF\xBF"}) {
        INFO(bytes_of(s));
        CHECK(decode(s).status == Utf8Status::INVALID);
        CHECK(decode(s, Utf8Form::GENERALIZED).status == Utf8Status::INVALID);
        CHECK_FALSE(utf8_valid(s));
    }
    CHECK(decode("\xC0").status == Utf8Status::INVALID);
    CHECK(decode("\xE0\x9F").status == Utf8Status::INVALID);
    CHECK(decode("\xF0\x8F").status == Utf8Status::INVALID);
    Utf8State u;
    CHECK(utf8_feed(u, 0xE0) == Utf8Step::PARTIAL);
    CHECK(utf8_feed(u, 0x80) == Utf8Step::INVALID);
}

TEST_CASE("utf8: truncated sequences and stray continuation bytes", "[utf8]") {
    for (const char* s : {"\xC2", "\xE2\x82", "\xE2", "\xF0\x9F\x98", "\xF0\x9F", "\xF4\x8F\xBF"}) {
        INFO(bytes_of(s));
        const Utf8Char c = decode(s);
        CHECK(c.status == Utf8Status::INCOMPLETE);
        CHECK(c.len == 1);
        CHECK(c.cp == static_cast<uint8_t>(s[0]));
        CHECK_FALSE(utf8_valid(s));
        CHECK(utf8_incomplete_tail(std::string("ok") + s) == std::string_view(s).size());
        CHECK(utf8_sanitize(s) == [&] {
            std::string r;
            for (size_t i = 0; i < std::string_view(s).size(); ++i) r += "\xEF\xBF\xBD";
            return r;
        }());
    }
    // A truncated character followed by more text is invalid, not incomplete.
    CHECK(decode("\xE2\x82"
                 "a")
              .status == Utf8Status::INVALID);
    CHECK(utf8_incomplete_tail("\xE2\x82"
                               "a") == 0);
    CHECK(utf8_incomplete_tail("a\xE2\x82\xAC") == 0);
    CHECK(utf8_incomplete_tail("\xE2\x82\xAC\x80") == 0);
    CHECK(utf8_incomplete_tail("") == 0);
    for (int b = 0x80; b <= 0xBF; ++b) {
        const std::string s(1, char(b));
        CHECK(decode(s).status == Utf8Status::INVALID);
        CHECK(utf8_sanitize("a" + s + "b") ==
              "a\xEF\xBF\xBD"
              "b");
        CHECK(utf8_incomplete_tail("a" + s) == 0);
    }
    // Offsets and lengths: a stray continuation byte joins the character before it.
    CHECK(utf8_offsets("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80") == std::vector<size_t>{0, 1, 3, 6, 10});
    CHECK(utf8_length("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80") == 4);
    CHECK(utf8_offsets("a\x80"
                       "b") == std::vector<size_t>{0, 2, 3});
    CHECK(utf8_length("a\x80"
                      "b") == 2);
    CHECK(utf8_offsets("") == std::vector<size_t>{0});
    CHECK(utf8_code_points("a\x80\xC3\xA9") == U"a\x80\xE9");
}

TEST_CASE("utf8: every code point round-trips and encodes as the reference does", "[utf8]") {
    std::string all;
    std::u32string cps;
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
        std::string e;
        utf8_append(e, cp);
        if (e != ref_encode(cp)) FAIL("utf8_append(" << cp << ") = " << bytes_of(e));
        const Utf8Char c = decode(e), g = decode(e, Utf8Form::GENERALIZED);
        if (g.status != Utf8Status::VALID || g.cp != cp || g.len != e.size())
            FAIL("generalized decode of U+" << cp << " gave " << g.cp << " len " << g.len);
        if (is_surrogate(cp)) {
            if (c.status != Utf8Status::INVALID || utf8_valid(e)) FAIL("surrogate " << cp << " accepted");
            continue;
        }
        if (c.status != Utf8Status::VALID || c.cp != cp || c.len != e.size())
            FAIL("decode of U+" << cp << " gave " << c.cp << " len " << c.len);
        // Byte by byte: the range narrows to the character and always holds it.
        Utf8State u;
        for (size_t i = 0; i < e.size(); ++i) {
            const Utf8Step step = utf8_feed(u, static_cast<uint8_t>(e[i]));
            if (i + 1 < e.size()) {
                const auto range = prefixes().ranges[0].at(e.substr(0, i + 1));
                if (step != Utf8Step::PARTIAL || u.lo != range.first || u.hi != range.second)
                    FAIL("feeding U+" << cp << ": byte " << i << " gave range " << u.lo << ".." << u.hi);
            } else if (step != Utf8Step::COMPLETE || u.cp != cp) {
                FAIL("feeding U+" << cp << " ended with " << int(step));
            }
        }
        all += e;
        cps += static_cast<char32_t>(cp);
    }
    CHECK(utf8_valid(all));
    CHECK(utf8_sanitize(all) == all);
    CHECK(utf8_code_points(all) == cps);
    CHECK(utf8_length(all) == cps.size());
    CHECK(utf8_incomplete_tail(all) == 0);
    // The text ends in 4-byte characters: a cut leaves the bytes it took of the last one as the tail.
    for (size_t cut = all.size() - 12; cut < all.size(); ++cut)
        CHECK(utf8_incomplete_tail(std::string_view(all).substr(0, cut)) == (cut % 4 + 4 - all.size() % 4) % 4);
}

TEST_CASE("utf8: every string of up to three bytes agrees with the reference", "[utf8]") {
    char s[3];
    for (int a = 0; a < 256; ++a) {
        s[0] = char(a);
        check_against_reference(std::string_view(s, 1));
        for (int b = 0; b < 256; ++b) {
            s[1] = char(b);
            check_against_reference(std::string_view(s, 2));
            // A first byte that is ASCII or cannot lead is decided alone: the
            // rest is the two-byte strings'.
            if (a < 0xC0 || a > 0xF7) continue;
            for (int c = 0; c < 256; ++c) {
                s[2] = char(c);
                check_against_reference(std::string_view(s, 3));
            }
        }
    }
}

TEST_CASE("utf8: four-byte leads with chosen later bytes, and decoding inside a string", "[utf8]") {
    const int later[] = {0x00, 0x41, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xF0, 0xFF};
    for (int a = 0xF0; a <= 0xF7; ++a)
        for (int b = 0; b < 256; ++b)
            for (int c : later)
                for (int d : later) check_against_reference(std::string{char(a), char(b), char(c), char(d)});
    // Random mixes of whole characters, their pieces and stray bytes.
    std::mt19937 rng(7);
    const std::string pieces[] = {
        "a",    "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xC3",     "\xE2\x82", "\xF0\x9F",
        "\x80", "\xBF",     "\xC0",         "\xED\xA0\x80",     "\xF4\x90", "\xFF",     "\n"};
    for (int round = 0; round < 20000; ++round) {
        std::string text;
        const int n = 1 + int(rng() % 8);
        for (int i = 0; i < n; ++i) text += pieces[rng() % std::size(pieces)];
        check_against_reference(text);
        for (size_t pos = 0; pos < text.size(); ++pos) {
            const Utf8Char got = utf8_decode(text, pos),
                           want = ref_decode(std::string_view(text).substr(pos), Utf8Form::WELL_FORMED);
            if (got.status != want.status || got.len != want.len || got.cp != want.cp)
                FAIL(bytes_of(text) << " at " << pos);
        }
    }
}

TEST_CASE("utf8: lead lengths are SentencePiece's", "[utf8]") {
    const char* table = "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4";  // SentencePiece's OneCharLen, by the high four bits
    for (int b = 0; b < 256; ++b) CHECK(utf8_lead_length(uint8_t(b)) == size_t(table[b >> 4]));
}
