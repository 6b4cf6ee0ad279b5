// Whole-file reads and atomic writes (see files.h).
#include "profiles/files.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <system_error>

#include "profiles/errors.h"

namespace fs = std::filesystem;

std::string file_read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw MoeError(path.string() + ": cannot open file");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw MoeError(path.string() + ": cannot read file");
    return ss.str();
}

nlohmann::json file_read_json(const fs::path& path) {
    nlohmann::json j = nlohmann::json::parse(file_read_text(path), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw MoeError(path.string() + ": not valid JSON");
    return j;
}

void file_write_atomic(const fs::path& path, const std::string& text) {
    fs::path tmp = path;
    tmp += ".tmp." + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw MoeError(path.string() + ": cannot create the temporary file " + tmp.string());
        out << text;
        out.flush();
        if (!out) {
            out.close();
            std::error_code ignored;
            fs::remove(tmp, ignored);
            throw MoeError(tmp.string() + ": write failed (disk full?)");
        }
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) {
        std::error_code ignored;
        fs::remove(tmp, ignored);
        throw MoeError(path.string() + ": cannot replace file: " + ec.message());
    }
}
