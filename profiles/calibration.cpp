// Calibration file schema, key, cache path, read / write / validate (see
// calibration.h). Every error is a MoeError that names the file and the
// field (dotted path, e.g. "cpu.points[3].ms").
#include "profiles/calibration.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <system_error>

#include "base/errors.h"
#include "base/files.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;  // written in schema order, for people reading the file

namespace {

// Characters outside [A-Za-z0-9.-] become '_', runs of '_' collapse, and no
// '_' leads or trails.
std::string sanitize(std::string_view s) {
    std::string out;
    for (char ch : s) {
        bool keep =
            (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '-';
        if (keep)
            out += ch;
        else if (!out.empty() && out.back() != '_')
            out += '_';
    }
    while (!out.empty() && out.back() == '_') out.pop_back();
    return out.empty() ? "unknown" : out;
}

// Reading: each getter names the field's dotted path in its error.
class Reader {
public:
    explicit Reader(std::string source) : source_(std::move(source)) {}

    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw MoeError(source_ + ": " + field + ": " + what);
    }
    const json& at(const json& obj, const std::string& parent, const char* name) const {
        if (!obj.is_object()) fail(parent.empty() ? "(top level)" : parent, "expected an object");
        auto it = obj.find(name);
        if (it == obj.end()) fail(path(parent, name), "missing");
        return *it;
    }
    double number(const json& obj, const std::string& parent, const char* name) const {
        return typed<double>(obj, parent, name, &json::is_number, "a number");
    }
    int integer(const json& obj, const std::string& parent, const char* name) const {
        int64_t v = typed<int64_t>(obj, parent, name, &json::is_number_integer, "an integer");
        if (v < INT32_MIN || v > INT32_MAX) fail(path(parent, name), std::to_string(v) + " is out of range");
        return int(v);
    }
    std::string string(const json& obj, const std::string& parent, const char* name) const {
        return typed<std::string>(obj, parent, name, &json::is_string, "a string");
    }
    bool boolean(const json& obj, const std::string& parent, const char* name) const {
        return typed<bool>(obj, parent, name, &json::is_boolean, "true or false");
    }
    LatencyCurve curve(const json& obj, const std::string& parent, const char* name) const {
        const json& c = at(obj, parent, name);
        const std::string field = path(parent, name);
        return {number(c, field, "fixed_ms"),    number(c, field, "stream_ms"), number(c, field, "per_token_ms"),
                integer(c, field, "large_from"), number(c, field, "pack_ms"),   number(c, field, "large_per_token_ms")};
    }
    std::vector<TimingPoint> points(const json& obj, const std::string& parent, const char* x_name) const {
        const json& arr = at(obj, parent, "points");
        std::string field = parent + ".points";
        if (!arr.is_array()) fail(field, "expected an array");
        std::vector<TimingPoint> out;
        for (size_t i = 0; i < arr.size(); i++) {
            std::string item = field + "[" + std::to_string(i) + "]";
            out.push_back({number(arr[i], item, x_name), number(arr[i], item, "ms")});
        }
        return out;
    }

private:
    static std::string path(const std::string& parent, const char* name) {
        return parent.empty() ? name : parent + "." + name;
    }
    // The field, when is_type says it has the right JSON type.
    template <class T>
    T typed(const json& obj, const std::string& parent, const char* name, bool (json::*is_type)() const noexcept,
            const char* expected) const {
        const json& v = at(obj, parent, name);
        if (!(v.*is_type)()) fail(path(parent, name), std::string("expected ") + expected);
        return v.get<T>();
    }

    std::string source_;
};

ordered_json curve_json(const LatencyCurve& c) {
    return {{"fixed_ms", c.fixed_ms},     {"stream_ms", c.stream_ms}, {"per_token_ms", c.per_token_ms},
            {"large_from", c.large_from}, {"pack_ms", c.pack_ms},     {"large_per_token_ms", c.large_per_token_ms}};
}

// Token counts are written as integers, byte counts as numbers.
ordered_json points_json(const std::vector<TimingPoint>& points, const char* x_name) {
    ordered_json arr = ordered_json::array();
    for (const TimingPoint& p : points) {
        ordered_json x = std::string(x_name) == "n" ? ordered_json(int64_t(p.x)) : ordered_json(p.x);
        arr.push_back({{x_name, x}, {"ms", p.ms}});
    }
    return arr;
}

// Field names are dotted paths into the file ("cpu.fixed_ms", "copy.points[2].ms").
void check_value(double v, const std::string& field, std::string_view source, bool positive) {
    if (!std::isfinite(v) || v < 0 || (positive && v == 0))
        throw MoeError(std::string(source) + ": " + field + ": " + std::to_string(v) +
                       (positive ? " (must be a positive number)" : " (must be a non-negative number)"));
}

void check_curve(const LatencyCurve& c, const std::string& field, std::string_view source) {
    check_value(c.fixed_ms, field + ".fixed_ms", source, false);
    check_value(c.stream_ms, field + ".stream_ms", source, false);
    check_value(c.per_token_ms, field + ".per_token_ms", source, false);
    check_value(c.large_from, field + ".large_from", source, false);
    check_value(c.pack_ms, field + ".pack_ms", source, false);
    check_value(c.large_per_token_ms, field + ".large_per_token_ms", source, false);
}

void check_points(const std::vector<TimingPoint>& points, const std::string& field, const char* x_name,
                  std::string_view source) {
    if (points.size() < 2)
        throw MoeError(std::string(source) + ": " + field + ": " + std::to_string(points.size()) +
                       " points (at least 2 needed)");
    for (size_t i = 0; i < points.size(); i++) {
        std::string item = field + "[" + std::to_string(i) + "]";
        check_value(points[i].x, item + "." + x_name, source, true);
        if (std::string_view(x_name) == "n" && points[i].x != std::floor(points[i].x))
            throw MoeError(std::string(source) + ": " + item + ".n: " + std::to_string(points[i].x) +
                           " (must be a whole number of tokens)");
        check_value(points[i].ms, item + ".ms", source, true);
    }
}

void check_text(const std::string& v, const char* field, std::string_view source) {
    if (v.empty()) throw MoeError(std::string(source) + ": " + field + ": empty");
}

}  // namespace

std::string calibration_key(std::string_view cpu_name, std::string_view isa, int threads, std::string_view device,
                            int dim, int hidden_dim, std::string_view dtype) {
    return sanitize(cpu_name) + "_" + sanitize(isa) + "_t" + std::to_string(threads) + "_" + sanitize(device) + "_" +
           std::to_string(dim) + "x" + std::to_string(hidden_dim) + "-" + sanitize(dtype);
}

std::string calibration_key(const Calibration& c) {
    return calibration_key(c.cpu_name, c.isa, c.threads, c.device_name, c.dim, c.hidden_dim, c.dtype);
}

fs::path calibration_cache_dir() {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    fs::path base;
    if (xdg && *xdg)
        base = xdg;
    else if (const char* home = std::getenv("HOME"); home && *home)
        base = fs::path(home) / ".cache";
    else
        base = fs::temp_directory_path();
    return base / "moe-server" / "calibration";
}

fs::path calibration_cache_path(std::string_view key) {
    return calibration_cache_dir() / (std::string(key) + ".json");
}

void calibration_validate(const Calibration& c, std::string_view source) {
    if (c.version != CALIBRATION_VERSION)
        throw MoeError(std::string(source) + ": version: " + std::to_string(c.version) + " (this build reads " +
                       std::to_string(CALIBRATION_VERSION) + ")");
    check_text(c.cpu_name, "cpu_name", source);
    check_text(c.isa, "isa", source);
    check_text(c.device_name, "device_name", source);
    check_text(c.dtype, "expert.dtype", source);
    if (c.threads < 1)
        throw MoeError(std::string(source) + ": threads: " + std::to_string(c.threads) + " (must be >= 1)");
    if (c.dim < 1 || c.hidden_dim < 1)
        throw MoeError(std::string(source) + ": expert: shape " + std::to_string(c.dim) + "x" +
                       std::to_string(c.hidden_dim) + " (both must be >= 1)");
    check_value(c.read_gbs, "ceiling.read_gbs", source, true);
    check_value(c.fma_gflops, "ceiling.fma_gflops", source, true);
    check_value(c.expert_bytes, "expert.bytes", source, true);
    check_value(c.expert_flops_per_token, "expert.flops_per_token", source, true);
    check_points(c.cpu_points, "cpu.points", "n", source);
    check_curve(c.cpu, "cpu", source);
    if (c.has_device) {
        check_points(c.device_points, "device.points", "n", source);
        check_curve(c.device, "device", source);
        check_points(c.copy_points, "copy.points", "bytes", source);
        check_value(c.copy.latency_ms, "copy.latency_ms", source, false);
        check_value(c.copy.bytes_per_ms, "copy.bytes_per_ms", source, true);
    }
    if (c.has_side_by_side) {
        if (!c.has_device) throw MoeError(std::string(source) + ": side_by_side: measured without a device");
        check_points(c.cpu_beside_copies_points, "side_by_side.cpu.points", "n", source);
        check_curve(c.cpu_beside_copies, "side_by_side.cpu", source);
        check_points(c.copy_beside_cpu_points, "side_by_side.copy.points", "bytes", source);
        check_value(c.copy_beside_cpu.latency_ms, "side_by_side.copy.latency_ms", source, false);
        check_value(c.copy_beside_cpu.bytes_per_ms, "side_by_side.copy.bytes_per_ms", source, true);
    }
}

Calibration calibration_read(const fs::path& path) {
    std::string source = path.string();
    json j = file_read_json(path);
    Reader r(source);
    Calibration c;
    c.version = r.integer(j, "", "version");
    if (c.version != CALIBRATION_VERSION) calibration_validate(c, source);  // names the version before any field
    c.cpu_name = r.string(j, "", "cpu_name");
    c.isa = r.string(j, "", "isa");
    c.threads = r.integer(j, "", "threads");
    c.device_name = r.string(j, "", "device_name");
    const json& expert = r.at(j, "", "expert");
    c.dim = r.integer(expert, "expert", "dim");
    c.hidden_dim = r.integer(expert, "expert", "hidden_dim");
    c.dtype = r.string(expert, "expert", "dtype");
    c.expert_bytes = r.number(expert, "expert", "bytes");
    c.expert_flops_per_token = r.number(expert, "expert", "flops_per_token");
    const json& ceiling = r.at(j, "", "ceiling");
    c.read_gbs = r.number(ceiling, "ceiling", "read_gbs");
    c.fma_gflops = r.number(ceiling, "ceiling", "fma_gflops");
    c.cpu = r.curve(j, "", "cpu");
    c.cpu_points = r.points(r.at(j, "", "cpu"), "cpu", "n");
    c.has_device = r.boolean(j, "", "has_device");
    if (c.has_device) {
        c.device = r.curve(j, "", "device");
        c.device_points = r.points(r.at(j, "", "device"), "device", "n");
        const json& copy = r.at(j, "", "copy");
        c.copy = {r.number(copy, "copy", "latency_ms"), r.number(copy, "copy", "bytes_per_ms")};
        c.copy_points = r.points(copy, "copy", "bytes");
    }
    // Optional (files of earlier builds have none).
    if (j.is_object() && j.contains("side_by_side")) {
        const json& side = r.at(j, "", "side_by_side");
        c.has_side_by_side = true;
        c.cpu_beside_copies = r.curve(side, "side_by_side", "cpu");
        c.cpu_beside_copies_points = r.points(r.at(side, "side_by_side", "cpu"), "side_by_side.cpu", "n");
        const json& copy = r.at(side, "side_by_side", "copy");
        c.copy_beside_cpu = {r.number(copy, "side_by_side.copy", "latency_ms"),
                             r.number(copy, "side_by_side.copy", "bytes_per_ms")};
        c.copy_beside_cpu_points = r.points(copy, "side_by_side.copy", "bytes");
    }
    calibration_validate(c, source);
    std::string key = r.string(j, "", "key");
    if (key != calibration_key(c))
        r.fail("key", "'" + key + "' does not match the key fields ('" + calibration_key(c) + "')");
    return c;
}

void calibration_write(const Calibration& c, const fs::path& path) {
    std::string source = path.string();
    calibration_validate(c, source);
    ordered_json j = {{"version", c.version},
                      {"key", calibration_key(c)},
                      {"cpu_name", c.cpu_name},
                      {"isa", c.isa},
                      {"threads", c.threads},
                      {"device_name", c.device_name},
                      {"expert",
                       {{"dim", c.dim},
                        {"hidden_dim", c.hidden_dim},
                        {"dtype", c.dtype},
                        {"bytes", c.expert_bytes},
                        {"flops_per_token", c.expert_flops_per_token}}},
                      {"ceiling", {{"read_gbs", c.read_gbs}, {"fma_gflops", c.fma_gflops}}},
                      {"has_device", c.has_device}};
    j["cpu"] = curve_json(c.cpu);
    j["cpu"]["points"] = points_json(c.cpu_points, "n");
    if (c.has_device) {
        j["device"] = curve_json(c.device);
        j["device"]["points"] = points_json(c.device_points, "n");
        j["copy"] = {{"latency_ms", c.copy.latency_ms}, {"bytes_per_ms", c.copy.bytes_per_ms}};
        j["copy"]["points"] = points_json(c.copy_points, "bytes");
    }
    if (c.has_side_by_side) {
        j["side_by_side"]["cpu"] = curve_json(c.cpu_beside_copies);
        j["side_by_side"]["cpu"]["points"] = points_json(c.cpu_beside_copies_points, "n");
        j["side_by_side"]["copy"] = {{"latency_ms", c.copy_beside_cpu.latency_ms},
                                     {"bytes_per_ms", c.copy_beside_cpu.bytes_per_ms}};
        j["side_by_side"]["copy"]["points"] = points_json(c.copy_beside_cpu_points, "bytes");
    }
    std::error_code ec;
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
    // Written whole to a temporary name, then renamed: a reader never sees half a file.
    file_write_atomic(path, j.dump(2) + "\n");
}

std::optional<Calibration> calibration_find_cached(std::string_view key) {
    fs::path path = calibration_cache_path(key);
    std::error_code ec;
    if (!fs::exists(path, ec)) return std::nullopt;
    Calibration c = calibration_read(path);
    if (calibration_key(c) != key)
        throw MoeError(path.string() + ": key: '" + calibration_key(c) + "' is not the key looked up ('" +
                       std::string(key) + "')");
    return c;
}
