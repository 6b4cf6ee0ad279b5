// GGUF files (versions 2 and 3, little-endian): memory-mapped, zero-copy.
// gguf_parse_header validates everything before anything is used: magic,
// version, every metadata key and value (all thirteen value types, arrays of
// any type, nested arrays included), every tensor info (name, dimensions,
// ggml type, offset) and general.alignment; each read is bounds-checked, each
// count bounded by the bytes left before anything is allocated. A failure is
// one MoeError line naming the file, the key or tensor, and what is wrong.
// GgufFile maps a file and hands out its tensors as TensorViews (row-major
// shape: ggml's ne reversed) pointing into the mapping, and its metadata
// through typed accessors. gguf_write writes a v3 file other readers load.
// Knows nothing about models: mapping GGUF names to a ModelConfig and
// weights, and the tokenizer, are the callers'.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "engine/formats/mapped_file.h"
#include "engine/formats/tensor_view.h"

struct GgufHeader;

// A metadata value's type, as GGUF numbers it.
enum class GgufType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

// "uint32", "string", "array", ...; "type 77" for a number GGUF does not define.
std::string gguf_type_name(GgufType type);

// A metadata value that owns its data: what gguf_write writes and what
// GgufMetadata::get_value decodes. Integers keep their GGUF width (the C++ type
// given picks it: uint8_t -> UINT8, int -> INT32, size_t -> UINT64, ...);
// an array holds elements of one type (arrays of arrays may differ inside).
class GgufValue {
public:
    GgufValue() : GgufValue(uint32_t(0)) {}
    GgufValue(uint8_t v) : type_(GgufType::UINT8), v_(uint64_t(v)) {}
    GgufValue(int8_t v) : type_(GgufType::INT8), v_(int64_t(v)) {}
    GgufValue(uint16_t v) : type_(GgufType::UINT16), v_(uint64_t(v)) {}
    GgufValue(int16_t v) : type_(GgufType::INT16), v_(int64_t(v)) {}
    GgufValue(uint32_t v) : type_(GgufType::UINT32), v_(uint64_t(v)) {}
    GgufValue(int32_t v) : type_(GgufType::INT32), v_(int64_t(v)) {}
    GgufValue(uint64_t v) : type_(GgufType::UINT64), v_(v) {}
    GgufValue(int64_t v) : type_(GgufType::INT64), v_(v) {}
    GgufValue(float v) : type_(GgufType::FLOAT32), v_(double(v)) {}
    GgufValue(double v) : type_(GgufType::FLOAT64), v_(v) {}
    GgufValue(bool v) : type_(GgufType::BOOL), v_(uint64_t(v)) {}
    GgufValue(std::string v) : type_(GgufType::STRING), v_(std::move(v)) {}
    GgufValue(std::string_view v) : GgufValue(std::string(v)) {}
    GgufValue(const char* v) : GgufValue(std::string(v)) {}
    // An array of elements of type elem (each element must be of that type).
    static GgufValue array(GgufType elem, std::vector<GgufValue> items);
    // An array of T, typed as GgufValue(T) is: {1.0f, 2.0f} -> array of
    // FLOAT32; a vector of vectors is an array of arrays.
    template <class T>
    GgufValue(const std::vector<T>& items) : type_(GgufType::ARRAY), elem_(GgufValue(T{}).type()) {
        static_assert(!std::is_same_v<T, GgufValue>, "an array of GgufValues is GgufValue::array(type, items)");
        std::vector<GgufValue> v;
        v.reserve(items.size());
        for (const T& x : items) v.emplace_back(x);
        v_ = std::move(v);
    }

    GgufType type() const { return type_; }
    GgufType elem_type() const { return elem_; }  // arrays only
    // The value of an unsigned integer type or a bool (0 or 1); of a signed
    // integer type; of a float type; a string; an array's elements. Asking
    // for the wrong kind throws std::bad_variant_access.
    uint64_t as_unsigned() const { return std::get<uint64_t>(v_); }
    int64_t as_signed() const { return std::get<int64_t>(v_); }
    double as_float() const { return std::get<double>(v_); }
    const std::string& as_string() const { return std::get<std::string>(v_); }
    const std::vector<GgufValue>& items() const { return std::get<std::vector<GgufValue>>(v_); }

    bool operator==(const GgufValue& other) const = default;

private:
    GgufType type_;
    GgufType elem_ = GgufType::UINT8;
    std::variant<uint64_t, int64_t, double, std::string, std::vector<GgufValue>> v_;
};

struct GgufKeyValue {
    std::string key;
    GgufValue value;
};

// One metadata entry as the header holds it. The views point into the
// header bytes given to gguf_parse_header (the mapping, for a GgufFile).
struct GgufKv {
    std::string_view key;
    GgufType type = GgufType::UINT8;
    GgufType elem_type = GgufType::UINT8;  // arrays: the elements' type
    uint64_t count = 1;                    // arrays: the number of elements (1 for a scalar)
    std::string_view bytes;                // the value as stored (an array's element type and count first)
};

// The metadata of one file: lookups by key, typed. Every accessor throws
// MoeError "FILE: KEY: what is wrong" for a value of the wrong type (or out
// of the range of the integer type asked for); get_* also for a missing key
// ("FILE: KEY: missing key"), where find_* return nullopt. Strings are views
// into the header bytes; arrays of strings cost one pass and no copies.
class GgufMetadata {
public:
    GgufMetadata() = default;

    // Entries in file order.
    const std::vector<GgufKv>& entries() const { return kvs_; }
    // nullptr when absent.
    const GgufKv* find(std::string_view key) const;
    bool contains(std::string_view key) const { return find(key) != nullptr; }

    std::optional<std::string_view> find_string(std::string_view key) const;
    std::optional<double> find_float(std::string_view key) const;  // FLOAT32 or FLOAT64
    std::optional<bool> find_bool(std::string_view key) const;
    // An integer of any integer type, in the range of T.
    template <class T = int64_t>
    std::optional<T> find_int(std::string_view key) const {
        std::optional<std::vector<T>> v = find_integers<T>(key, false);
        return v ? std::optional<T>((*v)[0]) : std::nullopt;
    }
    std::optional<std::vector<std::string_view>> find_strings(std::string_view key) const;
    std::optional<std::vector<float>> find_floats(std::string_view key) const;  // of FLOAT32 or FLOAT64
    // An array of any integer type, every element in the range of T.
    template <class T = int64_t>
    std::optional<std::vector<T>> find_ints(std::string_view key) const {
        return find_integers<T>(key, true);
    }
    // Any value, decoded into one that owns its data (nested arrays too).
    std::optional<GgufValue> find_value(std::string_view key) const;

    std::string_view get_string(std::string_view key) const { return need(key, find_string(key)); }
    double get_float(std::string_view key) const { return need(key, find_float(key)); }
    bool get_bool(std::string_view key) const { return need(key, find_bool(key)); }
    template <class T = int64_t>
    T get_int(std::string_view key) const {
        return need(key, find_int<T>(key));
    }
    std::vector<std::string_view> get_strings(std::string_view key) const { return need(key, find_strings(key)); }
    std::vector<float> get_floats(std::string_view key) const { return need(key, find_floats(key)); }
    template <class T = int64_t>
    std::vector<T> get_ints(std::string_view key) const {
        return need(key, find_ints<T>(key));
    }
    GgufValue get_value(std::string_view key) const { return need(key, find_value(key)); }
    // Every entry, decoded, in file order (to copy a file's metadata).
    std::vector<GgufKeyValue> values() const;

private:
    friend GgufHeader gguf_parse_header(std::string_view head, uint64_t file_size, const std::string& file);
    // Appends an entry; MoeError for a duplicate key.
    void add(const GgufKv& kv);
    // The entry of this key (nullptr when absent) after checking that its
    // type (for an array: its elements' type) is one `ok` accepts: else
    // MoeError "FILE: KEY: is TYPE, not WANTED".
    const GgufKv* find_typed(std::string_view key, bool array, bool (*ok)(GgufType), const char* wanted) const;
    template <class T>
    T need(std::string_view key, std::optional<T> v) const {
        if (!v) missing(key);
        return std::move(*v);
    }
    [[noreturn]] void missing(std::string_view key) const;
    // The integer (array: every element when `array`, else the scalar)
    // in the range of T, converted to T.
    template <class T>
    std::optional<std::vector<T>> find_integers(std::string_view key, bool array) const {
        static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
        std::optional<std::vector<uint64_t>> bits =
            find_int_bits(key, array, int64_t(std::numeric_limits<T>::min()), uint64_t(std::numeric_limits<T>::max()));
        return bits ? std::optional<std::vector<T>>(std::in_place, bits->begin(), bits->end()) : std::nullopt;
    }
    // The bits (two's complement) of each element, checked against [lo, hi].
    std::optional<std::vector<uint64_t>> find_int_bits(std::string_view key, bool array, int64_t lo, uint64_t hi) const;

    std::string file_;
    std::vector<GgufKv> kvs_;
    std::unordered_map<std::string_view, size_t> index_;
};

// A validated GGUF header. Tensors are in file order with null data
// pointers; offsets[i] is where tensors[i] begins in the data section, which
// starts data_start bytes into the file. The metadata views point into the
// bytes given to gguf_parse_header.
struct GgufHeader {
    uint32_t version = 0;
    uint64_t alignment = 32;  // general.alignment, else 32
    uint64_t data_start = 0;  // the end of the tensor infos rounded up to alignment
    GgufMetadata metadata;
    std::vector<TensorView> tensors;
    std::vector<uint64_t> offsets;
    std::map<std::string, size_t, std::less<>> index;  // name -> position in tensors
};

// Validates the head of a GGUF file of file_size bytes: `head` must hold
// at least the whole header (metadata and tensor infos; the data may be
// absent). Throws MoeError naming `file`. Reads nothing past head.
GgufHeader gguf_parse_header(std::string_view head, uint64_t file_size, const std::string& file);

// One mapped GGUF file. The mapping lives as long as the object.
class GgufFile {
public:
    explicit GgufFile(const std::filesystem::path& path);
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;

    const std::filesystem::path& path() const { return path_; }
    uint32_t version() const { return header_.version; }
    uint64_t alignment() const { return header_.alignment; }
    const GgufMetadata& metadata() const { return header_.metadata; }
    // In file order; data points into the mapping.
    const std::vector<TensorView>& tensors() const { return header_.tensors; }
    // nullptr when absent.
    const TensorView* find(std::string_view name) const;
    // MoeError "FILE: NAME: tensor missing" when absent.
    const TensorView& tensor(std::string_view name) const;

private:
    std::filesystem::path path_;
    MappedFile map_;
    GgufHeader header_;
};

// Writes tensor i's data (exactly tensors[i].nbytes bytes) to out.
using GgufDataWriter = std::function<void(size_t i, std::ostream& out)>;

// Writes a GGUF v3 file atomically (a temporary file beside the target,
// then a rename; a target that is not a regular file is refused): the
// metadata in the given order, the tensor infos (ne = shape reversed, 1 to 4
// dimensions), then each tensor's data at an offset aligned to
// general.alignment (a UINT32 power of two when given, else 32), padded to
// it. The data comes from each view's data pointer, or from `data` when one
// is given (a writer that streams, e.g. quantizes, tensor by tensor). Only
// name, dtype, shape and nbytes of the views are read otherwise. Throws
// MoeError "gguf_write: ..." for a duplicate key or tensor name, a name of
// 64 bytes or more (ggml's limit), a bad shape or alignment, an array
// element of the wrong type.
void gguf_write(const std::filesystem::path& path, const std::vector<GgufKeyValue>& metadata,
                const std::vector<TensorView>& tensors, const GgufDataWriter& data = {});
