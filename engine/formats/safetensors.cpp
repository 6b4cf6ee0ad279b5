// Safetensors reading and writing. Maps each file read-only, validates the
// whole header (length, JSON, dtypes, shapes, offsets inside the data and not
// overlapping) before any TensorView is handed out, and resolves sharded
// folders through model.safetensors.index.json. Never copies tensor data and
// knows nothing about models.
#include "engine/formats/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/errors.h"
#include "base/files.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string offsets_string(uint64_t begin, uint64_t end) {
    std::string s = "[";
    s += std::to_string(begin);
    s += ", ";
    s += std::to_string(end);
    return s + "]";
}

bool dtype_from_name(const std::string& name, DType* dtype) {
    for (DType d : {DType::BF16, DType::F16, DType::F32, DType::U8}) {
        if (name == dtype_name(d)) {
            *dtype = d;
            return true;
        }
    }
    return false;
}

struct Span {
    uint64_t begin, end;
    const std::string* name;
};

// Parses and checks one tensor entry of the header; data_size is the number
// of bytes after the header.
TensorView parse_entry(const std::string& file, const std::string& name, const json& entry, uint64_t data_size,
                       uint64_t* begin_out) {
    std::string where = file + ": " + printable(name) + ": ";
    if (!entry.is_object()) throw MoeError(where + "header entry is not an object");
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || shape_it == entry.end() || offsets_it == entry.end())
        throw MoeError(where + "header entry needs dtype, shape and data_offsets");

    TensorView view;
    view.name = name;
    view.file = file;
    if (!dtype_it->is_string()) throw MoeError(where + "dtype is not a string");
    if (!dtype_from_name(dtype_it->get<std::string>(), &view.dtype))
        throw MoeError(where + "unsupported dtype '" + printable(dtype_it->get<std::string>()) +
                       "' (supported: BF16, F16, F32, U8)");

    if (!shape_it->is_array()) throw MoeError(where + "shape is not a list of non-negative integers");
    for (const json& d : *shape_it) {
        // nlohmann stores every non-negative integer as unsigned.
        if (!d.is_number_unsigned())
            throw MoeError(where + "shape " + printable(shape_it->dump()) + " is not a list of non-negative integers");
        if (d.get<uint64_t>() > uint64_t(INT64_MAX))
            throw MoeError(where + "shape dimension " + d.dump() + " is too large");
        view.shape.push_back(d.get<int64_t>());
    }
    size_t expected = tensor_nbytes(view.dtype, view.shape, where.substr(0, where.size() - 2));

    const json& off = *offsets_it;
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        throw MoeError(where + "data_offsets must be two non-negative integers [begin, end], found " +
                       printable(off.dump()));
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    std::string range = offsets_string(begin, end);
    if (begin > end) throw MoeError(where + "data_offsets " + range + " end before they begin");
    if (end - begin != expected)
        throw MoeError(where + "data_offsets " + range + " hold " + std::to_string(end - begin) + " bytes but " +
                       dtype_name(view.dtype) + " " + tensor_shape_string(view.shape) + " needs " +
                       std::to_string(expected));
    if (end > data_size)
        throw MoeError(where + "data_offsets " + range + " run past the end of the data (" + std::to_string(data_size) +
                       " bytes; truncated file?)");
    view.nbytes = size_t(expected);
    *begin_out = begin;
    return view;
}

void write_all(std::FILE* f, const void* data, size_t n, const fs::path& path) {
    if (n && std::fwrite(data, 1, n, f) != n)
        throw MoeError(path.string() + ": write failed (" + std::strerror(errno) + ")");
}

}  // namespace

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path), map_(path) {
    std::string_view bytes = map_.bytes();
    SafetensorsHeader header = safetensors_parse_header(bytes, bytes.size(), path.string());
    for (auto& [name, view] : header.tensors) view.data = bytes.data() + header.data_start + header.offsets.at(name);
    tensors_ = std::move(header.tensors);
}

SafetensorsHeader safetensors_parse_header(std::string_view head, uint64_t file_size, const std::string& file) {
    if (head.size() < 8 || file_size < head.size())
        throw MoeError(file + ": file is " + std::to_string(head.size()) +
                       " bytes, too short for the 8-byte safetensors header length");
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(head.data());
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | bytes[i];
    if (header_len > file_size - 8)
        throw MoeError(file + ": header length " + std::to_string(header_len) + " runs past the end of the file (" +
                       std::to_string(file_size) + " bytes)");
    if (header_len > head.size() - 8)
        throw MoeError(file + ": header length " + std::to_string(header_len) + " runs past the " +
                       std::to_string(head.size()) + " bytes read");
    const char* text = head.data() + 8;
    json j;
    try {
        j = json_parse_bounded(std::string_view(text, header_len), JSON_FILE_LIMITS, file);
    } catch (const JsonError& e) {
        const bool syntax = e.kind == JsonError::Kind::SYNTAX || e.kind == JsonError::Kind::NUMBER;
        throw MoeError(file + (syntax ? ": header is not valid JSON (" : ": header refused (") + printable(e.detail) +
                       ")");
    }
    if (!j.is_object()) throw MoeError(file + ": header is not a JSON object");

    SafetensorsHeader out;
    out.data_start = 8 + header_len;
    uint64_t data_size = file_size - 8 - header_len;
    std::vector<Span> spans;
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it->is_object()) throw MoeError(file + ": __metadata__ is not an object");
            continue;
        }
        uint64_t begin = 0;
        TensorView view = parse_entry(file, it.key(), it.value(), data_size, &begin);
        uint64_t end = begin + view.nbytes;
        out.offsets[it.key()] = begin;
        auto pos = out.tensors.emplace(it.key(), std::move(view)).first;  // JSON object keys are unique
        if (end > begin) spans.push_back({begin, end, &pos->first});      // empty tensors overlap nothing
    }
    // Overlap check: sorted by begin, each span must end before the next starts.
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < spans.size(); i++) {
        const Span& a = spans[i - 1];
        const Span& b = spans[i];
        if (b.begin < a.end)
            throw MoeError(file + ": " + printable(*b.name) + ": data_offsets " + offsets_string(b.begin, b.end) +
                           " overlap tensor '" + printable(*a.name) + "' " + offsets_string(a.begin, a.end));
    }
    return out;
}

SafetensorsSet::SafetensorsSet(const fs::path& dir) {
    fs::path index_path = dir / "model.safetensors.index.json";
    fs::path single_path = dir / "model.safetensors";
    if (file_exists(index_path)) {
        source_ = index_path.string();
        json index = file_read_json(index_path);
        auto wm = index.is_object() ? index.find("weight_map") : index.end();
        if (!index.is_object() || wm == index.end() || !wm->is_object())
            throw MoeError(source_ + ": field 'weight_map' missing or not an object");
        std::map<std::string, SafetensorsFile*> shards;
        for (auto it = wm->begin(); it != wm->end(); ++it) {
            if (!it->is_string())
                throw MoeError(source_ + ": weight_map entry '" + printable(it.key()) + "' is not a file name");
            std::string shard = it->get<std::string>();
            if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
                throw MoeError(source_ + ": weight_map entry '" + printable(it.key()) + "' names '" + printable(shard) +
                               "', not a file in the model folder");
            if (!shards.count(shard)) {
                fs::path shard_path = dir / shard;
                if (!file_exists(shard_path))
                    throw MoeError(shard_path.string() +
                                   ": shard missing (listed in model.safetensors.index.json for " +
                                   printable(it.key()) + ")");
                files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
                shards[shard] = files_.back().get();
            }
            const SafetensorsFile* f = shards[shard];
            auto t = f->tensors().find(it.key());
            if (t == f->tensors().end())
                throw MoeError(f->path().string() + ": " + printable(it.key()) +
                               ": tensor missing (listed in model.safetensors.index.json)");
            tensors_.emplace(it.key(), t->second);
        }
    } else if (file_exists(single_path)) {
        source_ = single_path.string();
        files_.push_back(std::make_unique<SafetensorsFile>(single_path));
        tensors_ = files_.back()->tensors();
    } else {
        throw MoeError(dir.string() + ": no model.safetensors or model.safetensors.index.json");
    }
}

const TensorView* SafetensorsSet::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

std::string safetensors_header(const std::vector<TensorView>& tensors) {
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (const TensorView& t : tensors) {
        if (t.name == "__metadata__" || header.contains(t.name))
            throw MoeError("safetensors_write: tensor name '" + printable(t.name) + "' used twice or reserved");
        uint64_t n = tensor_nbytes(t.dtype, t.shape, "safetensors_write: " + printable(t.name));
        header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
        offset += n;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    uint64_t len = text.size();
    for (int i = 0; i < 8; i++) out[i] = char((len >> (8 * i)) & 0xff);
    return out + text;
}

void safetensors_write(const fs::path& path, const std::vector<TensorView>& tensors) {
    for (const TensorView& t : tensors) {
        size_t n = tensor_nbytes(t.dtype, t.shape, "safetensors_write: " + printable(t.name));
        if (t.nbytes != n || (n > 0 && !t.data))
            throw MoeError("safetensors_write: " + printable(t.name) + ": nbytes " + std::to_string(t.nbytes) +
                           " does not match " + dtype_name(t.dtype) + " " + tensor_shape_string(t.shape) + " (" +
                           std::to_string(n) + " bytes)");
    }
    std::string header = safetensors_header(tensors);
    std::FILE* f = std::fopen(path.string().c_str(), "wb");
    if (!f) throw MoeError(path.string() + ": cannot create (" + std::strerror(errno) + ")");
    try {
        write_all(f, header.data(), header.size(), path);
        for (const TensorView& t : tensors) write_all(f, t.data, t.nbytes, path);
    } catch (...) {
        std::fclose(f);
        throw;
    }
    if (std::fclose(f) != 0) throw MoeError(path.string() + ": write failed (" + std::strerror(errno) + ")");
}
