// Flag parsing for the CLI (see args.h).
#include "apps/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "base/errors.h"

Args::Args(std::vector<std::string> args) : words_(std::move(args)), used_(words_.size(), false) {}

std::optional<std::string> Args::get(const std::string& name) {
    std::vector<std::string> all = get_all(name);
    if (all.empty()) return std::nullopt;
    return all.back();
}

std::vector<std::string> Args::get_all(const std::string& name) {
    std::vector<std::string> values;
    for (size_t i = 0; i < words_.size(); i++) {
        if (used_[i]) continue;
        const std::string& w = words_[i];
        if (w == name) {
            if (i + 1 >= words_.size()) throw MoeError(name + ": missing value");
            used_[i] = used_[i + 1] = true;
            values.push_back(words_[i + 1]);
            i++;
        } else if (w.size() > name.size() && w.compare(0, name.size(), name) == 0 && w[name.size()] == '=') {
            used_[i] = true;
            values.push_back(w.substr(name.size() + 1));
        }
    }
    return values;
}

std::string Args::get(const std::string& name, const std::string& fallback) {
    auto v = get(name);
    return v ? *v : fallback;
}

std::string Args::required(const std::string& name, const std::string& context) {
    auto v = get(name);
    if (!v) throw MoeError(context + name + " is required");
    return *v;
}

std::optional<long> Args::integer(const std::string& text) {
    errno = 0;
    char* end = nullptr;
    long x = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE) return std::nullopt;
    return x;
}

std::optional<double> Args::number(const std::string& text) {
    char* end = nullptr;
    double x = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(x)) return std::nullopt;
    return x;
}

namespace {

// x (parsed from a flag's text, nullopt when it did not parse) within [min, max].
template <typename T>
T checked(const std::string& name, const std::string& text, std::optional<T> x, T min, T max, const char* expected) {
    if (!x) throw MoeError(name + ": expected " + expected + ", got '" + text + "'");
    if (*x < min || *x > max)
        throw MoeError(name + ": " + text + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) +
                       "]");
    return *x;
}

}  // namespace

long Args::get_int(const std::string& name, long fallback, long min, long max) {
    auto v = get(name);
    return v ? checked(name, *v, integer(*v), min, max, "an integer") : fallback;
}

double Args::get_double(const std::string& name, double fallback, double min, double max) {
    auto v = get(name);
    return v ? checked(name, *v, number(*v), min, max, "a number") : fallback;
}

bool Args::flag(const std::string& name) {
    bool seen = false;
    for (size_t i = 0; i < words_.size(); i++)
        if (!used_[i] && words_[i] == name) used_[i] = seen = true;
    return seen;
}

bool Args::has(const std::string& name) const {
    for (size_t i = 0; i < words_.size(); i++) {
        const std::string& w = words_[i];
        if (!used_[i] && (w == name || (w.size() > name.size() && w.compare(0, name.size(), name) == 0 &&
                                        w[name.size()] == '=')))
            return true;
    }
    return false;
}

void Args::finish() const {
    for (size_t i = 0; i < words_.size(); i++)
        if (!used_[i])
            throw MoeError(words_[i].rfind("--", 0) == 0 ? "unknown flag " + words_[i]
                                                         : "unexpected argument '" + words_[i] + "'");
}
