// Whole-file reads and atomic writes (see files.h).
#include "base/files.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "base/errors.h"

namespace fs = std::filesystem;

namespace {

// The type of what is at path (lstat when follow is false); not_found for
// nothing, MoeError for any other failure.
fs::file_type type_at(const fs::path& path, bool follow) {
    std::error_code ec;
    fs::file_status s = follow ? fs::status(path, ec) : fs::symlink_status(path, ec);
    if (s.type() == fs::file_type::not_found) return s.type();
    if (ec) throw MoeError(path.string() + ": cannot access (" + ec.message() + ")");
    return s.type();
}

}  // namespace

fs::file_type file_type_at(const fs::path& path) {
    return type_at(path, true);
}

bool file_exists(const fs::path& path) {
    return file_type_at(path) != fs::file_type::not_found;
}

std::string file_read_text(const fs::path& path, size_t max_bytes) {
    if (file_type_at(path) == fs::file_type::directory) throw MoeError(path.string() + ": is a folder, not a file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw MoeError(path.string() + ": cannot open file (" + std::strerror(errno) + ")");
    std::string text;
    char buffer[1 << 16];
    while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
        if (size_t(in.gcount()) > max_bytes - text.size())
            throw MoeError(path.string() + ": larger than " + std::to_string(max_bytes) +
                           " bytes, the limit for this file");
        text.append(buffer, size_t(in.gcount()));
    }
    if (in.bad()) throw MoeError(path.string() + ": cannot read file");
    return text;
}

template <class Json>
Json file_read_json(const fs::path& path, const JsonLimits& limits) {
    return json_parse_bounded<Json>(file_read_text(path, limits.max_bytes), limits, path.string());
}

template nlohmann::json file_read_json<nlohmann::json>(const fs::path&, const JsonLimits&);
template nlohmann::ordered_json file_read_json<nlohmann::ordered_json>(const fs::path&, const JsonLimits&);

fs::path file_write_target(const fs::path& path) {
    if (path.empty()) throw MoeError("an empty path: no file to write");
    fs::path target = path;
    fs::file_type type = type_at(path, false);
    if (type == fs::file_type::symlink) {
        std::error_code ec;
        target = fs::canonical(path, ec);
        if (ec) throw MoeError(path.string() + ": a symbolic link to nothing writable (" + ec.message() + ")");
        type = type_at(target, false);
    }
    if (type != fs::file_type::not_found && type != fs::file_type::regular)
        throw MoeError(path.string() +
                       ": exists and is not a regular file (a folder, device or pipe); refusing to "
                       "replace it");
    return target;
}

void file_check_output(const std::string& flag, const fs::path& path) {
    if (path.empty()) throw MoeError(flag + ": empty (give the file to write)");
    if (!path.has_filename()) throw MoeError(flag + ": " + path.string() + " names a folder, not a file");
    fs::path target;
    try {
        target = file_write_target(path);
    } catch (const MoeError& e) {
        throw MoeError(flag + ": " + e.what());
    }
    std::error_code ec;
    const fs::path dir = fs::absolute(target, ec).parent_path();
    if (ec || type_at(dir, true) != fs::file_type::directory || ::access(dir.c_str(), W_OK | X_OK) != 0)
        throw MoeError(flag + ": cannot write into " + dir.string());
}

void file_write_atomic(const fs::path& path, const std::string& text) {
    file_write_atomic_stream(path, [&](std::ostream& out) { out << text; });
}

void file_write_atomic_stream(const fs::path& path, const std::function<void(std::ostream&)>& write) {
    const fs::path target = file_write_target(path);
    fs::path tmp = target;
    tmp += ".tmp." + std::to_string(::getpid());
    auto remove_tmp = [&] {
        std::error_code ignored;
        fs::remove(tmp, ignored);
    };
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw MoeError(path.string() + ": cannot create the temporary file " + tmp.string());
        try {
            write(out);
        } catch (...) {
            out.close();
            remove_tmp();
            throw;
        }
        out.close();  // flushes; a failed write or flush leaves the stream failed
        if (!out) {
            remove_tmp();
            throw MoeError(tmp.string() + ": write failed (disk full?)");
        }
    }
    std::error_code ec;
    fs::rename(tmp, target, ec);
    if (ec) {
        remove_tmp();
        throw MoeError(path.string() + ": cannot replace file: " + ec.message());
    }
}
