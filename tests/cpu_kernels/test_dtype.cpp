// cpu_kernels/dtype.h: the element-type table against ggml's documented
// type ids and block layouts (ggml.h, ggml-common.h).
#include <catch2/catch.hpp>
#include <string>
#include <tuple>

#include "cpu_kernels/dtype.h"

TEST_CASE("dtype: names, ggml ids and block layouts", "[dtype]") {
    struct Row {
        DType t;
        const char* name;
        uint32_t id;
        int block, bytes;
    };
    for (const Row& r : {Row{DType::F32, "F32", 0, 1, 4}, Row{DType::F16, "F16", 1, 1, 2},
                         Row{DType::BF16, "BF16", 30, 1, 2}, Row{DType::Q8_0, "Q8_0", 8, 32, 34},
                         Row{DType::Q4_0, "Q4_0", 2, 32, 18}, Row{DType::Q4_K, "Q4_K", 12, 256, 144},
                         Row{DType::Q5_K, "Q5_K", 13, 256, 176}, Row{DType::Q6_K, "Q6_K", 14, 256, 210}}) {
        INFO(r.name);
        CHECK(std::string(dtype_name(r.t)) == r.name);
        CHECK(dtype_info(r.t).ggml_id == r.id);
        CHECK(dtype_info(r.t).block == r.block);
        CHECK(dtype_info(r.t).block_bytes == r.bytes);
        CHECK(dtype_quantized(r.t) == (r.block > 1));
        REQUIRE(dtype_from_ggml(r.id).has_value());
        CHECK(*dtype_from_ggml(r.id) == r.t);
        CHECK(dtype_row_bytes(r.t, 512) == size_t(512 / r.block * r.bytes));
    }
}

TEST_CASE("dtype: rows that are not whole blocks, and types not read", "[dtype]") {
    CHECK(!dtype_row_bytes(DType::Q4_K, 100).has_value());
    CHECK(!dtype_row_bytes(DType::Q8_0, -32).has_value());
    CHECK(dtype_row_bytes(DType::F32, 3) == size_t(12));
    CHECK(!dtype_from_ggml(10).has_value());  // q2_K
    CHECK(std::string(ggml_type_name(10)) == "q2_K");
    CHECK(std::string(ggml_type_name(23)) == "iq4_xs");
    CHECK(std::string(ggml_type_name(30)) == "bf16");
    CHECK(ggml_type_name(4) == nullptr);   // removed from ggml
    CHECK(ggml_type_name(1000) == nullptr);
    CHECK(!dtype_from_ggml(1000).has_value());
}

TEST_CASE("dtype: the _R8 types are Q8_0, Q4_K and Q6_K in groups of 8 rows, in memory only", "[dtype]") {
    for (auto [r8, plain, name, id] : {std::tuple{DType::Q8_0_R8, DType::Q8_0, "Q8_0_R8", 8u},
                                       std::tuple{DType::Q4_K_R8, DType::Q4_K, "Q4_K_R8", 12u},
                                       std::tuple{DType::Q6_K_R8, DType::Q6_K, "Q6_K_R8", 14u}}) {
        INFO(name);
        CHECK(std::string(dtype_name(r8)) == name);
        CHECK(dtype_row_group(r8) == 8);
        CHECK(dtype_plain(r8) == plain);
        CHECK(dtype_interleaved(plain) == r8);
        CHECK(dtype_row_bytes(r8, 512) == dtype_row_bytes(plain, 512));
        CHECK(dtype_quantized(r8));
        CHECK(!dtype_info(r8).in_files);
        CHECK(*dtype_from_ggml(id) == plain);  // a file's type is never read as the interleaved one
    }
    for (DType t : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        CHECK(dtype_row_group(t) == 1);
        CHECK(dtype_plain(t) == t);
    }
    CHECK(!dtype_interleaved(DType::Q4_0).has_value());
    CHECK(!dtype_interleaved(DType::Q5_K).has_value());
    CHECK(!dtype_interleaved(DType::BF16).has_value());
}

TEST_CASE("dtype: a weight view's rows", "[dtype]") {
    static const char data[3 * 2 * 144] = {};
    WeightView v = weight_view(DType::Q4_K, data, 3, 512);
    CHECK(v.row_bytes == 2 * 144);
    CHECK(v.bytes() == sizeof data);
    CHECK(v.row(2) == data + 2 * 2 * 144);
    CHECK(!v.empty());
    CHECK(WeightView{}.empty());
}
