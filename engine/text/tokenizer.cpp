// Tokenizer and Detokenizer: the shared vocabulary table (each id's piece,
// kind and bytes), added tokens matched in text before a backend sees it,
// decoding and streaming decoded text without ever splitting a UTF-8
// character; and the SentencePiece backend, through libsentencepiece. It must
// not know chat formats: text given to encode() is plain text and never
// becomes a special id unless the caller asks; special ids come from callers.
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
// byte loses its leading "▁" when nothing was output before it. Other
// backends decode through the same table (the Detokenizer's rules), with
// byte-level vocabularies joining every token's bytes before UTF-8 decoding.
#include "engine/text/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cctype>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <system_error>
#include <unordered_map>

#include "base/errors.h"
#include "base/files.h"
#include "base/utf8.h"
#include "engine/text/protobuf_wire.h"

namespace {

constexpr std::string_view SPACE_SYMBOL = "\xE2\x96\x81";  // "▁" U+2581

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

// ---- SentencePiece backend ----------------------------------------------------

namespace {

class SentencePieceModel final : public TokenizerModel {
public:
    SentencePieceModel(std::string source, std::unique_ptr<sentencepiece::SentencePieceProcessor> sp,
                       std::unique_ptr<sentencepiece::SentencePieceProcessor> flipped, bool model_dummy_prefix)
        : source_(std::move(source)),
          sp_(std::move(sp)),
          sp_flipped_(std::move(flipped)),
          model_dummy_prefix_(model_dummy_prefix) {}

    // A text after a matched added token gets no dummy prefix.
    void encode(std::string_view text, bool at_start, bool add_dummy_prefix, std::vector<int>* ids) const override {
        const bool prefix = add_dummy_prefix && at_start;
        const auto& sp = prefix == model_dummy_prefix_ ? *sp_ : *sp_flipped_;
        std::vector<int> part;
        if (const auto status = sp.Encode(text, &part); !status.ok())
            throw MoeError(source_ + ": cannot encode text: " + status_text(status));
        ids->insert(ids->end(), part.begin(), part.end());
    }

    std::optional<std::string> decode(std::span<const int> ids) const override {
        std::string text;
        if (const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text); !status.ok())
            throw MoeError(source_ + ": cannot decode ids: " + status_text(status));
        return text;
    }

private:
    std::string source_;
    // The model as stored: decode().
    std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
    // The same model with the normalizer's add_dummy_prefix flipped, so
    // encode() can honour both settings; which one sp_ has is model_dummy_prefix_.
    std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_flipped_;
    bool model_dummy_prefix_ = true;
};

bool is_space_byte(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_word_byte(char c) {
    const auto b = static_cast<unsigned char>(c);
    return b >= 0x80 || std::isalnum(b) || c == '_';
}

}  // namespace

std::optional<std::string> TokenizerModel::decode(std::span<const int>) const {
    return std::nullopt;
}

// ---- Tokenizer --------------------------------------------------------------

// piece -> id, and the added tokens as a byte trie (longest match at a position).
struct Tokenizer::Index {
    std::unordered_map<std::string_view, int> piece_ids;  // views into vocab_.pieces
    struct Node {
        std::unordered_map<unsigned char, int> next;
        int added = -1;  // index into vocab_.added of the token ending here
    };
    std::vector<Node> trie{Node{}};
    bool has_plain = false;    // a non-special added token (matched in any text)
    bool has_special = false;  // a special one (matched with SpecialTokens::PARSE)
};

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

    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    if (const auto status = sp->LoadFromSerializedProto(serialized); !status.ok())
        throw MoeError(where + ": not a SentencePiece model: " + status_text(status));
    const int n = sp->GetPieceSize();
    if (n <= 0) throw MoeError(where + ": not a SentencePiece model: no pieces");
    // model_with_dummy_prefix() walks the fields and relies on this.
    if (!pb_for_each_field(serialized, [](uint32_t, uint32_t, std::string_view, std::string_view) {}))
        throw MoeError(where + ": not a SentencePiece model: malformed protobuf data");

    const bool model_dummy_prefix = model_add_dummy_prefix(serialized);
    auto flipped = std::make_unique<sentencepiece::SentencePieceProcessor>();
    if (const auto status = flipped->LoadFromSerializedProto(model_with_dummy_prefix(serialized, !model_dummy_prefix));
        !status.ok())
        throw MoeError(where + ": not a SentencePiece model: " + status_text(status));

    TokenizerVocab v;
    v.pieces.resize(n);
    v.bytes.resize(n);
    v.kinds.resize(n);
    v.space_first.resize(n);
    v.bos = sp->bos_id();
    v.eos = sp->eos_id();
    for (int id = 0; id < n; ++id) {
        const std::string& piece = sp->IdToPiece(id);
        v.pieces[id] = piece;
        if (sp->IsControl(id)) {
            v.kinds[id] = PieceKind::CONTROL;
            // Matched in text only when the caller parses specials.
            v.added.push_back(AddedToken{piece, id, true});
        } else if (sp->IsUnknown(id)) {
            v.kinds[id] = PieceKind::UNKNOWN;
            // The unk surface lives in the trainer spec; decoding <unk> alone yields it.
            sp->Decode(std::vector<int>{id}, &v.bytes[id]);
        } else if (sp->IsByte(id)) {
            const int value = byte_piece_value(piece);
            if (value < 0) throw MoeError(where + ": byte piece " + std::to_string(id) + " is not <0xNN>: " + piece);
            v.kinds[id] = PieceKind::BYTE;
            v.bytes[id] = std::string(1, static_cast<char>(value));
        } else {
            v.kinds[id] = PieceKind::NORMAL;
            v.bytes[id] = replace_space_symbol(piece);
            v.space_first[id] = piece.starts_with(SPACE_SYMBOL);
        }
    }
    return from_parts(
        where, std::move(v),
        std::make_unique<SentencePieceModel>(where, std::move(sp), std::move(flipped), model_dummy_prefix));
}

Tokenizer Tokenizer::from_parts(std::string source, TokenizerVocab vocab, std::unique_ptr<const TokenizerModel> model) {
    const size_t n = vocab.pieces.size();
    if (n == 0 || vocab.bytes.size() != n || vocab.kinds.size() != n || vocab.space_first.size() != n)
        throw MoeError(source + ": tokenizer vocabulary tables of unequal lengths or empty");
    for (int id : {vocab.bos, vocab.eos})
        if (id < -1 || id >= int(n))
            throw MoeError(source + ": special id " + std::to_string(id) + " is outside the vocabulary (size " +
                           std::to_string(n) + ")");
    Tokenizer tok;
    tok.source_ = std::move(source);
    tok.vocab_ = std::move(vocab);
    tok.model_ = std::move(model);
    tok.index_vocab();
    return tok;
}

void Tokenizer::index_vocab() {
    index_ = std::make_unique<Index>();
    index_->piece_ids.reserve(vocab_.pieces.size());
    for (size_t id = 0; id < vocab_.pieces.size(); ++id) index_->piece_ids.emplace(vocab_.pieces[id], int(id));
    auto& trie = index_->trie;
    for (size_t a = 0; a < vocab_.added.size(); ++a) {
        const AddedToken& t = vocab_.added[a];
        if (t.id < 0 || t.id >= vocab_size())
            throw MoeError(source_ + ": added token '" + t.content + "' has id " + std::to_string(t.id) +
                           ", outside the vocabulary");
        if (t.content.empty()) continue;
        (t.special ? index_->has_special : index_->has_plain) = true;
        int node = 0;
        for (char c : t.content) {
            const auto [it, added] = trie[node].next.emplace(static_cast<unsigned char>(c), int(trie.size()));
            if (added) trie.emplace_back();
            node = it->second;
        }
        // The first of two equal contents wins (as a map from content would).
        if (trie[node].added < 0) trie[node].added = int(a);
    }
}

void Tokenizer::check_id(int id) const {
    if (id < 0 || id >= vocab_size())
        throw MoeError(source_ + ": token id " + std::to_string(id) + " is outside the vocabulary (size " +
                       std::to_string(vocab_size()) + ")");
}

WorkLimits tokenize_limits(size_t text_bytes) {
    WorkLimits limits;
    limits.max_steps = 1'000'000 + 64 * uint64_t(text_bytes);
    limits.max_bytes = (uint64_t(4) << 20) + 256 * uint64_t(text_bytes);
    limits.max_buffer_bytes = (uint64_t(1) << 20) + 16 * uint64_t(text_bytes);
    limits.max_time = std::chrono::seconds(30);
    return limits;
}

void Tokenizer::encode_parts(std::string_view text, bool add_dummy_prefix, bool allow_special,
                             std::vector<int>* ids) const {
    WorkBudget budget(tokenize_limits(text.size()), "tokenizing");
    WorkBudget::Scope scope(budget);
    try {
        encode_segments(text, add_dummy_prefix, allow_special, ids);
    } catch (const WorkBudgetError& e) {
        throw WorkBudgetError(source_ + ": " + e.what(), e.end);
    }
}

void Tokenizer::encode_segments(std::string_view text, bool add_dummy_prefix, bool allow_special,
                                std::vector<int>* ids) const {
    const auto& trie = index_->trie;
    size_t seg = 0;  // start of the text not yet encoded
    const auto flush = [&](size_t end) {
        if (end > seg) model_->encode(text.substr(seg, end - seg), seg == 0, add_dummy_prefix, ids);
    };
    const bool match = index_->has_plain || (allow_special && index_->has_special);
    for (size_t pos = 0; match && pos < text.size();) {
        // The longest allowed added token starting at pos.
        int best = -1;
        size_t best_len = 0;
        int node = 0;
        for (size_t i = pos; i < text.size(); ++i) {
            const auto it = trie[node].next.find(static_cast<unsigned char>(text[i]));
            if (it == trie[node].next.end()) break;
            node = it->second;
            const int a = trie[node].added;
            if (a < 0 || (vocab_.added[a].special && !allow_special)) continue;
            const AddedToken& t = vocab_.added[a];
            if (t.single_word &&
                ((pos > 0 && is_word_byte(text[pos - 1])) || (i + 1 < text.size() && is_word_byte(text[i + 1]))))
                continue;
            best = a;
            best_len = i + 1 - pos;
        }
        work_charge_steps(1 + best_len / 16);
        if (best < 0) {
            ++pos;
            continue;
        }
        const AddedToken& t = vocab_.added[best];
        size_t end = pos;
        if (t.lstrip)
            while (end > seg && is_space_byte(text[end - 1])) --end;
        flush(end);
        ids->push_back(t.id);
        pos += best_len;
        if (t.rstrip)
            while (pos < text.size() && is_space_byte(text[pos])) ++pos;
        seg = pos;
    }
    flush(text.size());
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_dummy_prefix, SpecialTokens specials) const {
    std::vector<int> ids;
    encode_parts(text, add_dummy_prefix, specials == SpecialTokens::PARSE, &ids);
    return ids;
}

std::string Tokenizer::decode(std::span<const int> ids) const {
    size_t bytes = 0;
    for (int id : ids) {
        check_id(id);
        bytes += vocab_.bytes[id].size();
    }
    // The text is about `bytes` long (the model's own decoding may differ a little).
    WorkBudget budget(tokenize_limits(bytes), "decoding");
    WorkBudget::Scope scope(budget);
    try {
        budget.grow(0, bytes);
        if (std::optional<std::string> text = model_->decode(ids)) return std::move(*text);
        Detokenizer detok(*this, true);
        std::string text;
        for (int id : ids) text += detok.push(id);
        text += detok.flush();
        return text;
    } catch (const WorkBudgetError& e) {
        throw WorkBudgetError(source_ + ": " + e.what(), e.end);
    }
}

int Tokenizer::vocab_size() const {
    return static_cast<int>(vocab_.kinds.size());
}
int Tokenizer::bos_id() const {
    return vocab_.bos;
}
int Tokenizer::eos_id() const {
    return vocab_.eos;
}
int Tokenizer::prompt_bos() const {
    return vocab_.add_bos ? vocab_.bos : -1;
}

std::vector<int> Tokenizer::encode_prompt(std::string_view text) const {
    std::vector<int> ids;
    if (prompt_bos() >= 0) ids.push_back(prompt_bos());
    encode_parts(text, true, false, &ids);
    return ids;
}

int Tokenizer::piece_to_id(std::string_view piece) const {
    const auto it = index_->piece_ids.find(piece);
    return it == index_->piece_ids.end() ? -1 : it->second;
}

std::string Tokenizer::id_to_piece(int id) const {
    check_id(id);
    return vocab_.pieces[id];
}

bool Tokenizer::is_control(int id) const {
    return id >= 0 && id < vocab_size() && vocab_.kinds[id] == PieceKind::CONTROL;
}
bool Tokenizer::is_byte(int id) const {
    return id >= 0 && id < vocab_size() && vocab_.kinds[id] == PieceKind::BYTE;
}
bool Tokenizer::is_unknown(int id) const {
    return id >= 0 && id < vocab_size() && vocab_.kinds[id] == PieceKind::UNKNOWN;
}

std::string Tokenizer::token_bytes(int id) const {
    check_id(id);
    return vocab_.bytes[id];
}

// ---- Detokenizer ------------------------------------------------------------

Detokenizer::Detokenizer(const Tokenizer& tokenizer, bool strip_leading_space)
    : tokenizer_(&tokenizer), strip_(strip_leading_space) {}

std::string Detokenizer::drain(bool end_of_run) {
    // Before the end of a run, the start of a character waits for its rest.
    const size_t decided = pending_.size() - (end_of_run ? 0 : utf8_incomplete_tail(pending_));
    std::string out = utf8_sanitize(std::string_view(pending_).substr(0, decided));
    pending_.erase(0, decided);
    return out;
}

std::string Detokenizer::push(int id) {
    tokenizer_->check_id(id);
    const TokenizerVocab& v = tokenizer_->vocab_;
    const PieceKind kind = v.kinds[id];
    if (kind == PieceKind::CONTROL) return {};
    const std::string& bytes = v.bytes[id];
    if (kind == PieceKind::BYTE || (kind == PieceKind::NORMAL && v.byte_level)) {
        pending_ += bytes;
        at_start_ = false;  // bytes always yield output, so no later piece is first
        return drain(false);
    }
    std::string out = drain(true);
    if (at_start_ && strip_ && v.space_first[id]) {
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
