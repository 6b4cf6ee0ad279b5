// Tests of the safetensors reader and writer: round trips of every dtype,
// header layout, and one error per kind of malformed file (each a single line
// naming the file and, where there is one, the tensor), plus sharded folders.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "engine/formats/safetensors.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void write_bytes(const fs::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
}

std::string le64(uint64_t n) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; i++) s[i] = char((n >> (8 * i)) & 0xff);
    return s;
}

// A file with this header text and `data_size` bytes of data.
fs::path raw_file(const fs::path& dir, const std::string& header, size_t data_size) {
    fs::path p = dir / "model.safetensors";
    write_bytes(p, le64(header.size()) + header + std::string(data_size, '\x11'));
    return p;
}

std::string open_error(const fs::path& path) {
    return moe_error_of([&] { SafetensorsFile f(path); });
}

std::string set_error(const fs::path& dir) {
    return moe_error_of([&] { SafetensorsSet s(dir); });
}

TensorView view(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data) {
    TensorView t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.nbytes = dtype_info(dtype).block_bytes;
    for (int64_t d : t.shape) t.nbytes *= size_t(d);
    t.data = data;
    return t;
}

}  // namespace

TEST_CASE("safetensors: a quantized tensor's bytes are whole blocks per row", "[safetensors]") {
    CHECK(tensor_nbytes(DType::Q4_K, {3, 512}, "t") == 3 * 2 * 144);
    CHECK(tensor_nbytes(DType::Q8_0, {2, 4, 64}, "t") == 2 * 4 * 2 * 34);
    CHECK_THROWS_WITH(tensor_nbytes(DType::Q6_K, {2, 100}, "t"),
                      "t: Q6_K rows must hold a multiple of 256 elements, not [2, 100]");
    CHECK_THROWS_WITH(tensor_nbytes(DType::BF16, {int64_t(1) << 40, int64_t(1) << 40}, "t"),
                      "t: shape [1099511627776, 1099511627776] is too large");
}

TEST_CASE("safetensors: write then read every dtype", "[safetensors]") {
    fs::path dir = test_temp_dir("st-roundtrip");
    std::vector<uint16_t> a(3 * 5);
    std::vector<uint16_t> b(7);
    std::vector<float> c(2 * 3 * 4);
    for (size_t i = 0; i < a.size(); i++) a[i] = uint16_t(0x3f80 + i);
    for (size_t i = 0; i < b.size(); i++) b[i] = uint16_t(0x3c00 + 3 * i);
    for (size_t i = 0; i < c.size(); i++) c[i] = float(i) * 0.25f - 1.0f;
    std::vector<TensorView> in = {view("a.weight", DType::BF16, {3, 5}, a.data()), view("b", DType::F16, {7}, b.data()),
                                  view("c.3d", DType::F32, {2, 3, 4}, c.data()),
                                  view("empty", DType::F32, {0, 4}, nullptr), view("scalar", DType::F32, {}, c.data())};
    fs::path p = dir / "model.safetensors";
    safetensors_write(p, in);

    // Header: 8-byte length, JSON padded with spaces so the data is 8-byte aligned.
    std::string bytes = read_file(p);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | uint8_t(bytes[size_t(i)]);
    CHECK(n % 8 == 0);
    json header = json::parse(bytes.substr(8, n));
    CHECK(header["a.weight"]["dtype"] == "BF16");
    CHECK(header["a.weight"]["data_offsets"] == json::array({0, 30}));
    CHECK(header["b"]["data_offsets"] == json::array({30, 44}));
    CHECK(bytes.size() == 8 + n + 30 + 14 + 96 + 0 + 4);

    SafetensorsFile f(p);
    REQUIRE(f.tensors().size() == 5);
    const TensorView& ra = f.tensors().at("a.weight");
    CHECK(ra.dtype == DType::BF16);
    CHECK(ra.shape == std::vector<int64_t>{3, 5});
    CHECK(ra.nbytes == 30);
    CHECK(ra.file == p.string());
    CHECK(std::memcmp(ra.data, a.data(), 30) == 0);
    CHECK(reinterpret_cast<uintptr_t>(ra.data) % 8 == 0);
    const TensorView& rb = f.tensors().at("b");
    CHECK(rb.dtype == DType::F16);
    CHECK(std::memcmp(rb.data, b.data(), 14) == 0);
    const TensorView& rc = f.tensors().at("c.3d");
    CHECK(rc.dtype == DType::F32);
    CHECK(rc.shape == std::vector<int64_t>{2, 3, 4});
    CHECK(std::memcmp(rc.data, c.data(), 96) == 0);
    CHECK(f.tensors().at("empty").nbytes == 0);
    CHECK(f.tensors().at("scalar").nbytes == 4);
    CHECK(f.tensors().at("scalar").shape.empty());

    SafetensorsSet set(dir);
    CHECK(set.source() == p.string());
    REQUIRE(set.find("c.3d") != nullptr);
    // Zero copy: views point into one mapping, at their data offsets.
    CHECK(static_cast<const char*>(set.find("c.3d")->data) - static_cast<const char*>(set.find("a.weight")->data) ==
          44);
    CHECK(std::memcmp(set.find("c.3d")->data, c.data(), 96) == 0);
    CHECK(set.find("nope") == nullptr);
}

TEST_CASE("safetensors: writer refuses inconsistent views", "[safetensors]") {
    fs::path dir = test_temp_dir("st-writer");
    std::vector<float> x(4);
    TensorView t = view("x", DType::F32, {4}, x.data());
    t.nbytes = 12;
    CHECK_THROWS_AS(safetensors_write(dir / "a.safetensors", {t}), MoeError);
    TensorView u = view("x", DType::F32, {4}, x.data());
    CHECK_THROWS_AS(safetensors_write(dir / "b.safetensors", {u, u}), MoeError);
}

TEST_CASE("safetensors: a file shorter than 8 bytes", "[safetensors]") {
    fs::path dir = test_temp_dir("st-short");
    fs::path p = dir / "model.safetensors";
    write_bytes(p, "abc");
    check_error_line(open_error(p), p, "file is 3 bytes, too short for the 8-byte safetensors header length");
    write_bytes(p, "");
    check_error_line(open_error(p), p, "file is 0 bytes");
}

TEST_CASE("safetensors: header length past the end of the file", "[safetensors]") {
    fs::path dir = test_temp_dir("st-hlen");
    fs::path p = dir / "model.safetensors";
    write_bytes(p, le64(1000) + "{}");
    check_error_line(open_error(p), p, "header length 1000 runs past the end of the file (10 bytes)");
    write_bytes(p, le64(~uint64_t(0)) + "{}");
    check_error_line(open_error(p), p, "header length 18446744073709551615 runs past the end");
}

TEST_CASE("safetensors: header not JSON or not an object", "[safetensors]") {
    fs::path dir = test_temp_dir("st-json");
    check_error_line(open_error(raw_file(dir, "{\"a\": {\"dtype\": \n", 16)), dir / "model.safetensors",
                     "header is not valid JSON");
    check_error_line(open_error(raw_file(dir, "[1, 2, 3]", 0)), dir / "model.safetensors",
                     "header is not a JSON object");
    check_error_line(open_error(raw_file(dir, R"({"__metadata__": 5})", 0)), dir / "model.safetensors",
                     "__metadata__ is not an object");
    // Metadata alone is a valid (empty) file.
    CHECK(open_error(raw_file(dir, R"({"__metadata__": {"format": "pt"}})", 0)).empty());
}

TEST_CASE("safetensors: a number too large for a double in the header", "[safetensors]") {
    // Found by tests/fuzz/fuzz_safetensors: nlohmann throws out_of_range, not parse_error.
    fs::path dir = test_temp_dir("st-overflow");
    check_error_line(open_error(raw_file(dir, R"({"__metadata__": {"x": 1e400}})", 0)), dir / "model.safetensors",
                     "header is not valid JSON");
}

TEST_CASE("safetensors: malformed tensor entries", "[safetensors]") {
    fs::path dir = test_temp_dir("st-entries");
    fs::path p = dir / "model.safetensors";
    struct Case {
        std::string header;
        std::string expect;
    };
    const Case cases[] = {
        {R"({"w": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}})",
         "w: unsupported dtype 'I8' (supported: BF16, F16, F32, U8)"},
        {R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", "w: unsupported dtype 'F64'"},
        {R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 2]}})", "w: dtype is not a string"},
        {R"({"w": {"dtype": "BF16", "shape": 4, "data_offsets": [0, 8]}})", "w: shape is not a list"},
        {R"({"w": {"dtype": "BF16", "shape": [2, -2], "data_offsets": [0, 8]}})",
         "w: shape [2,-2] is not a list of non-negative integers"},
        {R"({"w": {"dtype": "BF16", "shape": [2.5], "data_offsets": [0, 8]}})",
         "is not a list of non-negative integers"},
        {R"({"w": {"dtype": "BF16", "shape": [4]}})", "w: header entry needs dtype, shape and data_offsets"},
        {R"({"w": [1, 2]})", "w: header entry is not an object"},
        {R"({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0]}})",
         "w: data_offsets must be two non-negative integers [begin, end]"},
        {R"({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [-8, 0]}})",
         "w: data_offsets must be two non-negative integers"},
        {R"({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [8, 0]}})", "w: data_offsets [8, 0] end before"},
        {R"({"w": {"dtype": "BF16", "shape": [4, 2], "data_offsets": [0, 8]}})",
         "w: data_offsets [0, 8] hold 8 bytes but BF16 [4, 2] needs 16"},
        {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}})",
         "w: data_offsets [24, 40] run past the end of the data (32 bytes; truncated file?)"},
        {R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 8]}})", "w: shape"},
        {R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
         R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
         "b: data_offsets [8, 24] overlap tensor 'a' [0, 16]"},
        {R"({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [16, 24]},)"
         R"( "b": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})",
         "a: data_offsets [16, 24] overlap tensor 'b' [0, 32]"},
        {"{\"bad\\nname\": {\"dtype\": \"I8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", "bad?name: unsupported"},
    };
    for (const Case& k : cases) {
        raw_file(dir, k.header, 32);
        std::string m = open_error(p);
        INFO(k.header);
        check_error_line(m, p, k.expect);
    }
    // Adjacent, empty and gap-separated tensors are fine.
    raw_file(dir,
             R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
             R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},)"
             R"( "b": {"dtype": "F16", "shape": [4], "data_offsets": [8, 16]},)"
             R"( "c": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [24, 32]}})",
             32);
    CHECK(open_error(p).empty());
}

TEST_CASE("safetensors: folders, single and sharded", "[safetensors]") {
    fs::path dir = test_temp_dir("st-sharded");
    check_error_line(set_error(dir), dir, "no model.safetensors or model.safetensors.index.json");
    CHECK(set_error(dir) == dir.string() + ": no model.safetensors or model.safetensors.index.json");

    std::vector<float> x = {1, 2, 3, 4}, y = {5, 6};
    safetensors_write(dir / "model-00001-of-00002.safetensors", {view("x", DType::F32, {4}, x.data())});
    safetensors_write(dir / "model-00002-of-00002.safetensors",
                      {view("y", DType::F32, {2}, y.data()), view("extra", DType::F32, {2}, y.data())});
    json index = {
        {"metadata", {{"total_size", 24}}},
        {"weight_map", {{"x", "model-00001-of-00002.safetensors"}, {"y", "model-00002-of-00002.safetensors"}}}};
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    {
        SafetensorsSet set(dir);
        CHECK(set.source() == (dir / "model.safetensors.index.json").string());
        CHECK(set.tensors().size() == 2);  // the index decides: "extra" is not listed
        REQUIRE(set.find("y") != nullptr);
        CHECK(set.find("y")->file == (dir / "model-00002-of-00002.safetensors").string());
        CHECK(static_cast<const float*>(set.find("y")->data)[1] == 6.0f);
        CHECK(static_cast<const float*>(set.find("x")->data)[3] == 4.0f);
    }

    // A tensor the index names but the shard lacks.
    index["weight_map"]["z"] = "model-00002-of-00002.safetensors";
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    check_error_line(set_error(dir), dir / "model-00002-of-00002.safetensors",
                     "z: tensor missing (listed in model.safetensors.index.json)");

    // A shard the index names that is not there.
    index["weight_map"].erase("z");
    index["weight_map"]["w"] = "model-00003-of-00003.safetensors";
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    check_error_line(set_error(dir), dir / "model-00003-of-00003.safetensors",
                     "shard missing (listed in model.safetensors.index.json for w)");

    // Index problems.
    index["weight_map"]["w"] = "../model-00001-of-00002.safetensors";
    write_bytes(dir / "model.safetensors.index.json", index.dump());
    check_error_line(set_error(dir), dir / "model.safetensors.index.json", "not a file in the model folder");
    write_bytes(dir / "model.safetensors.index.json", R"({"metadata": {}})");
    check_error_line(set_error(dir), dir / "model.safetensors.index.json",
                     "field 'weight_map' missing or not an object");
    write_bytes(dir / "model.safetensors.index.json", "{");
    check_error_line(set_error(dir), dir / "model.safetensors.index.json", "not valid JSON");
}
