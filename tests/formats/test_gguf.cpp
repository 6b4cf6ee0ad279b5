// Tests of the GGUF reader and writer (engine/formats/gguf.h): the reference
// files llama.cpp wrote (metadata, tensor types and shapes, and an f32
// tensor's bytes against the Hugging Face folder they came from), every
// llama.cpp vocab GGUF, write-then-read round trips of every metadata type
// and of tensors of every type under several alignments, and one corrupt
// file per kind of damage, each refused in one line naming the file, the key
// or tensor, and what is wrong. Corrupt files are good ones from gguf_write
// with bytes cut or patched.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>

#include "base/errors.h"
#include "cpu_kernels/bf16.h"
#include "engine/formats/gguf.h"
#include "engine/formats/safetensors.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace {

fs::path reference_gguf(const std::string& name) {
    return shared_data_dir() / "reference" / "gguf" / name;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
}

std::string open_error(const fs::path& path) {
    return moe_error_of([&] { GgufFile f(path); });
}

// Where `needle` occurs in bytes, once.
size_t find_once(const std::string& bytes, const std::string& needle) {
    size_t at = bytes.find(needle);
    REQUIRE(at != std::string::npos);
    REQUIRE(bytes.find(needle, at + 1) == std::string::npos);
    return at;
}

void patch_le(std::string& bytes, size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes[at + size_t(i)] = char((v >> (8 * i)) & 0xff);
}

TensorView view(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data) {
    TensorView t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.nbytes = tensor_nbytes(dtype, t.shape, name);
    t.data = data;
    return t;
}

// n bytes of a repeatable pattern.
std::vector<uint8_t> pattern(size_t n, unsigned seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = uint8_t((i * 131 + seed * 17 + (i >> 8)) & 0xff);
    return v;
}

// A small good file: metadata k.uint (uint32 7), k.array (uint32 [1, 2, 3]),
// k.str ("hello"), k.bool (true), general.alignment 32; tensors t.f32 F32
// (2, 8) and t.q8 Q8_0 (2, 64). Returns its bytes.
struct Sample {
    std::vector<uint8_t> f32 = pattern(2 * 8 * 4, 1);
    std::vector<uint8_t> q8 = pattern(2 * 2 * 34, 2);
    std::vector<GgufKeyValue> metadata = {{"k.uint", uint32_t(7)},
                                          {"k.array", std::vector<uint32_t>{1, 2, 3}},
                                          {"k.str", "hello"},
                                          {"k.bool", true},
                                          {"general.alignment", uint32_t(32)}};
    std::vector<TensorView> tensors = {view("t.f32", DType::F32, {2, 8}, f32.data()),
                                       view("t.q8", DType::Q8_0, {2, 64}, q8.data())};

    std::string write(const fs::path& path) const {
        gguf_write(path, metadata, tensors);
        return read_file(path);
    }
};

// Writes the sample, hands its bytes to `patch`, writes them back and
// returns the error opening that file gives.
template <class F>
std::string patched_error(const fs::path& path, F patch) {
    std::string bytes = Sample().write(path);
    patch(bytes);
    write_bytes(path, bytes);
    return open_error(path);
}

// Where a tensor's info begins, past its name: n_dims, ne[], type, offset.
size_t info_at(const std::string& bytes, const std::string& name) {
    return find_once(bytes, name) + name.size();
}

}  // namespace

// ---- reference files --------------------------------------------------------

TEST_CASE("gguf: llama.cpp's Q8_0 and Q4_K_M reference files", "[gguf]") {
    struct Expect {
        std::string file;
        std::map<DType, int> counts;
        DType experts;
    };
    for (const Expect& e :
         {Expect{"Q8_0.gguf", {{DType::Q8_0, 16}, {DType::F32, 7}}, DType::Q8_0},
          Expect{"Q4_K_M.gguf", {{DType::Q4_K, 13}, {DType::Q6_K, 3}, {DType::F32, 7}}, DType::Q4_K}}) {
        INFO(e.file);
        GgufFile f(reference_gguf(e.file));
        const GgufMetadata& m = f.metadata();
        CHECK(f.version() == 3);
        CHECK(f.alignment() == 32);
        CHECK(m.get_string("general.architecture") == "llama");
        CHECK(m.get_int("llama.expert_count") == 4);
        CHECK(m.get_int<uint32_t>("llama.expert_used_count") == 2);
        CHECK(m.get_int<int>("llama.block_count") == 2);
        CHECK(m.get_int<uint16_t>("llama.embedding_length") == 256);
        CHECK(m.get_float("llama.rope.freq_base") == 1e6);
        CHECK(m.get_float("llama.attention.layer_norm_rms_epsilon") == Approx(1e-5));
        CHECK(m.get_bool("tokenizer.ggml.add_bos_token"));
        CHECK(m.get_string("tokenizer.ggml.model") == "llama");
        CHECK(m.get_string("tokenizer.chat_template").find("[INST]") != std::string_view::npos);
        std::vector<std::string_view> tokens = m.get_strings("tokenizer.ggml.tokens");
        REQUIRE(tokens.size() == 32000);
        CHECK(tokens[0] == "<unk>");
        CHECK(tokens[1] == "<s>");
        CHECK(tokens[2] == "</s>");
        CHECK(m.get_floats("tokenizer.ggml.scores").size() == 32000);
        std::vector<int32_t> types = m.get_ints<int32_t>("tokenizer.ggml.token_type");
        REQUIRE(types.size() == 32000);
        CHECK(types[1] == 3);  // control
        CHECK(m.get_int("tokenizer.ggml.bos_token_id") == 1);
        CHECK(m.get_int("tokenizer.ggml.eos_token_id") == 2);

        std::map<DType, int> counts;
        for (const TensorView& t : f.tensors()) counts[t.dtype]++;
        CHECK(counts == e.counts);
        CHECK(f.tensors().size() == 23);
        for (int l = 0; l < 2; ++l) {
            const std::string blk = "blk." + std::to_string(l) + ".";
            // ggml's ne (256, 512, 4) is (experts, hidden, dim) row-major.
            const TensorView& gate = f.tensor(blk + "ffn_gate_exps.weight");
            CHECK(gate.shape == std::vector<int64_t>{4, 512, 256});
            CHECK(gate.dtype == e.experts);
            CHECK(f.tensor(blk + "ffn_up_exps.weight").shape == std::vector<int64_t>{4, 512, 256});
            CHECK(f.tensor(blk + "ffn_down_exps.weight").shape == std::vector<int64_t>{4, 256, 512});
            CHECK(f.tensor(blk + "ffn_gate_inp.weight").shape == std::vector<int64_t>{4, 256});
            CHECK(f.tensor(blk + "attn_k.weight").shape == std::vector<int64_t>{128, 256});
        }
        CHECK(f.tensor("token_embd.weight").shape == std::vector<int64_t>{32000, 256});
        CHECK(f.tensor("output_norm.weight").shape == std::vector<int64_t>{256});
        CHECK(f.find("blk.2.attn_q.weight") == nullptr);
        CHECK_THROWS_WITH(f.tensor("blk.2.attn_q.weight"),
                          reference_gguf(e.file).string() + ": blk.2.attn_q.weight: tensor missing");
        CHECK_THROWS_WITH(m.get_int("llama.nope"), reference_gguf(e.file).string() + ": llama.nope: missing key");
        CHECK(!m.find_int("llama.nope"));
        for (const TensorView& t : f.tensors()) CHECK(t.file == reference_gguf(e.file).string());
    }
}

TEST_CASE("gguf: rewriting llama.cpp's files gives their exact bytes", "[gguf]") {
    // The writer lays out what llama.cpp's writer does (metadata in order,
    // tensors aligned in file order, padding after each), so its files load
    // wherever llama.cpp's do.
    for (const std::string name : {"Q8_0.gguf", "Q4_K_M.gguf"}) {
        INFO(name);
        const fs::path dir = test_temp_dir("gguf-rewrite");
        GgufFile f(reference_gguf(name));
        gguf_write(dir / name, f.metadata().values(), f.tensors());
        CHECK(read_file(dir / name) == read_file(reference_gguf(name)));
        fs::remove_all(dir);
    }
}

TEST_CASE("gguf: f32 tensors of the Q8_0 file equal the HF folder's bf16 ones", "[gguf]") {
    // Norms and the router are stored as f32; widened from the folder's bf16
    // they are exact, so equal bytes prove the offsets and the mapping.
    GgufFile f(reference_gguf("Q8_0.gguf"));
    SafetensorsSet hf(reference_gguf("hf"));
    const std::vector<std::pair<std::string, std::string>> names = {
        {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
        {"blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
        {"blk.1.ffn_gate_inp.weight", "model.layers.1.block_sparse_moe.gate.weight"},
        {"output_norm.weight", "model.norm.weight"},
    };
    for (const auto& [gguf_name, hf_name] : names) {
        INFO(gguf_name);
        const TensorView& g = f.tensor(gguf_name);
        const TensorView* h = hf.find(hf_name);
        REQUIRE(h != nullptr);
        REQUIRE(g.dtype == DType::F32);
        REQUIRE(h->dtype == DType::BF16);
        REQUIRE(g.shape == h->shape);
        const size_t n = g.nbytes / 4;
        const float* gv = static_cast<const float*>(g.data);
        const bf16* hv = static_cast<const bf16*>(h->data);
        size_t differ = 0;
        for (size_t i = 0; i < n; ++i) differ += gv[i] != bf16_to_f32(hv[i]);
        CHECK(differ == 0);
        // Norm weights are not all alike: the comparison means something.
        CHECK(std::memcmp(gv, gv + 1, 4) != 0);
    }
}

TEST_CASE("gguf: every llama.cpp vocab file opens", "[gguf]") {
    const std::map<std::string, std::pair<std::string, size_t>> expect = {
        {"ggml-vocab-llama-spm.gguf", {"llama", 32000}},
        {"ggml-vocab-gpt-2.gguf", {"gpt2", 50257}},
        {"ggml-vocab-deepseek-llm.gguf", {"gpt2", 102400}},
        {"ggml-vocab-phi-3.gguf", {"llama", 32064}},
    };
    size_t seen = 0;
    for (const auto& e : fs::directory_iterator(shared_data_dir() / "reference" / "llama-cpp-vocab")) {
        if (e.path().extension() != ".gguf") continue;
        INFO(e.path());
        GgufFile f(e.path());
        const GgufMetadata& m = f.metadata();
        std::vector<std::string_view> tokens = m.get_strings("tokenizer.ggml.tokens");
        CHECK(m.get_ints<int32_t>("tokenizer.ggml.token_type").size() == tokens.size());
        if (m.contains("tokenizer.ggml.merges")) CHECK(!m.get_strings("tokenizer.ggml.merges").empty());
        auto it = expect.find(e.path().filename().string());
        if (it != expect.end()) {
            CHECK(m.get_string("tokenizer.ggml.model") == it->second.first);
            CHECK(tokens.size() == it->second.second);
            ++seen;
        }
        // Every value decodes, and writes back the same (padded to the
        // alignment where the data would start; llama.cpp's writer left the
        // padding out of these tensorless files).
        fs::path copy = test_temp_dir("gguf-vocab") / "copy.gguf";
        gguf_write(copy, m.values(), {});
        const std::string original = read_file(e.path());
        const std::string copied = read_file(copy);
        CHECK(copied.size() == (original.size() + 31) / 32 * 32);
        CHECK(copied.compare(0, original.size(), original) == 0);
    }
    CHECK(seen == expect.size());
}

TEST_CASE("gguf: the header parser needs only the header's bytes", "[gguf]") {
    const fs::path p = reference_gguf("Q4_K_M.gguf");
    const std::string bytes = read_file(p);
    GgufHeader whole = gguf_parse_header(bytes, bytes.size(), p.string());
    const std::string head = bytes.substr(0, whole.data_start);
    GgufHeader h = gguf_parse_header(head, bytes.size(), p.string());
    CHECK(h.data_start == whole.data_start);
    CHECK(h.data_start % 32 == 0);
    CHECK(h.offsets == whole.offsets);
    CHECK(h.metadata.get_strings("tokenizer.ggml.tokens").size() == 32000);
    // One byte short of the tensor infos: the bytes read end before the file does.
    check_error_line(
        moe_error_of([&] { gguf_parse_header(head.substr(0, head.size() - 40), bytes.size(), p.string()); }), p,
        "bytes read");
}

// ---- round trips ------------------------------------------------------------

TEST_CASE("gguf: write then read every metadata type", "[gguf]") {
    using L = std::numeric_limits<int64_t>;
    const std::vector<GgufKeyValue> in = {
        {"u8", uint8_t(255)},
        {"i8", int8_t(-128)},
        {"u16", uint16_t(65535)},
        {"i16", int16_t(-32768)},
        {"u32", uint32_t(4000000000u)},
        {"i32", int32_t(-2000000000)},
        {"f32", 1.5f},
        {"bool.true", true},
        {"bool.false", false},
        {"str", "h\xc3\xa9llo"},
        {"str.empty", ""},
        {"str.nul", std::string("a\0b", 3)},
        {"u64", uint64_t(18446744073709551615ull)},
        {"i64", int64_t(L::min())},
        {"f64", -2.25e300},
        {"a.u8", std::vector<uint8_t>{0, 1, 255}},
        {"a.i8", std::vector<int8_t>{-1, 2}},
        {"a.u16", std::vector<uint16_t>{1, 65535}},
        {"a.i16", std::vector<int16_t>{-300}},
        {"a.u32", std::vector<uint32_t>{7, 8, 9}},
        {"a.i32", std::vector<int32_t>{-1, 0, 1}},
        {"a.f32", std::vector<float>{0.5f, -1e-3f}},
        {"a.bool", std::vector<bool>{true, false, true}},
        {"a.str", std::vector<std::string>{"a", "", "ccc"}},
        {"a.u64", std::vector<uint64_t>{uint64_t(1) << 63}},
        {"a.i64", std::vector<int64_t>{L::max(), L::min()}},
        {"a.f64", std::vector<double>{3.25, -0.0}},
        {"a.empty", std::vector<float>{}},
        {"a.nested", GgufValue::array(GgufType::ARRAY, {std::vector<uint8_t>{1, 2}, std::vector<std::string>{"x", "yz"},
                                                        GgufValue::array(GgufType::ARRAY, {std::vector<int64_t>{-5}}),
                                                        GgufValue::array(GgufType::STRING, {})})},
    };
    const fs::path p = test_temp_dir("gguf-meta") / "meta.gguf";
    gguf_write(p, in, {});
    GgufFile f(p);
    const GgufMetadata& m = f.metadata();
    std::vector<GgufKeyValue> out = m.values();
    REQUIRE(out.size() == in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        INFO(in[i].key);
        CHECK(out[i].key == in[i].key);
        CHECK(out[i].value == in[i].value);
        CHECK(m.get_value(in[i].key) == in[i].value);
    }
    REQUIRE(m.entries().size() == in.size());
    CHECK(m.entries()[15].type == GgufType::ARRAY);
    CHECK(m.entries()[15].elem_type == GgufType::UINT8);
    CHECK(m.entries()[15].count == 3);

    // Typed accessors: any integer type in range, floats of either width.
    CHECK(m.get_int<uint8_t>("u8") == 255);
    CHECK(m.get_int("i8") == -128);
    CHECK(m.get_int<uint64_t>("u64") == 18446744073709551615ull);
    CHECK(m.get_int("i64") == L::min());
    CHECK(m.get_int<int16_t>("u8") == 255);
    CHECK(m.get_float("f32") == 1.5);
    CHECK(m.get_float("f64") == -2.25e300);
    CHECK(m.get_bool("bool.true"));
    CHECK(!m.get_bool("bool.false"));
    CHECK(m.get_string("str") == "h\xc3\xa9llo");
    CHECK(m.get_string("str.nul") == std::string_view("a\0b", 3));
    CHECK(m.get_ints<uint8_t>("a.u8") == std::vector<uint8_t>{0, 1, 255});
    CHECK(m.get_ints("a.i8") == std::vector<int64_t>{-1, 2});
    CHECK(m.get_ints<int>("a.u32") == std::vector<int>{7, 8, 9});
    CHECK(m.get_ints<uint64_t>("a.u64") == std::vector<uint64_t>{uint64_t(1) << 63});
    CHECK(m.get_floats("a.f32") == std::vector<float>{0.5f, -1e-3f});
    CHECK(m.get_floats("a.f64") == std::vector<float>{3.25f, -0.0f});
    CHECK(m.get_floats("a.empty").empty());
    CHECK(m.get_strings("a.str") == std::vector<std::string_view>{"a", "", "ccc"});
    CHECK(*m.find_int<int>("u16") == 65535);
    CHECK(!m.find_strings("nope"));
    CHECK(!m.find_value("nope"));

    // Wrong types and out-of-range integers, each one line naming file and key.
    const std::string file = p.string();
    CHECK_THROWS_WITH(m.get_string("u32"), file + ": u32: is uint32, not a string");
    CHECK_THROWS_WITH(m.get_int("str"), file + ": str: is string, not an integer");
    CHECK_THROWS_WITH(m.get_int("a.u32"), file + ": a.u32: is an array of uint32, not an integer");
    CHECK_THROWS_WITH(m.get_float("u32"), file + ": u32: is uint32, not a float");
    CHECK_THROWS_WITH(m.get_bool("u8"), file + ": u8: is uint8, not a bool");
    CHECK_THROWS_WITH(m.get_strings("a.u32"), file + ": a.u32: is an array of uint32, not an array of strings");
    CHECK_THROWS_WITH(m.get_floats("a.i32"), file + ": a.i32: is an array of int32, not an array of floats");
    CHECK_THROWS_WITH(m.get_ints("a.str"), file + ": a.str: is an array of string, not an array of integers");
    CHECK_THROWS_WITH(m.find_string("u8"), file + ": u8: is uint8, not a string");
    CHECK_THROWS_WITH(m.get_int<int8_t>("u8"), file + ": u8: value 255 is out of range [-128, 127]");
    CHECK_THROWS_WITH(m.get_int<uint32_t>("i8"), file + ": i8: value -128 is out of range [0, 4294967295]");
    CHECK_THROWS_WITH(m.get_int<int64_t>("u64"),
                      file +
                          ": u64: value 18446744073709551615 is out of range [-9223372036854775808, "
                          "9223372036854775807]");
    CHECK_THROWS_WITH(m.get_ints<uint8_t>("a.i32"), file + ": a.i32: element 0 value -1 is out of range [0, 255]");
    CHECK_THROWS_WITH(m.get_value("nope"), file + ": nope: missing key");
    CHECK_THROWS_WITH(m.get_strings("nope"), file + ": nope: missing key");
}

TEST_CASE("gguf: write then read tensors of every type under several alignments", "[gguf]") {
    struct Spec {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;
    };
    const std::vector<Spec> specs = {
        {"f32.1d", DType::F32, {5}},
        {"f16.2d", DType::F16, {3, 7}},
        {"bf16.3d", DType::BF16, {2, 3, 5}},
        {"q8_0", DType::Q8_0, {3, 64}},
        {"q4_0.4d", DType::Q4_0, {2, 1, 3, 32}},
        {"q4_k", DType::Q4_K, {2, 256}},
        {"q5_k.experts", DType::Q5_K, {2, 3, 512}},
        {"q6_k", DType::Q6_K, {1, 256}},
    };
    for (uint32_t alignment : {0u, 1u, 8u, 64u, 4096u}) {  // 0: general.alignment absent (32)
        INFO("alignment " << alignment);
        std::vector<std::vector<uint8_t>> data;
        std::vector<TensorView> in;
        for (size_t i = 0; i < specs.size(); ++i) {
            data.push_back(pattern(tensor_nbytes(specs[i].dtype, specs[i].shape, specs[i].name), unsigned(i)));
            in.push_back(view(specs[i].name, specs[i].dtype, specs[i].shape, data.back().data()));
        }
        std::vector<GgufKeyValue> meta = {{"general.architecture", "test"}};
        if (alignment) meta.push_back({"general.alignment", alignment});
        const uint64_t align = alignment ? alignment : 32;
        const fs::path p = test_temp_dir("gguf-tensors") / "t.gguf";
        gguf_write(p, meta, in);

        const std::string bytes = read_file(p);
        GgufHeader h = gguf_parse_header(bytes, bytes.size(), p.string());
        CHECK(h.version == 3);
        CHECK(h.alignment == align);
        CHECK(h.data_start % align == 0);
        CHECK(bytes.size() % align == 0);  // the last tensor is padded too
        GgufFile f(p);
        REQUIRE(f.tensors().size() == in.size());
        const char* base = static_cast<const char*>(f.tensors()[0].data) - h.offsets[0];
        for (size_t i = 0; i < in.size(); ++i) {
            const TensorView& t = f.tensors()[i];  // file order is the written order
            INFO(t.name);
            CHECK(t.name == in[i].name);
            CHECK(t.dtype == in[i].dtype);
            CHECK(t.shape == in[i].shape);
            CHECK(t.nbytes == in[i].nbytes);
            CHECK(h.offsets[i] % align == 0);
            CHECK(static_cast<const char*>(t.data) == base + h.offsets[i]);
            CHECK(std::memcmp(t.data, data[i].data(), t.nbytes) == 0);
            CHECK(f.find(t.name) == &t);
        }
        // Streaming the data through a writer gives the same file.
        const fs::path q = p.parent_path() / "streamed.gguf";
        gguf_write(q, meta, in, [&](size_t i, std::ostream& out) {
            out.write(reinterpret_cast<const char*>(data[i].data()), std::streamsize(data[i].size()));
        });
        CHECK(read_file(q) == bytes);
    }
}

TEST_CASE("gguf: writer refuses what readers would not load", "[gguf]") {
    const fs::path dir = test_temp_dir("gguf-writer");
    const fs::path p = dir / "w.gguf";
    const std::string who = "gguf_write: " + p.string() + ": ";
    std::vector<float> x(64);
    const TensorView good = view("x", DType::F32, {64}, x.data());
    auto refuses = [&](const std::vector<GgufKeyValue>& meta, const std::vector<TensorView>& tensors,
                       const std::string& message) {
        CHECK_THROWS_WITH(gguf_write(p, meta, tensors), message);
        CHECK(!fs::exists(p));
    };
    refuses({{"k", 1}, {"k", 2}}, {}, who + "k: duplicate key");
    refuses({{"general.alignment", uint64_t(32)}}, {}, who + "general.alignment: is uint64, not uint32");
    refuses({{"general.alignment", uint32_t(48)}}, {}, who + "general.alignment: 48 is not a power of two");
    refuses({{"general.alignment", uint32_t(0)}}, {}, who + "general.alignment: 0 is not a power of two");
    refuses({{"a", GgufValue::array(GgufType::UINT32, {uint32_t(1), "two"})}}, {},
            who + "a: array element 1 is string, not uint32");
    refuses({{"a", GgufValue::array(GgufType(13), {})}}, {}, who + "a: array of unknown value type 13");
    refuses({}, {good, good}, who + "x: duplicate tensor name");
    TensorView long_name = good;
    long_name.name = std::string(64, 'n');
    refuses({}, {long_name}, who + long_name.name + ": name of 64 bytes is longer than 63");
    TensorView five = view("five", DType::F32, {1, 1, 1, 2, 32}, x.data());
    refuses({}, {five}, who + "five: shape [1, 1, 1, 2, 32] has not 1 to 4 dimensions");
    TensorView empty = view("empty", DType::F32, {0, 4}, x.data());
    refuses({}, {empty}, who + "empty: shape [0, 4] has a dimension below 1");
    TensorView bad_row = good;
    bad_row.dtype = DType::Q8_0;
    bad_row.shape = {2, 48};
    refuses({}, {bad_row}, who + "x: Q8_0 rows must hold a multiple of 32 elements, not [2, 48]");
    TensorView wrong_bytes = good;
    wrong_bytes.nbytes = 12;
    refuses({}, {wrong_bytes}, who + "x: nbytes 12 does not match F32 [64] (256 bytes)");
    CHECK_THROWS_WITH(gguf_write(p, {}, {good}, [](size_t, std::ostream& out) { out << "short"; }),
                      who + "x: the data writer wrote 5 bytes, not 256");
    CHECK(!fs::exists(p));

    // Arrays nest 16 deep, no deeper, on both sides.
    GgufValue v = std::vector<uint8_t>{};
    for (int depth = 1; depth < 16; ++depth) v = GgufValue::array(GgufType::ARRAY, {v});
    const fs::path deep = dir / "deep.gguf";
    gguf_write(deep, {{"deep", v}}, {});
    CHECK(GgufFile(deep).metadata().get_value("deep") == v);
    refuses({{"deep", GgufValue::array(GgufType::ARRAY, {v})}}, {}, who + "deep: arrays nested more than 16 deep");
    std::string b = read_file(deep);
    patch_le(b, info_at(b, "deep") + 4 + 15 * 12, uint32_t(GgufType::ARRAY), 4);  // the innermost element type
    write_bytes(deep, b);
    CHECK(open_error(deep) == deep.string() + ": deep: arrays nested more than 16 deep");

    // A device, pipe or folder at the target is refused, as file_write_atomic does.
    fs::create_directory(dir / "folder");
    CHECK_THROWS_WITH(gguf_write(dir / "folder", {}, {good}), Catch::Contains("exists and is not a regular file"));
}

// ---- corrupt files ----------------------------------------------------------

TEST_CASE("gguf: bad magic, version and byte order", "[gguf]") {
    const fs::path p = test_temp_dir("gguf-magic") / "bad.gguf";
    const std::string f = p.string();
    CHECK(patched_error(p, [](std::string& b) { b[3] = 'X'; }) ==
          f + ": not a GGUF file (magic 'GGUX', expected 'GGUF')");
    CHECK(patched_error(p, [](std::string& b) { patch_le(b, 4, 1, 4); }) ==
          f + ": GGUF version 1 is not supported (versions 2 and 3 are)");
    CHECK(patched_error(p, [](std::string& b) { patch_le(b, 4, 4, 4); }) ==
          f + ": GGUF version 4 is not supported (versions 2 and 3 are)");
    CHECK(patched_error(p, [](std::string& b) { patch_le(b, 4, 0x03000000, 4); }) ==
          f + ": big-endian GGUF (version 3) is not supported; only little-endian files are");
    // Version 2 has the same layout as 3.
    CHECK(patched_error(p, [](std::string& b) { patch_le(b, 4, 2, 4); }) == "");
    write_bytes(p, "");
    CHECK(open_error(p) ==
          f + ": magic: truncated header: 4 bytes at offset 0 would run past the end of the file (0 bytes)");
}

TEST_CASE("gguf: a header cut anywhere is refused in one line", "[gguf]") {
    const fs::path p = test_temp_dir("gguf-cut") / "cut.gguf";
    const std::string bytes = Sample().write(p);
    const GgufHeader h = gguf_parse_header(bytes, bytes.size(), p.string());
    const size_t infos_end = info_at(bytes, "t.q8") + 4 + 2 * 8 + 4 + 8;  // the last tensor info's end
    const size_t data_end = h.data_start + 64 + 136;                      // t.f32, then t.q8
    for (size_t n = 0; n <= data_end; ++n) {
        INFO("cut at " << n << " of " << bytes.size());
        const std::string cut = bytes.substr(0, n);
        const std::string m = moe_error_of([&] { gguf_parse_header(cut, cut.size(), p.string()); });
        if (n == data_end)
            CHECK(m == "");  // only the padding after the last tensor is gone
        else
            check_error_line(m, p,
                             n < infos_end ? "would run past the end of the file (" + std::to_string(n) + " bytes)"
                                           : "runs past the end of the file");
    }
    // Through the file, in the tensor infos and in the data.
    write_bytes(p, bytes.substr(0, infos_end - 4));
    CHECK(open_error(p) == p.string() + ": t.q8: truncated header: 8 bytes at offset " + std::to_string(infos_end - 8) +
                               " would run past the end of the file (" + std::to_string(infos_end - 4) + " bytes)");
    write_bytes(p, bytes.substr(0, data_end - 1));
    CHECK(open_error(p) == p.string() +
                               ": t.q8: data at offset 64 (136 bytes) runs past the end of the file (the data "
                               "section holds 199 bytes from byte " +
                               std::to_string(h.data_start) + "; truncated file?)");
}

TEST_CASE("gguf: string and array lengths past the end of the file", "[gguf]") {
    const fs::path p = test_temp_dir("gguf-lengths") / "len.gguf";
    // The key k.str's value: its length field follows the key and the type.
    check_error_line(patched_error(p, [](std::string& b) { patch_le(b, info_at(b, "k.str") + 4, 1000000, 8); }), p,
                     "k.str: string of 1000000 bytes at offset");
    check_error_line(patched_error(p, [](std::string& b) { patch_le(b, info_at(b, "k.str") + 4, ~uint64_t(0), 8); }), p,
                     "k.str: string of 18446744073709551615 bytes at offset");
    // A key's own length.
    check_error_line(
        patched_error(p, [](std::string& b) { patch_le(b, find_once(b, "k.str") - 8, uint64_t(1) << 62, 8); }), p,
        "metadata KV 2 key: string of 4611686018427387904 bytes at offset");
    // Array counts: past the end, and so large that count * size overflows.
    for (uint64_t count : {uint64_t(1000), uint64_t(1) << 62, ~uint64_t(0)}) {
        check_error_line(patched_error(p, [&](std::string& b) { patch_le(b, info_at(b, "k.array") + 8, count, 8); }), p,
                         "k.array: array of " + std::to_string(count) + " uint32 at offset");
    }
    check_error_line(patched_error(p,
                                   [](std::string& b) {
                                       const size_t at = info_at(b, "k.array");
                                       patch_le(b, at + 4, uint32_t(GgufType::STRING), 4);
                                       patch_le(b, at + 8, uint64_t(1) << 61, 8);
                                   }),
                     p, "k.array: array of 2305843009213693952 strings at offset");
    check_error_line(patched_error(p, [](std::string& b) { patch_le(b, info_at(b, "k.array") + 4, 13, 4); }), p,
                     "k.array: array of unknown value type 13");
    check_error_line(patched_error(p, [](std::string& b) { patch_le(b, info_at(b, "k.uint"), 13, 4); }), p,
                     "k.uint: unknown value type 13");
    check_error_line(patched_error(p, [](std::string& b) { b[info_at(b, "k.bool") + 4] = 2; }), p,
                     "k.bool: bool value 2 is not 0 or 1");
}

TEST_CASE("gguf: absurd tensor and KV counts", "[gguf]") {
    const fs::path p = test_temp_dir("gguf-counts") / "counts.gguf";
    const std::string f = p.string();
    std::string size;
    const std::string m = patched_error(p, [&](std::string& b) {
        patch_le(b, 16, uint64_t(1) << 60, 8);
        size = std::to_string(b.size());
    });
    CHECK(m == f +
                   ": metadata KV count: 1152921504606846976 metadata KVs (13 bytes or more each) at offset 24 would "
                   "run past the end of the file (" +
                   size + " bytes)");
    CHECK(patched_error(p, [](std::string& b) { patch_le(b, 8, ~uint64_t(0), 8); }) ==
          f +
              ": tensor count: 18446744073709551615 tensor infos (32 bytes or more each) at offset 24 would run past "
              "the end of the file (" +
              size + " bytes)");
}

TEST_CASE("gguf: bad tensor infos", "[gguf]") {
    const fs::path p = test_temp_dir("gguf-infos") / "infos.gguf";
    const std::string f = p.string();
    auto info = [&](auto patch) { return patched_error(p, [&](std::string& b) { patch(b, info_at(b, "t.q8")); }); };
    // t.q8: n_dims at +0, ne[0] at +4, ne[1] at +12, type at +20, offset at +24.
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at, 5, 4); }) == f + ": t.q8: n_dims 5 is not 1 to 4");
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at, 0, 4); }) == f + ": t.q8: n_dims 0 is not 1 to 4");
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at + 12, 0, 8); }) ==
          f + ": t.q8: ne[1] is 0 (a dimension must be at least 1)");
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at + 12, uint64_t(1) << 63, 8); }) ==
          f + ": t.q8: ne[1] is 9223372036854775808 (more than 2^63 - 1)");
    CHECK(info([](std::string& b, size_t at) {
              patch_le(b, at + 4, uint64_t(1) << 34, 8);
              patch_le(b, at + 12, uint64_t(1) << 34, 8);
          }) == f + ": t.q8: shape [17179869184, 17179869184] is too large");
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at + 12, uint64_t(1) << 57, 8); }) ==
          f + ": t.q8: shape [144115188075855872, 64] is too large");
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at + 4, 48, 8); }) ==
          f + ": t.q8: Q8_0 rows must hold a multiple of 32 elements, not [2, 48]");
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at + 20, 10, 4); }) ==
          f + ": t.q8: type q2_K is not supported (supported: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K MXFP4)");
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at + 20, 77, 4); }) == f + ": t.q8: unknown type id 77");
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at + 24, 80, 8); }) ==
          f + ": t.q8: offset 80 is not a multiple of the alignment 32");
    check_error_line(info([](std::string& b, size_t at) { patch_le(b, at + 24, 1 << 20, 8); }), p,
                     "t.q8: data at offset 1048576 (136 bytes) runs past the end of the file");
    check_error_line(info([](std::string& b, size_t at) { patch_le(b, at + 24, uint64_t(1) << 63, 8); }), p,
                     "runs past the end of the file");
    CHECK(info([](std::string& b, size_t at) { patch_le(b, at + 24, 32, 8); }) ==
          f + ": t.q8: data [32, 168) overlaps tensor 't.f32' [0, 64)");
}

TEST_CASE("gguf: duplicate names and keys, bad alignment", "[gguf]") {
    const fs::path p = test_temp_dir("gguf-dups") / "dups.gguf";
    const std::string f = p.string();
    {
        std::vector<float> x(8);
        gguf_write(p, {{"k.one", 1}, {"k.two", 2}},
                   {view("ta", DType::F32, {8}, x.data()), view("tb", DType::F32, {8}, x.data())});
        std::string b = read_file(p);
        const size_t key_two = find_once(b, "k.two");
        b[find_once(b, "tb") + 1] = 'a';
        write_bytes(p, b);
        CHECK(open_error(p) == f + ": ta: duplicate tensor name");
        b.replace(key_two, 5, "k.one");
        write_bytes(p, b);
        CHECK(open_error(p) == f + ": k.one: duplicate key");
    }
    const auto alignment_at = [](const std::string& b) { return info_at(b, "general.alignment"); };
    CHECK(patched_error(p, [&](std::string& b) { patch_le(b, alignment_at(b) + 4, 48, 4); }) ==
          f + ": general.alignment: 48 is not a power of two");
    CHECK(patched_error(p, [&](std::string& b) { patch_le(b, alignment_at(b) + 4, 0, 4); }) ==
          f + ": general.alignment: 0 is not a power of two");
    CHECK(patched_error(p, [&](std::string& b) { patch_le(b, alignment_at(b), uint32_t(GgufType::INT32), 4); }) ==
          f + ": general.alignment: is int32, not uint32");
}
