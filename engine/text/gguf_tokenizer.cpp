// A GGUF file's tokenizer.ggml.* metadata as a SentencePiece model or a
// byte-level BPE (see gguf_tokenizer.h).
//
// llama.cpp's converter copies a SentencePiece model's pieces, scores and
// types into the GGUF unchanged, so writing them back as a ModelProto, with
// the trainer and normalizer settings every Llama-family tokenizer.model has
// (BPE, byte fallback, identity normalizer, dummy prefix, no whitespace
// folding), gives a model that encodes and decodes as the original: the tests
// check this against Mixtral's tokenizer.model and llama.cpp's reference ids.
// Everything libsentencepiece would refuse is refused here first, naming the
// GGUF key, so a bad file never surfaces as a SentencePiece status text.
#include "engine/text/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/errors.h"
#include "base/utf8.h"
#include "engine/formats/tensor_view.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/protobuf_wire.h"

namespace {

constexpr std::string_view KEY_MODEL = "tokenizer.ggml.model";
constexpr std::string_view KEY_TOKENS = "tokenizer.ggml.tokens";
constexpr std::string_view KEY_SCORES = "tokenizer.ggml.scores";
constexpr std::string_view KEY_TYPES = "tokenizer.ggml.token_type";
constexpr std::string_view KEY_BOS = "tokenizer.ggml.bos_token_id";
constexpr std::string_view KEY_ADD_BOS = "tokenizer.ggml.add_bos_token";
constexpr std::string_view KEY_EOS = "tokenizer.ggml.eos_token_id";
constexpr std::string_view KEY_UNK = "tokenizer.ggml.unknown_token_id";
constexpr std::string_view KEY_PAD = "tokenizer.ggml.padding_token_id";
constexpr std::string_view KEY_SPACE_PREFIX = "tokenizer.ggml.add_space_prefix";
constexpr std::string_view KEY_EXTRA_SPACES = "tokenizer.ggml.remove_extra_whitespaces";
constexpr std::string_view KEY_MERGES = "tokenizer.ggml.merges";
constexpr std::string_view KEY_PRE = "tokenizer.ggml.pre";

// ggml's token types, numbered as SentencePiece's ModelProto.SentencePiece.Type.
enum TokenType : int32_t { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };

// SentencePiece's unk surface: what decoding <unk> gives (" ⁇ ").
constexpr std::string_view UNK_SURFACE = " \xE2\x81\x87 ";

[[noreturn]] void fail(std::string_view source, std::string_view key, const std::string& what) {
    throw MoeError(std::string(source) + ": " + std::string(key) + ": " + what);
}

// "token 5 '<0x02>'": a token named in a message.
std::string token_text(size_t id, std::string_view token) {
    return "token " + std::to_string(id) + " '" + printable(token) + "'";
}

// The byte a byte token stands for: SentencePiece spells byte b "<0x%02X>"
// and knows no other spelling. -1 when `token` is not one.
int byte_token_value(std::string_view token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
    int value = 0;
    for (char c : token.substr(3, 2)) {
        if (c >= '0' && c <= '9')
            value = value * 16 + (c - '0');
        else if (c >= 'A' && c <= 'F')
            value = value * 16 + (c - 'A' + 10);
        else
            return -1;
    }
    return value;
}

// A special id: nullopt when absent and not required; MoeError when absent
// and required, or outside the vocabulary of n tokens.
std::optional<int> special_id(const GgufMetadata& md, std::string_view source, std::string_view key, size_t n,
                              bool required) {
    const std::optional<int64_t> id = md.find_int<int64_t>(key);
    if (!id) {
        if (required) fail(source, key, "missing key");
        return std::nullopt;
    }
    if (*id < 0 || uint64_t(*id) >= n)
        fail(source, key, std::to_string(*id) + " is outside the vocabulary (" + std::to_string(n) + " tokens)");
    return int(*id);
}

// The pre-tokenizer regexes llama.cpp applies for a tokenizer.ggml.pre name,
// in order, each splitting every piece with the matches isolated (as the
// models' tokenizer.json Split steps do); none for GPT-2's, which is the
// ByteLevel pre-tokenizer's own regex. nullopt: the name is not known.
using Regexes = std::vector<std::string>;

std::optional<Regexes> bpe_pre_regexes(std::string_view pre) {
    if (pre.empty() || pre == "default" || pre == "gpt-2") return Regexes{};
    if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe")
        return Regexes{
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
            "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    if (pre == "qwen2" || pre == "qwen2.5" || pre == "qwen-2.5" || pre == "deepseek-r1-qwen")
        return Regexes{
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
            "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    // Qwen3.5 / 3.6: Qwen2's, with combining marks (\p{M}) kept inside words.
    if (pre == "qwen35")
        return Regexes{
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
            "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
            "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    // o200k (gpt-oss, GPT-4o; Llama 4's is the same): cased words split at
    // their case changes, contractions kept on the word, digits by three.
    if (pre == "gpt-4o" || pre == "llama4")
        return Regexes{
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
            "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    if (pre == "deepseek-llm")
        return Regexes{
            "[\\r\\n]",
            "\\s?[A-Za-z"
            "\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}"
            "\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
            "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-"
            "\\x{10C5}"
            "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-"
            "\\x{1D77}\\x{1D79}-\\x{1D9A}"
            "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}"
            "\\x{1F5B}"
            "\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-"
            "\\x{1FCC}"
            "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}"
            "\\x{2107}"
            "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
            "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
            "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-"
            "\\x{A69B}"
            "\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-"
            "\\x{FB17}\\x{FF21}-\\x{FF3A}"
            "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
            "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
            "\\x{1E900}-\\x{1E943}"
            "]+",
            "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
            "\\s+$",
            "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
            "\\p{N}+"};
    if (pre == "deepseek-v3")
        return Regexes{
            "\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
            "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    return std::nullopt;
}

// A "gpt2" vocabulary (byte-level BPE: tokens already in the byte-level
// alphabet, merges "a b" by rank) as the tokenizer.json document it was
// converted from, read by the one tokenizer.json reader: control tokens
// (type 3), BOS and EOS are special added tokens, user-defined ones (type 4)
// added tokens matched in any text, as llama.cpp and Hugging Face match them.
}  // namespace

nlohmann::json gguf_bpe_tokenizer_json(const GgufMetadata& md, std::string_view source, HfSpecialTokens* specials) {
    const std::optional<std::vector<std::string_view>> tokens = md.find_strings(KEY_TOKENS);
    if (!tokens) fail(source, KEY_TOKENS, "missing key");
    const size_t n = tokens->size();
    if (n == 0) fail(source, KEY_TOKENS, "no tokens");
    if (n > size_t(1) << 24) fail(source, KEY_TOKENS, std::to_string(n) + " tokens");
    const std::optional<std::vector<std::string_view>> merges = md.find_strings(KEY_MERGES);
    if (!merges) fail(source, KEY_MERGES, "missing key (a gpt2 vocabulary needs its merges)");
    const std::optional<std::vector<int32_t>> types = md.find_ints<int32_t>(KEY_TYPES);
    if (types && types->size() != n)
        fail(source, KEY_TYPES,
             std::to_string(types->size()) + " entries, but " + std::string(KEY_TOKENS) + " has " + std::to_string(n));
    const std::string pre(md.find_string(KEY_PRE).value_or(""));
    const std::optional<std::vector<std::string>> regexes = bpe_pre_regexes(pre);
    if (!regexes)
        fail(source, KEY_PRE,
             "unknown pre-tokenizer '" + printable(pre) +
                 "' (known: gpt-2, default, llama3, llama-bpe, qwen2, qwen35, gpt-4o, llama4, deepseek-llm, deepseek-v3)");

    // BOS and EOS are special whatever their type, so text never encodes to them.
    const std::optional<int> bos = special_id(md, source, KEY_BOS, n, false);
    const std::optional<int> eos = special_id(md, source, KEY_EOS, n, false);
    nlohmann::json vocab = nlohmann::json::object();
    nlohmann::json added = nlohmann::json::array();
    for (size_t i = 0; i < n; ++i) {
        const std::string token((*tokens)[i]);
        if (token.empty()) fail(source, KEY_TOKENS, "token " + std::to_string(i) + " is empty");
        if (vocab.contains(token)) fail(source, KEY_TOKENS, token_text(i, token) + " repeats an earlier token");
        vocab[token] = i;
        const bool special = (types && (*types)[i] == CONTROL) || int(i) == bos || int(i) == eos;
        if (special || (types && (*types)[i] == USER_DEFINED))
            added.push_back({{"id", i}, {"content", token}, {"special", special}});
    }
    nlohmann::json merge_list = nlohmann::json::array();
    for (size_t r = 0; r < merges->size(); ++r) {
        const std::string_view m = (*merges)[r];
        const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
        if (space == std::string_view::npos || space + 1 >= m.size())
            fail(source, KEY_MERGES, "merge " + std::to_string(r) + " '" + printable(m) + "' is not two tokens");
        merge_list.push_back({std::string(m.substr(0, space)), std::string(m.substr(space + 1))});
    }
    nlohmann::json steps = nlohmann::json::array();
    for (const std::string& r : *regexes)
        steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", r}}}, {"behavior", "Isolated"}, {"invert", false}});
    steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", regexes->empty()}});
    const bool ignore_merges = pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe";
    const nlohmann::json doc = {
        {"model",
         {{"type", "BPE"},
          {"vocab", std::move(vocab)},
          {"merges", std::move(merge_list)},
          {"ignore_merges", ignore_merges}}},
        {"added_tokens", std::move(added)},
        {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}}},
        {"decoder", {{"type", "ByteLevel"}}},
    };
    *specials = {};
    if (bos) specials->bos = (*tokens)[*bos];
    if (eos) specials->eos = (*tokens)[*eos];
    specials->add_bos = md.find_bool(KEY_ADD_BOS);
    return doc;
}

namespace {

Tokenizer gguf_bpe_tokenizer(const GgufMetadata& md, std::string_view source) {
    HfSpecialTokens specials;
    const nlohmann::json doc = gguf_bpe_tokenizer_json(md, source, &specials);
    return hf_tokenizer_from_json(doc, std::string(source), specials);
}

}  // namespace

std::vector<int> gguf_end_of_generation_ids(const GgufMetadata& md) {
    std::vector<int> ids;
    const auto add = [&](std::optional<int> id) {
        if (id && *id >= 0 && std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
    };
    add(md.find_int<int>(KEY_EOS));
    if (ids.empty()) return ids;
    add(md.find_int<int>("tokenizer.ggml.eot_token_id"));
    add(md.find_int<int>("tokenizer.ggml.eom_token_id"));
    const std::optional<std::vector<std::string_view>> tokens = md.find_strings(KEY_TOKENS);
    const std::optional<std::vector<int32_t>> types = md.find_ints<int32_t>(KEY_TYPES);
    if (!tokens || !types || types->size() != tokens->size()) return ids;
    static constexpr std::string_view END_OF_TURN[] = {
        "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>",
        "<|end|>",    "<end_of_turn>", "<EOT>",      "<｜end▁of▁sentence｜>"};
    for (size_t i = 0; i < tokens->size(); i++)
        if ((*types)[i] == CONTROL &&
            std::find(std::begin(END_OF_TURN), std::end(END_OF_TURN), (*tokens)[i]) != std::end(END_OF_TURN))
            add(int(i));
    return ids;
}

std::string gguf_sentencepiece_model(const GgufMetadata& md, std::string_view source) {
    const std::optional<std::string_view> kind = md.find_string(KEY_MODEL);
    if (!kind) fail(source, KEY_MODEL, "missing key (the file carries no tokenizer)");
    if (*kind != "llama") {
        // (built in steps: "'" + std::string trips GCC 12's -Wrestrict)
        std::string what = "'";
        what += printable(*kind);
        what += "' vocabularies are not SentencePiece ones (only 'llama'; 'gpt2' is read by tokenizer_from_gguf)";
        fail(source, KEY_MODEL, what);
    }

    const std::optional<std::vector<std::string_view>> tokens = md.find_strings(KEY_TOKENS);
    if (!tokens) fail(source, KEY_TOKENS, "missing key");
    const size_t n = tokens->size();
    if (n == 0) fail(source, KEY_TOKENS, "no tokens");
    if (n > size_t(std::numeric_limits<int32_t>::max())) fail(source, KEY_TOKENS, std::to_string(n) + " tokens");
    const std::optional<std::vector<float>> scores = md.find_floats(KEY_SCORES);
    if (!scores) fail(source, KEY_SCORES, "missing key (a SentencePiece vocabulary needs its scores)");
    const std::optional<std::vector<int32_t>> types = md.find_ints<int32_t>(KEY_TYPES);
    if (!types) fail(source, KEY_TYPES, "missing key (a SentencePiece vocabulary needs its token types)");
    const auto same_length = [&](std::string_view key, size_t size) {
        if (size != n)
            fail(source, key,
                 std::to_string(size) + " entries, but " + std::string(KEY_TOKENS) + " has " + std::to_string(n));
    };
    same_length(KEY_SCORES, scores->size());
    same_length(KEY_TYPES, types->size());

    const int bos = *special_id(md, source, KEY_BOS, n, true);
    const int eos = *special_id(md, source, KEY_EOS, n, true);
    const std::optional<int> pad = special_id(md, source, KEY_PAD, n, false);
    std::optional<int> unk = special_id(md, source, KEY_UNK, n, false);
    for (size_t i = 0; !unk && i < n; ++i)
        if ((*types)[i] == UNKNOWN) unk = int(i);
    if (!unk) fail(source, KEY_UNK, "missing key, and no token has type unknown (SentencePiece needs one)");
    for (const auto& [key, id] : {std::pair{KEY_BOS, bos}, std::pair{KEY_EOS, eos}})
        if (id == *unk) fail(source, key, std::to_string(id) + " is the unknown token");

    // SentencePiece keeps the pieces text can produce (normal, user-defined,
    // unused) and reserved ones (control, unknown, byte) in two maps, refuses
    // a piece twice in one, and looks up the reserved map first: a text piece
    // also spelled by a reserved one would encode to the reserved id and fail
    // at encode time. So every token is unique.
    std::unordered_map<std::string_view, size_t> seen;
    int n_bytes = 0;  // each byte once: a second one repeats a reserved piece
    std::string model;
    model.reserve(n * 24 + 256);
    std::string piece;
    for (size_t i = 0; i < n; ++i) {
        const std::string_view token = (*tokens)[i];
        if (token.empty()) fail(source, KEY_TOKENS, "token " + std::to_string(i) + " is empty");
        if (token.find('\0') != std::string_view::npos)
            fail(source, KEY_TOKENS, token_text(i, token) + " holds a NUL byte");
        if (!std::isfinite((*scores)[i]))
            fail(source, KEY_SCORES, token_text(i, token) + " has score " + std::to_string((*scores)[i]));
        int32_t type = (*types)[i];
        if (type < NORMAL || type > BYTE)
            fail(source, KEY_TYPES,
                 token_text(i, token) + " has type " + std::to_string(type) +
                     " (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)");
        if (int(i) == *unk) {
            type = UNKNOWN;
        } else if (int(i) == bos || int(i) == eos) {
            if (type == BYTE)
                fail(source, int(i) == bos ? KEY_BOS : KEY_EOS, token_text(i, token) + " is a byte token");
            type = CONTROL;
        } else if (type == UNKNOWN) {
            type = UNUSED;  // SentencePiece allows one unknown piece; others are padding
        }
        if (type == BYTE) {
            if (byte_token_value(token) < 0)
                fail(source, KEY_TOKENS, token_text(i, token) + " has type byte but is not <0xNN>");
            ++n_bytes;
        }
        // A control piece of one character (as SentencePiece splits text into
        // characters) is what SentencePiece finds for that character in text,
        // and then fails to encode the text.
        if (type == CONTROL && token.size() == utf8_lead_length(static_cast<uint8_t>(token[0])))
            fail(source, KEY_TOKENS,
                 token_text(i, token) + " is a control token of one character (text holding it could not be encoded)");
        const auto [at, added] = seen.emplace(token, i);
        if (!added) fail(source, KEY_TOKENS, token_text(i, token) + " repeats token " + std::to_string(at->second));

        piece.clear();
        pb_put_bytes_field(&piece, 1, token);         // piece
        pb_put_float_field(&piece, 2, (*scores)[i]);  // score
        pb_put_varint_field(&piece, 3, uint64_t(type));
        pb_put_bytes_field(&model, 1, piece);  // ModelProto.pieces
    }
    // Byte fallback spells any byte; SentencePiece refuses it without all 256.
    const bool byte_fallback = n_bytes > 0;
    if (byte_fallback && n_bytes != 256)
        fail(source, KEY_TYPES,
             std::to_string(n_bytes) + " tokens of type byte; byte fallback needs all 256, <0x00> to <0xFF>");

    std::string trainer;
    pb_put_varint_field(&trainer, 3, 2);   // model_type: BPE
    pb_put_varint_field(&trainer, 4, n);   // vocab_size
    pb_put_varint_field(&trainer, 26, 1);  // allow_whitespace_only_pieces
    pb_put_varint_field(&trainer, 35, byte_fallback);
    pb_put_varint_field(&trainer, 40, uint64_t(*unk));           // unk_id
    pb_put_varint_field(&trainer, 41, uint64_t(bos));            // bos_id
    pb_put_varint_field(&trainer, 42, uint64_t(eos));            // eos_id
    if (pad) pb_put_varint_field(&trainer, 43, uint64_t(*pad));  // pad_id (default -1: none)
    pb_put_bytes_field(&trainer, 44, UNK_SURFACE);
    // libsentencepiece finds the special ids by these pieces.
    pb_put_bytes_field(&trainer, 45, (*tokens)[size_t(*unk)]);
    pb_put_bytes_field(&trainer, 46, (*tokens)[size_t(bos)]);
    pb_put_bytes_field(&trainer, 47, (*tokens)[size_t(eos)]);
    if (pad) pb_put_bytes_field(&trainer, 48, (*tokens)[size_t(*pad)]);
    pb_put_bytes_field(&model, 2, trainer);  // ModelProto.trainer_spec

    std::string normalizer;
    pb_put_bytes_field(&normalizer, 1, "identity");                                       // name
    pb_put_varint_field(&normalizer, 3, md.find_bool(KEY_SPACE_PREFIX).value_or(true));   // add_dummy_prefix
    pb_put_varint_field(&normalizer, 4, md.find_bool(KEY_EXTRA_SPACES).value_or(false));  // remove_extra_whitespaces
    pb_put_varint_field(&normalizer, 5, 1);     // escape_whitespaces: " " -> "▁"
    pb_put_bytes_field(&model, 3, normalizer);  // ModelProto.normalizer_spec
    return model;
}

Tokenizer tokenizer_from_gguf(const GgufMetadata& metadata, std::string_view source) {
    if (metadata.find_string(KEY_MODEL) == std::optional<std::string_view>("gpt2"))
        return gguf_bpe_tokenizer(metadata, source);
    Tokenizer t = Tokenizer::from_bytes(gguf_sentencepiece_model(metadata, source), source);
    if (const std::optional<bool> add_bos = metadata.find_bool(KEY_ADD_BOS)) t.set_add_bos(*add_bos);
    return t;
}

std::vector<GgufKeyValue> gguf_tokenizer_metadata(std::string_view model, std::string_view source, int bos, int eos) {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    bool dummy_prefix = true, extra_whitespaces = true;  // sentencepiece_model.proto's defaults
    int unk = -1, pad = -1;
    bool ok = pb_for_each_field(model, [&](uint32_t field, uint32_t wire, std::string_view payload, std::string_view) {
        if (field == 1 && wire == 2) {  // ModelProto.pieces
            std::string piece;
            float score = 0;
            uint64_t type = NORMAL;
            pb_for_each_field(payload, [&](uint32_t f, uint32_t w, std::string_view v, std::string_view) {
                size_t pos = 0;
                if (f == 1 && w == 2) piece = std::string(v);
                if (f == 2 && w == 5) std::memcpy(&score, v.data(), 4);
                if (f == 3 && w == 0) pb_read_varint(v, &pos, &type);
            });
            tokens.push_back(std::move(piece));
            scores.push_back(score);
            types.push_back(int32_t(type));
        } else if (field == 2 && wire == 2) {  // trainer_spec: unk_id 40, pad_id 43
            pb_for_each_field(payload, [&](uint32_t f, uint32_t w, std::string_view v, std::string_view) {
                uint64_t x = 0;
                size_t pos = 0;
                if (w != 0 || !pb_read_varint(v, &pos, &x)) return;
                if (f == 40) unk = int(int32_t(x));
                if (f == 43) pad = int(int32_t(x));
            });
        } else if (field == 3 && wire == 2) {  // normalizer_spec: add_dummy_prefix 3, remove_extra_whitespaces 4
            pb_for_each_field(payload, [&](uint32_t f, uint32_t w, std::string_view v, std::string_view) {
                uint64_t x = 0;
                size_t pos = 0;
                if (w != 0 || !pb_read_varint(v, &pos, &x)) return;
                if (f == 3) dummy_prefix = x != 0;
                if (f == 4) extra_whitespaces = x != 0;
            });
        }
    });
    if (!ok || tokens.empty()) throw MoeError(std::string(source) + ": not a SentencePiece model");
    std::vector<GgufKeyValue> kv = {
        {"tokenizer.ggml.model", "llama"},     {"tokenizer.ggml.tokens", tokens},
        {"tokenizer.ggml.scores", scores},     {"tokenizer.ggml.token_type", types},
        {std::string(KEY_BOS), uint32_t(bos)}, {std::string(KEY_EOS), uint32_t(eos)},
    };
    if (unk >= 0) kv.push_back({std::string(KEY_UNK), uint32_t(unk)});
    if (pad >= 0) kv.push_back({std::string(KEY_PAD), uint32_t(pad)});
    kv.push_back({std::string(KEY_ADD_BOS), true});
    kv.push_back({"tokenizer.ggml.add_eos_token", false});
    kv.push_back({std::string(KEY_SPACE_PREFIX), dummy_prefix});
    kv.push_back({std::string(KEY_EXTRA_SPACES), extra_whitespaces});
    return kv;
}

std::vector<GgufKeyValue> gguf_bpe_tokenizer_metadata(const nlohmann::json& doc, std::string_view source, int bos,
                                                      int eos) {
    const std::string where(source);
    auto bad = [&](const std::string& key, const std::string& what) -> MoeError {
        return MoeError(where + ": " + key + ": " + what);
    };
    const nlohmann::json* model = doc.is_object() && doc.contains("model") ? &doc["model"] : nullptr;
    if (!model || !model->is_object() || model->value("type", "") != "BPE")
        throw bad("model.type", "not a BPE model (a GGUF gpt2 vocabulary is byte-level BPE)");
    const nlohmann::json& vocab = (*model)["vocab"];
    if (!vocab.is_object() || vocab.empty()) throw bad("model.vocab", "missing or empty");
    // Tokens by id: the vocabulary, then the added tokens (which may repeat vocabulary entries).
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    auto place = [&](const std::string& text, const nlohmann::json& id_json, int32_t type, const std::string& key) {
        if (!id_json.is_number_unsigned()) throw bad(key, "id of '" + printable(text) + "' is not a whole number");
        const uint64_t id = id_json.get<uint64_t>();
        if (id >= (uint64_t(1) << 24)) throw bad(key, "id " + std::to_string(id) + " is too large");
        if (id >= tokens.size()) {
            tokens.resize(size_t(id) + 1);
            types.resize(size_t(id) + 1, 0);
        }
        tokens[size_t(id)] = text;
        types[size_t(id)] = type;
    };
    for (const auto& [text, id] : vocab.items()) place(text, id, NORMAL, "model.vocab");
    if (const auto added = doc.find("added_tokens"); added != doc.end() && added->is_array())
        for (const nlohmann::json& a : *added) {
            if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id"))
                throw bad("added_tokens", "an entry without content and id");
            place(a["content"].get<std::string>(), a["id"], a.value("special", false) ? CONTROL : USER_DEFINED,
                  "added_tokens");
        }
    for (size_t i = 0; i < tokens.size(); i++)
        if (types[i] == 0) throw bad("model.vocab", "no token has id " + std::to_string(i));
    std::vector<std::string> merges;
    for (const nlohmann::json& m : model->value("merges", nlohmann::json::array())) {
        if (m.is_string())
            merges.push_back(m.get<std::string>());
        else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
            merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        else
            throw bad("model.merges", "a merge that is neither \"a b\" nor [\"a\", \"b\"]");
    }
    // The pre-tokenizer as llama.cpp names it: its Split regexes in order,
    // and ByteLevel's own (GPT-2) regex when it uses one.
    Regexes splits;
    bool byte_level_regex = false;
    const nlohmann::json pre = doc.value("pre_tokenizer", nlohmann::json());
    const nlohmann::json steps = pre.is_object() && pre.value("type", "") == "Sequence"
                                     ? pre.value("pretokenizers", nlohmann::json::array())
                                     : nlohmann::json::array({pre});
    for (const nlohmann::json& step : steps) {
        const std::string type = step.is_object() ? step.value("type", "") : "";
        if (type == "ByteLevel")
            byte_level_regex = step.value("use_regex", true);
        else if (type == "Split" && step.contains("pattern") && step["pattern"].contains("Regex"))
            splits.push_back(step["pattern"]["Regex"].get<std::string>());
        else
            throw bad("pre_tokenizer", "step '" + type + "' has no llama.cpp pre-tokenizer name");
    }
    std::string pre_name;
    for (const char* name : {"gpt-2", "llama-bpe", "qwen2", "qwen35", "gpt-4o", "deepseek-llm", "deepseek-v3"})
        if (*bpe_pre_regexes(name) == splits && byte_level_regex == splits.empty()) pre_name = name;
    if (pre_name.empty()) throw bad("pre_tokenizer", "its regexes are not those of a pre-tokenizer llama.cpp names");
    std::vector<GgufKeyValue> kv = {
        {std::string(KEY_MODEL), "gpt2"},        {std::string(KEY_PRE), pre_name},
        {std::string(KEY_TOKENS), tokens},       {std::string(KEY_TYPES), types},
        {std::string(KEY_MERGES), merges},       {std::string(KEY_BOS), uint32_t(bos)},
        {std::string(KEY_EOS), uint32_t(eos)},   {std::string(KEY_ADD_BOS), false},
        {"tokenizer.ggml.add_eos_token", false},
    };
    return kv;
}

void gguf_pad_vocabulary(std::vector<GgufKeyValue>& kv, int vocab_size) {
    auto find = [&](std::string_view key) -> GgufValue* {
        for (GgufKeyValue& e : kv)
            if (e.key == key) return &e.value;
        return nullptr;
    };
    GgufValue* tokens = find(KEY_TOKENS);
    if (!tokens || int(tokens->items().size()) >= vocab_size) return;
    const size_t have = tokens->items().size();
    auto padded = [&](const GgufValue& v, auto make) {
        std::vector<GgufValue> items = v.items();
        for (size_t id = have; id < size_t(vocab_size); id++) items.push_back(make(id));
        return GgufValue::array(v.elem_type(), std::move(items));
    };
    *tokens = padded(*tokens, [](size_t id) { return GgufValue("[PAD" + std::to_string(id) + "]"); });
    if (GgufValue* types = find(KEY_TYPES)) *types = padded(*types, [](size_t) { return GgufValue(int32_t(UNUSED)); });
    if (GgufValue* scores = find(KEY_SCORES)) *scores = padded(*scores, [](size_t) { return GgufValue(0.0f); });
}
