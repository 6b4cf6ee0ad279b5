// GGUF reading and writing (gguf.h). One bounds-checked little-endian
// reader walks the header for validation, and again over one value's bytes
// for the typed accessors; counts are bounded by the bytes left before
// anything is reserved. Tensor data is never copied on reading; writing
// streams it into a temporary file that is renamed over the target.
#include "engine/formats/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include "base/errors.h"
#include "base/files.h"

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMaxType = uint32_t(GgufType::FLOAT64);
constexpr int kMaxDims = 4;                                  // ggml's GGML_MAX_DIMS
constexpr size_t kMaxNameBytes = 63;                         // ggml's GGML_MAX_NAME less its terminating zero
constexpr int kMaxNesting = 16;                              // arrays of arrays deeper than this are refused
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // key length, type, a one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, one ne, type, offset
constexpr uint64_t kDefaultAlignment = 32;

// Bytes of one value of a fixed-size type; 0 for STRING and ARRAY.
uint64_t fixed_size(GgufType t) {
    switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL:
        return 1;
    case GgufType::UINT16:
    case GgufType::INT16:
        return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32:
        return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64:
        return 8;
    case GgufType::STRING:
    case GgufType::ARRAY:
        return 0;
    }
    return 0;
}

// The fewest bytes one value of type t takes: a string its length, an array
// its element type and count.
uint64_t min_size(GgufType t) {
    return t == GgufType::STRING ? 8 : t == GgufType::ARRAY ? 12 : fixed_size(t);
}

bool is_integer(GgufType t) {
    switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::UINT16:
    case GgufType::INT16:
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::UINT64:
    case GgufType::INT64:
        return true;
    default:
        return false;
    }
}

bool is_signed(GgufType t) {
    return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64;
}

uint64_t align_up(uint64_t n, uint64_t alignment) {
    return n + (alignment - n % alignment) % alignment;
}

bool power_of_two(uint64_t n) {
    return n != 0 && (n & (n - 1)) == 0;
}

// A value of fixed-size type t from its little-endian bits.
GgufValue scalar_value(GgufType t, uint64_t bits) {
    switch (t) {
    case GgufType::UINT8:
        return GgufValue(uint8_t(bits));
    case GgufType::INT8:
        return GgufValue(int8_t(bits));
    case GgufType::UINT16:
        return GgufValue(uint16_t(bits));
    case GgufType::INT16:
        return GgufValue(int16_t(bits));
    case GgufType::UINT32:
        return GgufValue(uint32_t(bits));
    case GgufType::INT32:
        return GgufValue(int32_t(bits));
    case GgufType::UINT64:
        return GgufValue(bits);
    case GgufType::INT64:
        return GgufValue(int64_t(bits));
    case GgufType::FLOAT32:
        return GgufValue(std::bit_cast<float>(uint32_t(bits)));
    case GgufType::FLOAT64:
        return GgufValue(std::bit_cast<double>(bits));
    case GgufType::BOOL:
        return GgufValue(bits != 0);
    case GgufType::STRING:
    case GgufType::ARRAY:
        break;
    }
    return GgufValue();
}

// The little-endian bits of a value of fixed-size type (the inverse of scalar_value).
uint64_t scalar_bits(const GgufValue& v) {
    switch (v.type()) {
    case GgufType::FLOAT32:
        return std::bit_cast<uint32_t>(float(v.as_float()));
    case GgufType::FLOAT64:
        return std::bit_cast<uint64_t>(v.as_float());
    default:
        return is_signed(v.type()) ? uint64_t(v.as_signed()) : v.as_unsigned();
    }
}

// Reads the bytes of one header (or one value) in order. Every read is
// bounded by `bytes` (the head that was read, at most the file); a read past
// it fails naming the file, `what` (a key, a tensor) and whether the file
// ends there or only the bytes read do.
class Reader {
public:
    Reader(std::string_view bytes, uint64_t file_size, const std::string& file)
        : bytes_(bytes), file_size_(file_size), file_(file) {}

    uint64_t pos() const { return pos_; }
    uint64_t left() const { return bytes_.size() - pos_; }

    // n bytes of a fixed-size field.
    std::string_view take(uint64_t n, std::string_view what) {
        if (n > left()) need_items(n, 1, what, "truncated header: " + std::to_string(n) + " bytes");
        std::string_view s = bytes_.substr(pos_, n);
        pos_ += n;
        return s;
    }
    uint64_t le(uint64_t n, std::string_view what) {
        std::string_view s = take(n, what);
        uint64_t v = 0;
        for (uint64_t i = n; i-- > 0;) v = (v << 8) | uint8_t(s[i]);
        return v;
    }
    uint32_t u32(std::string_view what) { return uint32_t(le(4, what)); }
    uint64_t u64(std::string_view what) { return le(8, what); }

    // A string: its 8-byte length, then that many bytes.
    std::string_view string(std::string_view what) {
        uint64_t n = u64(what);
        if (n > left()) need_items(n, 1, what, "string of " + std::to_string(n) + " bytes");
        std::string_view s = bytes_.substr(pos_, n);
        pos_ += n;
        return s;
    }

    // Checks that `count` items of at least min_bytes each can follow, before
    // anything is reserved for them; else MoeError "FILE: WHAT: THING at
    // offset P would run past the end of the file (S bytes)" (or "past the N
    // bytes read" when only the head given ends there).
    void need_items(uint64_t count, uint64_t min_bytes, std::string_view what, const std::string& thing) {
        if (count <= left() / min_bytes) return;
        const uint64_t at = pos_;
        const bool file_ends = at > file_size_ || count > (file_size_ - at) / min_bytes;
        fail(what, thing + " at offset " + std::to_string(at) + " would run past the " +
                       (file_ends ? "end of the file (" + std::to_string(file_size_) + " bytes)"
                                  : std::to_string(bytes_.size()) + " bytes read"));
    }

    [[noreturn]] void fail(std::string_view what, const std::string& problem) const {
        throw MoeError(file_ + ": " + printable(what) + ": " + problem);
    }

private:
    std::string_view bytes_;
    uint64_t file_size_;
    const std::string& file_;
    uint64_t pos_ = 0;
};

// "uint32", "an array of string".
std::string describe(GgufType type, GgufType elem) {
    return type == GgufType::ARRAY ? "an array of " + gguf_type_name(elem) : gguf_type_name(type);
}

// Reads one value of `type` at r, checking it; decodes it into *out when out
// is not null. depth counts the arrays around it.
void read_value(Reader& r, GgufType type, std::string_view what, int depth, GgufValue* out) {
    if (type == GgufType::STRING) {
        std::string_view s = r.string(what);
        if (out) *out = GgufValue(s);
        return;
    }
    if (type != GgufType::ARRAY) {
        uint64_t bits = r.le(fixed_size(type), what);
        if (type == GgufType::BOOL && bits > 1) r.fail(what, "bool value " + std::to_string(bits) + " is not 0 or 1");
        if (out) *out = scalar_value(type, bits);
        return;
    }
    uint32_t elem_id = r.u32(what);
    if (elem_id > kMaxType) r.fail(what, "array of unknown value type " + std::to_string(elem_id));
    const GgufType elem = GgufType(elem_id);
    if (elem == GgufType::ARRAY && depth + 1 >= kMaxNesting)
        r.fail(what, "arrays nested more than " + std::to_string(kMaxNesting) + " deep");
    uint64_t count = r.u64(what);
    if (count > r.left() / min_size(elem))
        r.need_items(count, min_size(elem), what,
                     "array of " + std::to_string(count) + " " + gguf_type_name(elem) + (fixed_size(elem) ? "" : "s"));
    std::vector<GgufValue> items;
    if (out) items.resize(count);
    if (!out && fixed_size(elem) && elem != GgufType::BOOL) {
        r.take(count * fixed_size(elem), what);  // bounded by need_items
    } else {
        for (uint64_t i = 0; i < count; ++i) read_value(r, elem, what, depth + 1, out ? &items[i] : nullptr);
    }
    if (out) *out = GgufValue::array(elem, std::move(items));
}

// Appends v's little-endian bytes.
void put_le(std::string& out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out += char((v >> (8 * i)) & 0xff);
}

void put_string(std::string& out, std::string_view s) {
    put_le(out, s.size(), 8);
    out += s;
}

// Appends a value (not its type); `where` names it in errors, depth counts
// the arrays around it.
void put_value(std::string& out, const GgufValue& v, const std::string& where, int depth) {
    if (v.type() == GgufType::STRING) {
        put_string(out, v.as_string());
    } else if (v.type() == GgufType::ARRAY) {
        if (uint32_t(v.elem_type()) > kMaxType)
            throw MoeError(where + ": array of unknown value type " + std::to_string(uint32_t(v.elem_type())));
        if (v.elem_type() == GgufType::ARRAY && depth + 1 >= kMaxNesting)
            throw MoeError(where + ": arrays nested more than " + std::to_string(kMaxNesting) + " deep");
        put_le(out, uint32_t(v.elem_type()), 4);
        put_le(out, v.items().size(), 8);
        for (size_t i = 0; i < v.items().size(); ++i) {
            const GgufValue& item = v.items()[i];
            if (item.type() != v.elem_type())
                throw MoeError(where + ": array element " + std::to_string(i) + " is " + gguf_type_name(item.type()) +
                               ", not " + gguf_type_name(v.elem_type()));
            put_value(out, item, where, depth + 1);
        }
    } else {
        put_le(out, scalar_bits(v), int(fixed_size(v.type())));
    }
}

void write_zeros(std::ostream& out, uint64_t n) {
    static const char zeros[4096] = {};
    for (; n > 0; n -= std::min<uint64_t>(n, sizeof zeros))
        out.write(zeros, std::streamsize(std::min<uint64_t>(n, sizeof zeros)));
}

// Every ggml type moe-server reads, in DType order: "F32 F16 BF16 ...".
std::string supported_types() {
    std::vector<DType> types;
    for (uint32_t id = 0; id < 256; ++id)
        if (std::optional<DType> d = dtype_from_ggml(id)) types.push_back(*d);
    std::sort(types.begin(), types.end());
    std::string s;
    for (DType d : types) {
        if (!s.empty()) s += ' ';
        s += dtype_name(d);
    }
    return s;
}

// Reads and checks one tensor info; the offset goes to *offset.
TensorView read_tensor_info(Reader& r, size_t index, const std::string& file, uint64_t* offset) {
    TensorView t;
    t.file = file;
    t.name = std::string(r.string("tensor info " + std::to_string(index)));
    const std::string& name = t.name;
    uint32_t n_dims = r.u32(name);
    if (n_dims == 0 || n_dims > uint32_t(kMaxDims))
        r.fail(name, "n_dims " + std::to_string(n_dims) + " is not 1 to " + std::to_string(kMaxDims));
    std::vector<uint64_t> ne(n_dims);
    for (size_t i = 0; i < ne.size(); ++i) {
        ne[i] = r.u64(name);
        const std::string dim = "ne[" + std::to_string(i) + "] is " + std::to_string(ne[i]);
        if (ne[i] == 0) r.fail(name, dim + " (a dimension must be at least 1)");
        if (ne[i] > uint64_t(INT64_MAX)) r.fail(name, dim + " (more than 2^63 - 1)");
    }
    uint32_t type_id = r.u32(name);
    *offset = r.u64(name);
    std::optional<DType> dtype = dtype_from_ggml(type_id);
    if (!dtype) {
        const char* ggml_name = ggml_type_name(type_id);
        r.fail(name, ggml_name
                         ? "type " + std::string(ggml_name) + " is not supported (supported: " + supported_types() + ")"
                         : "unknown type id " + std::to_string(type_id));
    }
    t.dtype = *dtype;
    t.shape.assign(ne.rbegin(), ne.rend());
    int64_t elements = 1;
    for (uint64_t d : ne)
        if (__builtin_mul_overflow(elements, int64_t(d), &elements))
            r.fail(name, "shape " + tensor_shape_string(t.shape) + " is too large");
    t.nbytes = tensor_nbytes(t.dtype, t.shape, file + ": " + printable(name));
    return t;
}

std::string range_string(uint64_t begin, uint64_t end) {
    return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

std::string gguf_type_name(GgufType type) {
    static const char* const kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                         "bool",  "string", "array",  "uint64", "int64",  "float64"};
    uint32_t id = uint32_t(type);
    return id <= kMaxType ? kNames[id] : "type " + std::to_string(id);
}

GgufValue GgufValue::array(GgufType elem, std::vector<GgufValue> items) {
    GgufValue v;
    v.type_ = GgufType::ARRAY;
    v.elem_ = elem;
    v.v_ = std::move(items);
    return v;
}

// ---- metadata ---------------------------------------------------------------

void GgufMetadata::add(const GgufKv& kv) {
    if (!index_.emplace(kv.key, kvs_.size()).second)
        throw MoeError(file_ + ": " + printable(kv.key) + ": duplicate key");
    kvs_.push_back(kv);
}

const GgufKv* GgufMetadata::find(std::string_view key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &kvs_[it->second];
}

void GgufMetadata::missing(std::string_view key) const {
    throw MoeError(file_ + ": " + printable(key) + ": missing key");
}

namespace {

// A reader over one entry's value, past an array's element type and count.
Reader value_reader(const GgufKv& kv, const std::string& file) {
    Reader r(kv.bytes, kv.bytes.size(), file);
    if (kv.type == GgufType::ARRAY) r.take(12, kv.key);
    return r;
}

bool is_float(GgufType t) {
    return t == GgufType::FLOAT32 || t == GgufType::FLOAT64;
}

double read_float(Reader& r, GgufType t, std::string_view what) {
    uint64_t bits = r.le(fixed_size(t), what);
    return t == GgufType::FLOAT32 ? double(std::bit_cast<float>(uint32_t(bits))) : std::bit_cast<double>(bits);
}

}  // namespace

const GgufKv* GgufMetadata::find_typed(std::string_view key, bool array, bool (*ok)(GgufType),
                                       const char* wanted) const {
    const GgufKv* kv = find(key);
    if (!kv) return nullptr;
    const bool good =
        array ? kv->type == GgufType::ARRAY && ok(kv->elem_type) : kv->type != GgufType::ARRAY && ok(kv->type);
    if (!good)
        throw MoeError(file_ + ": " + printable(kv->key) + ": is " + describe(kv->type, kv->elem_type) + ", not " +
                       wanted);
    return kv;
}

std::optional<GgufValue> GgufMetadata::find_value(std::string_view key) const {
    const GgufKv* kv = find(key);
    if (!kv) return std::nullopt;
    Reader r(kv->bytes, kv->bytes.size(), file_);
    GgufValue v;
    read_value(r, kv->type, kv->key, 0, &v);
    return v;
}

std::vector<GgufKeyValue> GgufMetadata::values() const {
    std::vector<GgufKeyValue> out;
    out.reserve(kvs_.size());
    for (const GgufKv& kv : kvs_) out.push_back({std::string(kv.key), *find_value(kv.key)});
    return out;
}

std::optional<std::string_view> GgufMetadata::find_string(std::string_view key) const {
    const GgufKv* kv = find_typed(
        key, false, [](GgufType t) { return t == GgufType::STRING; }, "a string");
    if (!kv) return std::nullopt;
    return value_reader(*kv, file_).string(kv->key);
}

std::optional<double> GgufMetadata::find_float(std::string_view key) const {
    const GgufKv* kv = find_typed(key, false, is_float, "a float");
    if (!kv) return std::nullopt;
    Reader r = value_reader(*kv, file_);
    return read_float(r, kv->type, kv->key);
}

std::optional<bool> GgufMetadata::find_bool(std::string_view key) const {
    const GgufKv* kv = find_typed(
        key, false, [](GgufType t) { return t == GgufType::BOOL; }, "a bool");
    if (!kv) return std::nullopt;
    return value_reader(*kv, file_).le(1, kv->key) != 0;
}

std::optional<std::vector<std::string_view>> GgufMetadata::find_strings(std::string_view key) const {
    const GgufKv* kv = find_typed(
        key, true, [](GgufType t) { return t == GgufType::STRING; }, "an array of strings");
    if (!kv) return std::nullopt;
    Reader r = value_reader(*kv, file_);
    std::vector<std::string_view> out(kv->count);  // the count was bounded by the file when parsed
    for (std::string_view& s : out) s = r.string(kv->key);
    return out;
}

std::optional<std::vector<float>> GgufMetadata::find_floats(std::string_view key) const {
    const GgufKv* kv = find_typed(key, true, is_float, "an array of floats");
    if (!kv) return std::nullopt;
    Reader r = value_reader(*kv, file_);
    std::vector<float> out(kv->count);
    for (float& f : out) f = float(read_float(r, kv->elem_type, kv->key));
    return out;
}

std::optional<std::vector<uint64_t>> GgufMetadata::find_int_bits(std::string_view key, bool array, int64_t lo,
                                                                 uint64_t hi) const {
    const GgufKv* kv = find_typed(key, array, is_integer, array ? "an array of integers" : "an integer");
    if (!kv) return std::nullopt;
    const GgufType t = array ? kv->elem_type : kv->type;
    const uint64_t n = fixed_size(t);
    Reader r = value_reader(*kv, file_);
    std::vector<uint64_t> out(kv->count);
    for (size_t i = 0; i < out.size(); ++i) {
        uint64_t bits = r.le(n, kv->key);
        if (is_signed(t)) bits = uint64_t(int64_t(bits << (64 - 8 * n)) >> (64 - 8 * n));  // sign-extended
        const bool negative = is_signed(t) && int64_t(bits) < 0;
        if (negative ? int64_t(bits) < lo : bits > hi)
            throw MoeError(file_ + ": " + printable(kv->key) + ": " +
                           (array ? "element " + std::to_string(i) + " " : std::string()) + "value " +
                           (negative ? std::to_string(int64_t(bits)) : std::to_string(bits)) + " is out of range [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
        out[i] = bits;
    }
    return out;
}

// ---- header -----------------------------------------------------------------

GgufHeader gguf_parse_header(std::string_view head, uint64_t file_size, const std::string& file) {
    if (head.size() > file_size) head = head.substr(0, file_size);
    Reader r(head, file_size, file);
    GgufHeader h;
    h.metadata.file_ = file;

    std::string_view magic = r.take(4, "magic");
    if (magic != "GGUF") throw MoeError(file + ": not a GGUF file (magic '" + printable(magic) + "', expected 'GGUF')");
    h.version = r.u32("version");
    if (h.version != 2 && h.version != 3) {
        const uint32_t swapped = __builtin_bswap32(h.version);
        if (swapped >= 1 && swapped <= 3)
            throw MoeError(file + ": big-endian GGUF (version " + std::to_string(swapped) +
                           ") is not supported; only little-endian files are");
        throw MoeError(file + ": GGUF version " + std::to_string(h.version) +
                       " is not supported (versions 2 and 3 are)");
    }
    const uint64_t n_tensors = r.u64("tensor count");
    const uint64_t n_kv = r.u64("metadata KV count");
    r.need_items(n_kv, kMinKvBytes, "metadata KV count",
                 std::to_string(n_kv) + " metadata KVs (" + std::to_string(kMinKvBytes) + " bytes or more each)");
    r.need_items(
        n_tensors, kMinTensorInfoBytes, "tensor count",
        std::to_string(n_tensors) + " tensor infos (" + std::to_string(kMinTensorInfoBytes) + " bytes or more each)");

    for (uint64_t i = 0; i < n_kv; ++i) {
        GgufKv kv;
        kv.key = r.string("metadata KV " + std::to_string(i) + " key");
        uint32_t type = r.u32(kv.key);
        if (type > kMaxType) r.fail(kv.key, "unknown value type " + std::to_string(type));
        kv.type = GgufType(type);
        const uint64_t start = r.pos();
        read_value(r, kv.type, kv.key, 0, nullptr);
        kv.bytes = head.substr(start, r.pos() - start);
        if (kv.type == GgufType::ARRAY) {
            Reader a(kv.bytes, kv.bytes.size(), file);
            kv.elem_type = GgufType(a.u32(kv.key));
            kv.count = a.u64(kv.key);
        }
        h.metadata.add(kv);
    }
    if (const GgufKv* kv = h.metadata.find("general.alignment")) {
        if (kv->type != GgufType::UINT32)
            throw MoeError(file + ": general.alignment: is " + describe(kv->type, kv->elem_type) + ", not uint32");
        h.alignment = h.metadata.get_int<uint32_t>("general.alignment");
        if (!power_of_two(h.alignment))
            throw MoeError(file + ": general.alignment: " + std::to_string(h.alignment) + " is not a power of two");
    }

    h.tensors.reserve(n_tensors);  // bounded by the bytes read above
    h.offsets.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        uint64_t offset = 0;
        TensorView t = read_tensor_info(r, i, file, &offset);
        if (!h.index.emplace(t.name, h.tensors.size()).second) r.fail(t.name, "duplicate tensor name");
        h.tensors.push_back(std::move(t));
        h.offsets.push_back(offset);
    }

    h.data_start = align_up(r.pos(), h.alignment);
    const uint64_t data_size = file_size > h.data_start ? file_size - h.data_start : 0;
    struct Span {
        uint64_t begin, end;
        size_t tensor;
    };
    std::vector<Span> spans;
    spans.reserve(h.tensors.size());
    for (size_t i = 0; i < h.tensors.size(); ++i) {
        const TensorView& t = h.tensors[i];
        const uint64_t begin = h.offsets[i];
        const std::string where = file + ": " + printable(t.name) + ": ";
        if (begin % h.alignment != 0)
            throw MoeError(where + "offset " + std::to_string(begin) + " is not a multiple of the alignment " +
                           std::to_string(h.alignment));
        if (t.nbytes > data_size || begin > data_size - t.nbytes)
            throw MoeError(where + "data at offset " + std::to_string(begin) + " (" + std::to_string(t.nbytes) +
                           " bytes) runs past the end of the file (the data section holds " +
                           std::to_string(data_size) + " bytes from byte " + std::to_string(h.data_start) +
                           "; truncated file?)");
        spans.push_back({begin, begin + t.nbytes, i});
    }
    // Sorted by begin, each span must end before the next starts (every span is non-empty).
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < spans.size(); ++i) {
        const Span& a = spans[i - 1];
        const Span& b = spans[i];
        if (b.begin < a.end)
            throw MoeError(file + ": " + printable(h.tensors[b.tensor].name) + ": data " +
                           range_string(b.begin, b.end) + " overlaps tensor '" + printable(h.tensors[a.tensor].name) +
                           "' " + range_string(a.begin, a.end));
    }
    return h;
}

// ---- file -------------------------------------------------------------------

GgufFile::GgufFile(const fs::path& path) : path_(path), map_(path) {
    std::string_view bytes = map_.bytes();
    header_ = gguf_parse_header(bytes, bytes.size(), path.string());
    for (size_t i = 0; i < header_.tensors.size(); ++i)
        header_.tensors[i].data = bytes.data() + header_.data_start + header_.offsets[i];
}

const TensorView* GgufFile::find(std::string_view name) const {
    auto it = header_.index.find(name);
    return it == header_.index.end() ? nullptr : &header_.tensors[it->second];
}

const TensorView& GgufFile::tensor(std::string_view name) const {
    const TensorView* t = find(name);
    if (!t) throw MoeError(path_.string() + ": " + printable(name) + ": tensor missing");
    return *t;
}

// ---- writing ----------------------------------------------------------------

void gguf_write(const fs::path& path, const std::vector<GgufKeyValue>& metadata, const std::vector<TensorView>& tensors,
                const GgufDataWriter& data) {
    const std::string who = "gguf_write: " + path.string();
    std::string header = "GGUF";
    put_le(header, 3, 4);
    put_le(header, tensors.size(), 8);
    put_le(header, metadata.size(), 8);

    uint64_t alignment = kDefaultAlignment;
    std::set<std::string_view> keys;
    for (const GgufKeyValue& kv : metadata) {
        const std::string where = who + ": " + printable(kv.key);
        if (!keys.insert(kv.key).second) throw MoeError(where + ": duplicate key");
        if (kv.key == "general.alignment") {
            if (kv.value.type() != GgufType::UINT32)
                throw MoeError(where + ": is " + describe(kv.value.type(), kv.value.elem_type()) + ", not uint32");
            alignment = kv.value.as_unsigned();
            if (!power_of_two(alignment))
                throw MoeError(where + ": " + std::to_string(alignment) + " is not a power of two");
        }
        put_string(header, kv.key);
        put_le(header, uint32_t(kv.value.type()), 4);
        put_value(header, kv.value, where, 0);
    }

    std::set<std::string_view> names;
    uint64_t offset = 0;
    for (const TensorView& t : tensors) {
        const std::string where = who + ": " + printable(t.name);
        if (!names.insert(t.name).second) throw MoeError(where + ": duplicate tensor name");
        if (t.name.size() > kMaxNameBytes)
            throw MoeError(where + ": name of " + std::to_string(t.name.size()) + " bytes is longer than " +
                           std::to_string(kMaxNameBytes));
        if (t.shape.empty() || t.shape.size() > size_t(kMaxDims))
            throw MoeError(where + ": shape " + tensor_shape_string(t.shape) + " has not 1 to " +
                           std::to_string(kMaxDims) + " dimensions");
        for (int64_t d : t.shape)
            if (d <= 0) throw MoeError(where + ": shape " + tensor_shape_string(t.shape) + " has a dimension below 1");
        const size_t n = tensor_nbytes(t.dtype, t.shape, where);
        if (t.nbytes != n || (!data && !t.data))
            throw MoeError(where + ": nbytes " + std::to_string(t.nbytes) + " does not match " + dtype_name(t.dtype) +
                           " " + tensor_shape_string(t.shape) + " (" + std::to_string(n) + " bytes)" +
                           (t.data || data ? "" : " or data is null"));
        put_string(header, t.name);
        put_le(header, t.shape.size(), 4);
        for (size_t i = t.shape.size(); i-- > 0;) put_le(header, uint64_t(t.shape[i]), 8);
        put_le(header, dtype_info(t.dtype).ggml_id, 4);
        put_le(header, offset, 8);
        offset = align_up(offset + n, alignment);
    }

    file_write_atomic_stream(path, [&](std::ostream& out) {
        out.write(header.data(), std::streamsize(header.size()));
        write_zeros(out, align_up(header.size(), alignment) - header.size());
        for (size_t i = 0; i < tensors.size(); ++i) {
            const TensorView& t = tensors[i];
            if (data) {
                const std::streamoff before = out.tellp();
                data(i, out);
                const std::streamoff wrote = out.tellp() - before;
                if (out && wrote != std::streamoff(t.nbytes))
                    throw MoeError(who + ": " + printable(t.name) + ": the data writer wrote " + std::to_string(wrote) +
                                   " bytes, not " + std::to_string(t.nbytes));
            } else {
                out.write(static_cast<const char*>(t.data), std::streamsize(t.nbytes));
            }
            write_zeros(out, align_up(t.nbytes, alignment) - t.nbytes);
        }
    });
}
