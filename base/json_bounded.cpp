// The bounded JSON parse (see json_bounded.h): nlohmann's SAX parser (which
// does not recurse) feeds a builder that checks each limit before it builds
// the value that would pass it, and assembles arrays and objects bottom-up on
// its own stack, each finished value moved once into its parent.
#include "base/json_bounded.h"

#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

constexpr size_t PATH_KEY_BYTES = 64;     // of a key quoted in a path
constexpr size_t MESSAGE_PATH_BYTES = 160;  // of a path quoted in a message
constexpr size_t ERROR_BYTES = 300;    // of nlohmann's syntax error text
constexpr size_t SMALL_OBJECT = 16;    // members an ordered object finds by scanning; a hash index beyond

// nlohmann::ordered_json: objects are an ordered_map, a vector of members.
template <class Json>
inline constexpr bool IS_ORDERED = requires { typename Json::object_t::Container; };

template <class Json>
class BoundedBuilder {
public:
    using number_integer_t = typename Json::number_integer_t;
    using number_unsigned_t = typename Json::number_unsigned_t;
    using number_float_t = typename Json::number_float_t;
    using string_t = typename Json::string_t;
    using binary_t = typename Json::binary_t;

    BoundedBuilder(const JsonLimits& limits, const std::string& what) : limits_(limits), what_(what) {}

    bool null() { return value(Json(nullptr)); }
    bool boolean(bool b) { return value(Json(b)); }
    bool number_integer(number_integer_t x) { return value(Json(x)); }
    bool number_unsigned(number_unsigned_t x) { return value(Json(x)); }
    bool number_float(number_float_t x, const string_t&) { return value(Json(x)); }
    bool string(string_t& s) {
        if (s.size() > limits_.max_string_bytes) return string_too_long(s.size());
        return value(Json(std::move(s)));
    }
    bool binary(binary_t&) {  // only binary formats (CBOR ...) produce these, never JSON text
        return fail(JsonError::Kind::SYNTAX, "binary value");
    }
    bool start_object(std::size_t) { return open(nlohmann::detail::value_t::object); }
    bool start_array(std::size_t) { return open(nlohmann::detail::value_t::array); }
    bool end_object() { return close(); }
    bool end_array() { return close(); }
    bool key(string_t& k) {
        Level& l = stack_.back();
        if (k.size() > limits_.max_string_bytes) return string_too_long(k.size());
        if (members(l) >= limits_.max_keys)
            return fail(JsonError::Kind::KEYS,
                        "JSON object holds more than " + std::to_string(limits_.max_keys) + " keys, the limit");
        l.key = std::move(k);
        l.has_key = true;
        return true;
    }
    bool parse_error(std::size_t, const std::string& token, const nlohmann::detail::exception& e) {
        if (e.id == 406)  // a number out of a double's range
            return fail(JsonError::Kind::NUMBER,
                        "the number " + token.substr(0, PATH_KEY_BYTES) + " is outside the range of a double");
        std::string text = e.what();
        if (size_t at = text.find("] "); text.rfind("[json.exception.", 0) == 0 && at != std::string::npos)
            text = text.substr(at + 2);
        if (text.size() > ERROR_BYTES) text = text.substr(0, ERROR_BYTES) + "...";
        return fail(JsonError::Kind::SYNTAX, text);
    }

    const JsonError& error() const { return *error_; }
    size_t elements() const { return elements_; }
    Json take() { return std::move(root_); }

private:
    using Object = typename Json::object_t;
    using Array = typename Json::array_t;

    // An ordered object's members, as the vector they are.
    template <class O>
    static auto& members_of(O& object) {
        if constexpr (IS_ORDERED<Json>)
            return static_cast<typename O::Container&>(object);
        else
            return object;
    }
    using Members = std::remove_reference_t<decltype(members_of(std::declval<Object&>()))>;

    // Positions of an ordered object's members, hashed and compared by key.
    struct KeyHash {
        const Members* members;
        size_t operator()(size_t i) const { return std::hash<std::string_view>{}((*members)[i].first); }
    };
    struct KeyEqual {
        const Members* members;
        bool operator()(size_t a, size_t b) const { return (*members)[a].first == (*members)[b].first; }
    };
    using KeyIndex = std::unordered_set<size_t, KeyHash, KeyEqual>;

    // An array or object being built. Its Json owns the container on the
    // heap, so the index's pointer to it survives moves of the Level.
    struct Level {
        Json value;
        std::string key;  // object: the key of the member being read
        bool has_key = false;
        std::unique_ptr<KeyIndex> index;  // ordered objects beyond SMALL_OBJECT members
    };

    static size_t members(const Level& l) {
        return l.value.is_array() ? l.value.template get_ref<const Array&>().size()
                                  : l.value.template get_ref<const Object&>().size();
    }

    bool count() {
        if (++elements_ <= limits_.max_elements) return true;
        return fail(JsonError::Kind::ELEMENTS, "JSON holds more than " + std::to_string(limits_.max_elements) +
                                                   " elements (values, arrays and objects), the limit");
    }

    bool value(Json&& v) {
        if (!count()) return false;
        add(std::move(v));
        return true;
    }

    bool open(nlohmann::detail::value_t type) {
        if (!count()) return false;
        if (stack_.size() >= limits_.max_depth)
            return fail(JsonError::Kind::DEPTH, "JSON nests arrays and objects deeper than the limit of " +
                                                    std::to_string(limits_.max_depth) + " levels (nesting depth)");
        stack_.push_back(Level{Json(type), {}, false, nullptr});
        return true;
    }

    bool close() {
        Json done = std::move(stack_.back().value);
        stack_.pop_back();
        add(std::move(done));
        return true;
    }

    // v into the innermost open array or object, or as the document.
    void add(Json&& v) {
        if (stack_.empty()) {
            root_ = std::move(v);
            return;
        }
        Level& l = stack_.back();
        if (l.value.is_array()) {
            l.value.template get_ref<Array&>().push_back(std::move(v));
            return;
        }
        Object& object = l.value.template get_ref<Object&>();
        l.has_key = false;
        if constexpr (IS_ORDERED<Json>) {
            Members& m = members_of(object);
            m.emplace_back(std::move(l.key), std::move(v));
            l.key.clear();
            const size_t at = m.size() - 1;
            std::optional<size_t> first;
            if (l.index) {
                auto [it, inserted] = l.index->insert(at);
                if (!inserted) first = *it;
            } else {
                for (size_t i = 0; i < at && !first; i++)
                    if (m[i].first == m[at].first) first = i;
                if (!first && m.size() == SMALL_OBJECT) {
                    l.index = std::make_unique<KeyIndex>(2 * SMALL_OBJECT, KeyHash{&m}, KeyEqual{&m});
                    for (size_t i = 0; i < m.size(); i++) l.index->insert(i);
                }
            }
            if (first) {  // a repeated key: the last value, at the first one's place
                m[*first].second = std::move(m.back().second);
                m.pop_back();
            }
        } else {
            object.insert_or_assign(std::move(l.key), std::move(v));
            l.key.clear();
        }
    }

    bool string_too_long(size_t bytes) {
        return fail(JsonError::Kind::STRING, "JSON string of " + std::to_string(bytes) +
                                                 " bytes is longer than the limit of " +
                                                 std::to_string(limits_.max_string_bytes) + " bytes");
    }

    // "a.b[2]": the keys and indices of the value being read.
    std::string path() const {
        std::string out;
        for (size_t i = 0; i < stack_.size(); i++) {
            const Level& l = stack_[i];
            if (l.value.is_array()) {
                out += '[';
                out += std::to_string(members(l));
                out += ']';
            } else if (l.has_key) {
                if (!out.empty()) out += ".";
                out += l.key.substr(0, PATH_KEY_BYTES);
            }
        }
        return out;
    }

    bool fail(JsonError::Kind kind, std::string reason) {
        error_.emplace(kind, path(), std::move(reason), what_);
        return false;
    }

    const JsonLimits& limits_;
    const std::string& what_;
    std::vector<Level> stack_;
    Json root_;
    size_t elements_ = 0;
    std::optional<JsonError> error_;
};

}  // namespace

namespace {

std::string json_error_detail(JsonError::Kind kind, const std::string& path, const std::string& reason) {
    if (kind == JsonError::Kind::SYNTAX) return "not valid JSON: " + reason;
    if (path.empty()) return reason;
    return reason + ", at " + (path.size() > MESSAGE_PATH_BYTES ? path.substr(0, MESSAGE_PATH_BYTES) + "..." : path);
}

}  // namespace

JsonError::JsonError(Kind kind_, std::string path_, std::string reason_, const std::string& what)
    : MoeError(what + ": " + json_error_detail(kind_, path_, reason_)),
      kind(kind_),
      path(std::move(path_)),
      reason(std::move(reason_)),
      detail(json_error_detail(kind, path, reason)) {}

template <class Json>
Json json_parse_bounded(std::string_view text, const JsonLimits& limits, const std::string& what, size_t* elements) {
    if (text.size() > limits.max_bytes)
        throw JsonError(JsonError::Kind::BYTES, "",
                        "JSON text of " + std::to_string(text.size()) + " bytes is longer than the limit of " +
                            std::to_string(limits.max_bytes) + " bytes",
                        what);
    BoundedBuilder<Json> builder(limits, what);
    if (!Json::sax_parse(text.data(), text.data() + text.size(), &builder)) throw builder.error();
    if (elements) *elements = builder.elements();
    return builder.take();
}

template nlohmann::json json_parse_bounded<nlohmann::json>(std::string_view, const JsonLimits&, const std::string&,
                                                           size_t*);
template nlohmann::ordered_json json_parse_bounded<nlohmann::ordered_json>(std::string_view, const JsonLimits&,
                                                                           const std::string&, size_t*);

std::string json_path_join(const std::string& prefix, const std::string& path) {
    if (prefix.empty()) return path;
    if (path.empty()) return prefix;
    return prefix + (path[0] == '[' ? "" : ".") + path;
}
