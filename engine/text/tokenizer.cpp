// Tokenizer and Detokenizer: loads a SentencePiece model through
// libsentencepiece, turns text into ids and ids back into text, keeps the
// bytes every id stands for, and streams decoded text without ever splitting
// a UTF-8 character. It must not know chat formats: text given to encode() is
// plain text and never becomes a control id; special ids come from callers.
//
// add_dummy_prefix: SentencePiece applies the dummy prefix ("▁" before the
// text) in the model's normalizer. To switch it per call, a second processor
// is loaded from the same bytes with NormalizerSpec.add_dummy_prefix flipped
// (a protobuf field appended to the serialized model; protobuf merges it into
// the existing normalizer_spec), so both settings are SentencePiece's own.
//
// Decoding follows SentencePiece 0.1.97 exactly (checked against it in the
// tests): control ids give nothing, <unk> gives the unk surface " ⁇ ", a run
// of byte pieces is decoded as UTF-8 with one U+FFFD per byte that does not
// start a valid character, and the first piece that is neither control nor
// byte loses its leading "▁" when nothing was output before it.
#include "engine/text/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <system_error>

#include "engine/text/protobuf_wire.h"
#include "profiles/errors.h"
#include "profiles/files.h"

namespace {

constexpr std::string_view SPACE_SYMBOL = "\xE2\x96\x81";      // "▁" U+2581
constexpr std::string_view REPLACEMENT_CHAR = "\xEF\xBF\xBD";  // U+FFFD

// ModelProto.normalizer_spec (field 3) . add_dummy_prefix (field 3, default true).
// Repeated occurrences of a message field merge, so the last value wins.
bool model_add_dummy_prefix(std::string_view model) {
    bool value = true;
    pb_for_each_field(model, [&](uint32_t field, uint32_t wire, std::string_view payload, std::string_view) {
        if (field != 3 || wire != 2) return;
        pb_for_each_field(payload, [&](uint32_t f, uint32_t w, std::string_view v, std::string_view) {
            uint64_t x = 0;
            size_t pos = 0;
            if (f == 3 && w == 0 && pb_read_varint(v, &pos, &x)) value = x != 0;
        });
    });
    return value;
}

// The serialized model with normalizer_spec.add_dummy_prefix set to `value`
// and without self_test_data (field 4): its samples were made with the
// original normalizer and would fail SentencePiece's load-time self test.
std::string model_with_dummy_prefix(std::string_view model, bool value) {
    std::string out;
    out.reserve(model.size() + 4);
    // Well formed: checked by the caller.
    pb_for_each_field(model, [&](uint32_t field, uint32_t, std::string_view, std::string_view raw) {
        if (field != 4) out.append(raw);
    });
    // normalizer_spec (field 3) { add_dummy_prefix (field 3) }, merged into the one before
    std::string normalizer;
    pb_put_varint_field(&normalizer, 3, value);
    pb_put_bytes_field(&out, 3, normalizer);
    return out;
}

std::string status_text(const sentencepiece::util::Status& status) {
    const std::string message = status.message();
    // libsentencepiece reports a protobuf failure as a source location.
    if (message.find("ParseFromArray") != std::string::npos) return "cannot parse the protobuf data";
    return message.empty() ? status.ToString() : message;
}

// ---- UTF-8 ------------------------------------------------------------------

enum class Utf8Head { COMPLETE, INCOMPLETE, INVALID };

// Classifies the character that starts s (non-empty) by the rules of
// Unicode Table 3-7 (no overlongs, no surrogates, nothing above U+10FFFF):
// COMPLETE (*len bytes), INCOMPLETE (a valid prefix that needs more bytes),
// INVALID (s[0] can never start a character here).
Utf8Head utf8_head(std::string_view s, size_t* len) {
    const auto b0 = static_cast<uint8_t>(s[0]);
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 < 0x80) {
        *len = 1;
        return Utf8Head::COMPLETE;
    } else if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return Utf8Head::INVALID;
    }
    for (size_t i = 1; i < need; ++i) {
        if (i >= s.size()) return Utf8Head::INCOMPLETE;
        const auto b = static_cast<uint8_t>(s[i]);
        const uint8_t min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xBF;
        if (b < min || b > max) return Utf8Head::INVALID;
    }
    *len = need;
    return Utf8Head::COMPLETE;
}

// "<0xAB>" -> 0xAB; -1 when the piece is not in that form.
int byte_piece_value(std::string_view piece) {
    if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
    int value = 0;
    for (char c : piece.substr(3, 2)) {
        value *= 16;
        if (c >= '0' && c <= '9')
            value += c - '0';
        else if (c >= 'A' && c <= 'F')
            value += c - 'A' + 10;
        else if (c >= 'a' && c <= 'f')
            value += c - 'a' + 10;
        else
            return -1;
    }
    return value;
}

std::string replace_space_symbol(std::string_view piece) {
    std::string out;
    out.reserve(piece.size());
    for (size_t i = 0; i < piece.size();) {
        if (piece.substr(i, SPACE_SYMBOL.size()) == SPACE_SYMBOL) {
            out += ' ';
            i += SPACE_SYMBOL.size();
        } else {
            out += piece[i++];
        }
    }
    return out;
}

}  // namespace

// ---- Tokenizer --------------------------------------------------------------

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
    const std::filesystem::file_type type = file_type_at(path);
    if (type == std::filesystem::file_type::not_found) throw MoeError(path.string() + ": tokenizer model not found");
    if (type != std::filesystem::file_type::regular)
        throw MoeError(path.string() + ": tokenizer model is not a regular file");
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && !in.eof()) throw MoeError(path.string() + ": cannot read the tokenizer model");
    return from_bytes(bytes, path.string());
}

Tokenizer Tokenizer::from_bytes(std::string_view serialized, std::string_view source) {
    const std::string where(source);
    if (serialized.empty()) throw MoeError(where + ": not a SentencePiece model: the file is empty");

    Tokenizer tok;
    tok.source_ = where;
    tok.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    if (const auto status = tok.sp_->LoadFromSerializedProto(serialized); !status.ok())
        throw MoeError(where + ": not a SentencePiece model: " + status_text(status));
    const int n = tok.sp_->GetPieceSize();
    if (n <= 0) throw MoeError(where + ": not a SentencePiece model: no pieces");
    // model_with_dummy_prefix() walks the fields and relies on this.
    if (!pb_for_each_field(serialized, [](uint32_t, uint32_t, std::string_view, std::string_view) {}))
        throw MoeError(where + ": not a SentencePiece model: malformed protobuf data");

    tok.model_dummy_prefix_ = model_add_dummy_prefix(serialized);
    tok.sp_flipped_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const std::string flipped = model_with_dummy_prefix(serialized, !tok.model_dummy_prefix_);
    if (const auto status = tok.sp_flipped_->LoadFromSerializedProto(flipped); !status.ok())
        throw MoeError(where + ": not a SentencePiece model: " + status_text(status));

    tok.bytes_.resize(n);
    tok.kinds_.resize(n);
    tok.space_first_.resize(n);
    for (int id = 0; id < n; ++id) {
        const std::string& piece = tok.sp_->IdToPiece(id);
        if (tok.sp_->IsControl(id)) {
            tok.kinds_[id] = PieceKind::CONTROL;
        } else if (tok.sp_->IsUnknown(id)) {
            tok.kinds_[id] = PieceKind::UNKNOWN;
            // The unk surface lives in the trainer spec; decoding <unk> alone yields it.
            tok.sp_->Decode(std::vector<int>{id}, &tok.bytes_[id]);
        } else if (tok.sp_->IsByte(id)) {
            const int value = byte_piece_value(piece);
            if (value < 0) throw MoeError(where + ": byte piece " + std::to_string(id) + " is not <0xNN>: " + piece);
            tok.kinds_[id] = PieceKind::BYTE;
            tok.bytes_[id] = std::string(1, static_cast<char>(value));
        } else {
            tok.kinds_[id] = PieceKind::NORMAL;
            tok.bytes_[id] = replace_space_symbol(piece);
            tok.space_first_[id] = piece.starts_with(SPACE_SYMBOL);
        }
    }
    return tok;
}

void Tokenizer::check_id(int id) const {
    if (id < 0 || id >= vocab_size())
        throw MoeError(source_ + ": token id " + std::to_string(id) + " is outside the vocabulary (size " +
                       std::to_string(vocab_size()) + ")");
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_dummy_prefix) const {
    const auto& sp = add_dummy_prefix == model_dummy_prefix_ ? *sp_ : *sp_flipped_;
    std::vector<int> ids;
    if (const auto status = sp.Encode(text, &ids); !status.ok())
        throw MoeError(source_ + ": cannot encode text: " + status_text(status));
    return ids;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
    for (int id : ids) check_id(id);
    std::string text;
    if (const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text); !status.ok())
        throw MoeError(source_ + ": cannot decode ids: " + status_text(status));
    return text;
}

int Tokenizer::vocab_size() const {
    return static_cast<int>(kinds_.size());
}
int Tokenizer::bos_id() const {
    return sp_->bos_id();
}
int Tokenizer::eos_id() const {
    return sp_->eos_id();
}

int Tokenizer::piece_to_id(std::string_view piece) const {
    // SentencePiece answers unk_id for an unknown piece; only "<unk>" itself maps there.
    const int id = sp_->PieceToId(piece);
    if (id < 0 || id >= vocab_size()) return -1;
    return sp_->IdToPiece(id) == piece ? id : -1;
}

std::string Tokenizer::id_to_piece(int id) const {
    check_id(id);
    return sp_->IdToPiece(id);
}

bool Tokenizer::is_control(int id) const {
    return id >= 0 && id < vocab_size() && kinds_[id] == PieceKind::CONTROL;
}
bool Tokenizer::is_byte(int id) const {
    return id >= 0 && id < vocab_size() && kinds_[id] == PieceKind::BYTE;
}
bool Tokenizer::is_unknown(int id) const {
    return id >= 0 && id < vocab_size() && kinds_[id] == PieceKind::UNKNOWN;
}

std::string Tokenizer::token_bytes(int id) const {
    check_id(id);
    return bytes_[id];
}

// ---- Detokenizer ------------------------------------------------------------

Detokenizer::Detokenizer(const Tokenizer& tokenizer, bool strip_leading_space)
    : tokenizer_(&tokenizer), strip_(strip_leading_space) {}

std::string Detokenizer::drain(bool end_of_run) {
    std::string out;
    size_t pos = 0;
    while (pos < pending_.size()) {
        size_t len = 0;
        const Utf8Head head = utf8_head(std::string_view(pending_).substr(pos), &len);
        if (head == Utf8Head::COMPLETE) {
            out.append(pending_, pos, len);
            pos += len;
        } else if (head == Utf8Head::INVALID || end_of_run) {
            out += REPLACEMENT_CHAR;
            pos += 1;
        } else {
            break;  // a valid start: wait for the rest of the character
        }
    }
    pending_.erase(0, pos);
    return out;
}

std::string Detokenizer::push(int id) {
    tokenizer_->check_id(id);
    using Kind = Tokenizer::PieceKind;
    const Kind kind = tokenizer_->kinds_[id];
    if (kind == Kind::CONTROL) return {};
    const std::string& bytes = tokenizer_->bytes_[id];
    if (kind == Kind::BYTE) {
        pending_ += bytes;
        at_start_ = false;  // a byte always yields output, so no later piece is first
        return drain(false);
    }
    std::string out = drain(true);
    if (at_start_ && strip_ && tokenizer_->space_first_[id]) {
        out.append(bytes, 1);
    } else {
        out += bytes;
    }
    at_start_ = false;
    return out;
}

std::string Detokenizer::flush() {
    return drain(true);
}

void Detokenizer::reset(bool strip_leading_space) {
    pending_.clear();
    strip_ = strip_leading_space;
    at_start_ = true;
}
