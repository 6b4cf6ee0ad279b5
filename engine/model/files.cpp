// Whole-file reads (see files.h).
#include "engine/model/files.h"

#include <fstream>
#include <sstream>

#include "engine/errors.h"

std::string file_read_text(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw MoeError(path.string() + ": cannot open file");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw MoeError(path.string() + ": cannot read file");
    return ss.str();
}

nlohmann::json file_read_json(const std::filesystem::path& path) {
    nlohmann::json j = nlohmann::json::parse(file_read_text(path), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw MoeError(path.string() + ": not valid JSON");
    return j;
}
