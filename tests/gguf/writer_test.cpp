// The Writer: exact byte layout, write-then-read of every value type and tensor encoding, and byte-identical
// rewrites of the golden files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/shared_dir.h"
#include "gguf/gguf_bytes.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "tensor/quantize.h"

using offgrid::gguf::Reader;
using offgrid::gguf::Value;
using offgrid::gguf::ValueType;
using offgrid::gguf::Writer;
using offgrid::tensor::ElemType;
using offgrid::test::GgufBytes;

namespace {

std::vector<uint8_t> slurp(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Value scalar(ValueType t, uint64_t u, int64_t i, double f) {
    Value v;
    v.type = t;
    v.u = u;
    v.i = i;
    v.f = f;
    return v;
}

}  // namespace

TEST(Writer, ExactBytesOfASmallFile) {
    Writer w;
    w.set_u32("n", 7);
    w.set_string("s", "ab");
    w.add_tensor("t", {2}, ElemType::F32, std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8});
    GgufBytes expected;
    expected.header(1, 2).key("n", 4).u32(7).key("s", 8).str("ab");
    expected.tensor("t", {2}, 0, 0).pad_to(32);
    expected.raw(std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8)).pad_to(32);
    EXPECT_EQ(w.to_bytes(), expected.b);
    EXPECT_EQ(w.file_size(), expected.size());
}

TEST(Writer, NoTensorsMeansNoPadding) {
    Writer w;
    w.set_bool("b", true);
    GgufBytes expected;
    expected.header(0, 1).key("b", 7).u8(1);
    EXPECT_EQ(w.to_bytes(), expected.b);
}

TEST(Writer, EveryValueTypeRoundTrips) {
    Writer w;
    w.set("u8", scalar(ValueType::U8, 255, 0, 0));
    w.set("i8", scalar(ValueType::I8, 0, -128, 0));
    w.set("u16", scalar(ValueType::U16, 65535, 0, 0));
    w.set("i16", scalar(ValueType::I16, 0, -32768, 0));
    w.set_u32("u32", 4000000000u);
    w.set_i32("i32", -2000000000);
    w.set_u64("u64", 0xfedcba9876543210ull);
    w.set("i64", scalar(ValueType::I64, 0, INT64_MIN, 0));
    w.set_f32("f32", -1.25e-20f);
    w.set("f64", scalar(ValueType::F64, 0, 0, 3.141592653589793));
    w.set_bool("bool", false);
    w.set_string("string", std::string("utf8 \xc4\xa0 and a \0 byte", 20));
    w.set_strings("strings", {"a", "", "ccc"});
    w.set_u32s("u32s", {1, 2, 3});
    w.set_i32s("i32s", {-1, 0, 1});
    w.set_u64s("u64s", {1, 1000003, 998244353});
    w.set_f32s("f32s", {0.5f, -0.0f});
    w.set_bools("bools", {true, false, true});
    w.set("nested", Value::make_array(ValueType::ARRAY, {Value::make_array(ValueType::U8, {scalar(ValueType::U8, 1, 0, 0)}),
                                                         Value::make_array(ValueType::STRING, {Value::make_string("x")})}));
    w.set("empty", Value::make_array(ValueType::F64, {}));
    const auto bytes = w.to_bytes();
    const Reader r = Reader::from_memory(bytes.data(), bytes.size());
    ASSERT_EQ(r.metadata().size(), w.metadata().size());
    for (size_t k = 0; k < w.metadata().size(); ++k) {
        EXPECT_EQ(r.metadata()[k].key, w.metadata()[k].key);
        EXPECT_EQ(r.metadata()[k].value, w.metadata()[k].value) << w.metadata()[k].key;
    }
    EXPECT_EQ(r.get_u32("u32"), 4000000000u);
    EXPECT_EQ(r.find("i64")->i, INT64_MIN);
    EXPECT_EQ(r.find("u64")->u, 0xfedcba9876543210ull);
    EXPECT_EQ(r.get_f32("f64"), static_cast<float>(3.141592653589793));
    EXPECT_EQ(r.get_string("string").size(), 20u);
}

TEST(Writer, TensorsFromFloatsInEveryEncoding) {
    std::vector<float> x(64 * 3);
    for (size_t j = 0; j < x.size(); ++j) x[j] = std::cos(0.1f * static_cast<float>(j)) * 3.0f;
    Writer w;
    w.set_u32("general.alignment", 64);
    w.add_tensor_f32("f32", {64, 3}, ElemType::F32, x);
    w.add_tensor_f32("f16", {64, 3}, ElemType::F16, x);
    w.add_tensor_f32("bf16", {64, 3}, ElemType::BF16, x);
    w.add_tensor_f32("q8_0", {64, 3}, ElemType::Q8_0, x);
    w.add_tensor_f32("one", {1}, ElemType::F32, std::vector<float>{42.0f});
    const auto bytes = w.to_bytes();
    const Reader r = Reader::from_memory(bytes.data(), bytes.size());
    EXPECT_EQ(r.alignment(), 64u);
    EXPECT_EQ(r.data_offset() % 64, 0u);
    ASSERT_EQ(r.tensors().size(), 5u);
    uint64_t expected_offset = 0;
    for (const auto & t : r.tensors()) {
        EXPECT_EQ(t.offset, expected_offset) << t.name;
        expected_offset += (t.n_bytes + 63) / 64 * 64;
        if (t.name == "one") continue;
        EXPECT_EQ(t.ne, (std::vector<int64_t>{64, 3}));
        const auto encoded = offgrid::tensor::quantize(t.type, x);
        ASSERT_EQ(t.n_bytes, encoded.size());
        EXPECT_EQ(std::memcmp(t.data, encoded.data(), encoded.size()), 0) << t.name;
    }
    EXPECT_EQ(r.find_tensor("f16")->type, ElemType::F16);
    EXPECT_EQ(r.find_tensor("q8_0")->n_bytes, 3u * 2u * 34u);
    std::vector<float> back(x.size());
    const auto * f32 = r.find_tensor("f32");
    offgrid::tensor::dequantize_row(f32->type, f32->data, back.data(), back.size());
    EXPECT_EQ(back, x);
    float one = 0;
    offgrid::tensor::dequantize_row(ElemType::F32, r.find_tensor("one")->data, &one, 1);
    EXPECT_EQ(one, 42.0f);
    EXPECT_EQ(bytes.size() % 64, 0u);
}

TEST(Writer, SetReplacesInPlaceAndEraseRemoves) {
    Writer w;
    w.set_u32("a", 1);
    w.set_u32("b", 2);
    w.set_string("a", "now a string");
    ASSERT_EQ(w.metadata().size(), 2u);
    EXPECT_EQ(w.metadata()[0].key, "a");
    EXPECT_EQ(w.metadata()[0].value.s, "now a string");
    w.set_u32("general.alignment", 128);
    EXPECT_EQ(w.alignment(), 128u);
    EXPECT_TRUE(w.erase("general.alignment"));
    EXPECT_EQ(w.alignment(), 32u);
    EXPECT_FALSE(w.erase("general.alignment"));
}

TEST(Writer, RejectsBadInput) {
    Writer w;
    EXPECT_THROW(w.set_u32("", 1), offgrid::Error);
    EXPECT_THROW(w.set_u32("general.alignment", 48), offgrid::Error);
    EXPECT_THROW(w.set_u64("general.alignment", 64), offgrid::Error);
    EXPECT_THROW(w.set("mixed", Value::make_array(ValueType::U32, {Value::make_u32(1), Value::make_i32(2)})),
                 offgrid::Error);
    Value deep = Value::make_array(ValueType::U8, {});
    for (int level = 1; level < 8; ++level) deep = Value::make_array(ValueType::ARRAY, {deep});
    EXPECT_NO_THROW(w.set("deep8", deep));
    deep = Value::make_array(ValueType::ARRAY, {deep});
    EXPECT_THROW(w.set("deep9", deep), offgrid::Error);

    const std::vector<float> four(4, 1.0f);
    w.add_tensor_f32("t", {4}, ElemType::F32, four);
    EXPECT_THROW(w.add_tensor_f32("t", {4}, ElemType::F32, four), offgrid::Error);          // duplicate
    EXPECT_THROW(w.add_tensor_f32("u", {5}, ElemType::F32, four), offgrid::Error);          // count
    EXPECT_THROW(w.add_tensor_f32("u", {4, 0}, ElemType::F32, four), offgrid::Error);       // zero dim
    EXPECT_THROW(w.add_tensor_f32("u", {1, 1, 1, 1, 4}, ElemType::F32, four), offgrid::Error);
    EXPECT_THROW(w.add_tensor_f32("u", {4}, ElemType::Q8_0, four), offgrid::Error);         // partial block
    EXPECT_THROW(w.add_tensor_f32("u", {256}, ElemType::Q4_K, std::vector<float>(256)), offgrid::Error);
    EXPECT_THROW(w.add_tensor("u", {4}, ElemType::F32, std::vector<uint8_t>(15)), offgrid::Error);
    EXPECT_THROW(w.add_tensor("", {4}, ElemType::F32, std::vector<uint8_t>(16)), offgrid::Error);
    EXPECT_EQ(w.tensor_count(), 1u);
}

TEST(Writer, WriteFileThenOpen) {
    const auto dir = std::filesystem::temp_directory_path() / ("offgrid_writer_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "w.gguf").string();
    Writer w;
    w.set_string("general.architecture", "qwen4exp");
    w.add_tensor_f32("x", {32, 2}, ElemType::Q8_0, std::vector<float>(64, 127.0f));  // scale exactly 1
    w.write_file(path);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    EXPECT_EQ(slurp(path), w.to_bytes());
    const Reader r = Reader::open(path);
    EXPECT_EQ(r.get_string("general.architecture"), "qwen4exp");
    std::vector<float> back(64);
    offgrid::tensor::dequantize_row(ElemType::Q8_0, r.find_tensor("x")->data, back.data(), 64);
    for (float v : back) EXPECT_EQ(v, 127.0f);
    EXPECT_THROW(w.write_file((dir / "no_such_dir" / "w.gguf").string()), offgrid::Error);
    std::filesystem::remove_all(dir);
}

TEST(Writer, GoldenFilesRewriteToTheSameBytes) {
    OFFGRID_REQUIRE_SHARED();
    std::vector<std::string> files = {offgrid::test::shared_dir() + "/data/ggml-vocab-qwen35.gguf"};
    for (const auto & e : std::filesystem::directory_iterator(offgrid::test::shared_dir() + "/golden/models")) {
        files.push_back(e.path().string());
    }
    ASSERT_EQ(files.size(), 5u);
    for (const auto & path : files) {
        SCOPED_TRACE(path);
        const auto original = slurp(path);
        const Reader r = Reader::open(path);
        const auto rewritten = Writer::from_reader(r).to_bytes();
        ASSERT_EQ(rewritten.size(), original.size());
        EXPECT_TRUE(rewritten == original);
        // And through a second read: the same content.
        const Reader again = Reader::from_memory(rewritten.data(), rewritten.size());
        EXPECT_EQ(again.metadata().size(), r.metadata().size());
        ASSERT_EQ(again.tensors().size(), r.tensors().size());
        for (size_t k = 0; k < r.tensors().size(); ++k) {
            EXPECT_EQ(again.tensors()[k].name, r.tensors()[k].name);
            EXPECT_EQ(again.tensors()[k].offset, r.tensors()[k].offset);
        }
    }
}

// A lazy tensor's floats are drawn while the file is written: the bytes equal those of the same floats given up
// front, in every encoding, and a producer that gives the wrong count fails the write.
TEST(Writer, LazyTensorsWriteTheSameBytes) {
    std::vector<float> x(64 * 3);
    for (size_t j = 0; j < x.size(); ++j) x[j] = std::sin(0.3f * static_cast<float>(j)) * 2.0f;
    Writer eager, lazy;
    int calls = 0;
    for (const ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::Q8_0}) {
        const std::string name(offgrid::tensor::traits(type).name);
        eager.add_tensor_f32(name, {64, 3}, type, x);
        lazy.add_tensor_f32_lazy(name, {64, 3}, type, [&] { ++calls; return x; });
    }
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(lazy.file_size(), eager.file_size());
    EXPECT_EQ(lazy.to_bytes(), eager.to_bytes());
    EXPECT_EQ(calls, 4);
    Writer bad;
    bad.add_tensor_f32_lazy("short", {64, 3}, ElemType::F32, [&] { return std::vector<float>(64); });
    EXPECT_THROW(bad.to_bytes(), offgrid::Error);
}
