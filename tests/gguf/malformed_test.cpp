// Hand-made malformed GGUF files: each must be rejected with a FileError naming the field and byte offset.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "gguf/gguf_bytes.h"
#include "gguf/reader.h"

using offgrid::FileError;
using offgrid::gguf::Reader;
using offgrid::test::GgufBytes;

namespace {

constexpr uint32_t kU8 = 0, kU32 = 4, kI32 = 5, kBool = 7, kString = 8, kArray = 9, kU64 = 10;
constexpr uint32_t kF32 = 0, kF16 = 1, kQ8_0 = 8, kI8 = 24;
constexpr uint64_t kHeader = 24;  // magic, version, two counts

// Expects the buffer to be rejected at `offset`, in `field`, with `what` in the message.
void expect_rejected(const GgufBytes & file, const std::string & field, uint64_t offset, const std::string & what) {
    try {
        Reader::from_memory(file.b.data(), file.b.size(), "bad.gguf");
        ADD_FAILURE() << "accepted; expected " << field << " at " << offset << ": " << what;
    } catch (const FileError & e) {
        EXPECT_EQ(e.file(), "bad.gguf");
        EXPECT_EQ(e.field(), field) << e.what();
        EXPECT_EQ(e.offset(), offset) << e.what();
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        const std::string prefix = "bad.gguf: at byte " + std::to_string(offset) + ": " + field + ": ";
        EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
    }
}

// A header with one u32 key "k" whose value starts right after; offset of the value is 24 + 8 + 1 + 4.
constexpr uint64_t kValueAt = kHeader + 8 + 1 + 4;

}  // namespace

TEST(Malformed, EmptyFile) { expect_rejected(GgufBytes{}, "header.magic", 0, "truncated"); }

TEST(Malformed, ShorterThanMagic) {
    GgufBytes f;
    f.raw("GGU");
    expect_rejected(f, "header.magic", 0, "needs 4 bytes but only 3 remain");
}

TEST(Malformed, BadMagic) {
    GgufBytes f;
    f.raw("GGML").u32(3).u64(0).u64(0);
    expect_rejected(f, "header.magic", 0, "bad magic 'GGML'");
}

TEST(Malformed, TruncatedVersion) {
    GgufBytes f;
    f.raw("GGUF").u8(3);
    expect_rejected(f, "header.version", 4, "truncated");
}

TEST(Malformed, VersionOne) {
    GgufBytes f;
    f.header(0, 0, 1);
    expect_rejected(f, "header.version", 4, "unsupported version 1");
}

TEST(Malformed, VersionFour) {
    GgufBytes f;
    f.header(0, 0, 4);
    expect_rejected(f, "header.version", 4, "unsupported version 4");
}

TEST(Malformed, BigEndianVersion) {
    GgufBytes f;
    f.header(0, 0, 0x03000000);
    expect_rejected(f, "header.version", 4, "big-endian");
}

TEST(Malformed, TruncatedTensorCount) {
    GgufBytes f;
    f.raw("GGUF").u32(3).u32(0);
    expect_rejected(f, "header.tensor_count", 8, "truncated");
}

TEST(Malformed, TruncatedKeyValueCount) {
    GgufBytes f;
    f.raw("GGUF").u32(3).u64(0).u8(0);
    expect_rejected(f, "header.metadata_kv_count", 16, "truncated");
}

TEST(Malformed, TensorCountLargerThanFile) {
    GgufBytes f;
    f.header(uint64_t{1} << 62, 0);
    expect_rejected(f, "header.tensor_count", 8, "larger than the 0 remaining bytes");
}

TEST(Malformed, KeyValueCountLargerThanFile) {
    GgufBytes f;
    f.header(0, 1000).zeros(100);
    expect_rejected(f, "header.metadata_kv_count", 16, "count 1000 is larger than the 100 remaining bytes");
}

TEST(Malformed, TensorCountLargerThanBytesAfterMetadata) {
    GgufBytes f;
    // 2 tensors need at least 64 bytes: the 70 bytes after the header hold them, but not after a 50-byte key.
    f.header(2, 1).key(std::string(37, 'k'), kU8).u8(1).zeros(20);
    expect_rejected(f, "header.tensor_count", 8, "bytes left after the metadata");
}

TEST(Malformed, KeyLengthPastEnd) {
    GgufBytes f;
    f.header(0, 1).u64(1000).raw("abc").zeros(10);
    expect_rejected(f, "metadata[0].key", kHeader, "string length 1000 runs past the end");
}

TEST(Malformed, EmptyKey) {
    GgufBytes f;
    f.header(0, 1).key("", kU32).u32(1);
    expect_rejected(f, "metadata[0].key", kHeader, "empty key");
}

TEST(Malformed, UnknownValueType) {
    GgufBytes f;
    f.header(0, 1).key("k", 13).u32(0);
    expect_rejected(f, "metadata 'k'", kHeader + 9, "unknown value type id 13");
}

TEST(Malformed, TruncatedScalarValue) {
    GgufBytes f;
    f.header(0, 1).key("k", kU32).u8(1).u8(2);
    expect_rejected(f, "metadata 'k'", kValueAt, "needs 4 bytes but only 2 remain");
}

TEST(Malformed, BoolNeitherZeroNorOne) {
    GgufBytes f;
    f.header(0, 1).key("k", kBool).u8(2);
    expect_rejected(f, "metadata 'k'", kValueAt, "bool value 2");
}

TEST(Malformed, StringValuePastEnd) {
    GgufBytes f;
    f.header(0, 1).key("k", kString).u64(9).raw("short");
    expect_rejected(f, "metadata 'k'", kValueAt, "string length 9 runs past the end of the file (5 bytes remain)");
}

TEST(Malformed, UnknownArrayElementType) {
    GgufBytes f;
    f.header(0, 1).key("k", kArray).u32(99).u64(0);
    expect_rejected(f, "metadata 'k'", kValueAt, "unknown array element type id 99");
}

TEST(Malformed, ArrayCountLargerThanFile) {
    GgufBytes f;
    f.header(0, 1).key("k", kArray).u32(kU32).u64(uint64_t{1} << 61).u32(1);
    expect_rejected(f, "metadata 'k'", kValueAt + 4, "needs at least 4 bytes per element but only 4 bytes remain");
}

TEST(Malformed, ArrayOfArraysCountLargerThanFile) {
    GgufBytes f;
    f.header(0, 1).key("k", kArray).u32(kArray).u64(2).u32(kU8).u64(0);
    expect_rejected(f, "metadata 'k'", kValueAt + 4, "needs at least 12 bytes per element");
}

TEST(Malformed, StringElementPastEnd) {
    GgufBytes f;
    f.header(0, 1).key("k", kArray).u32(kString).u64(2).str("ab").u64(50).raw("xyz");
    expect_rejected(f, "metadata 'k'[1]", kValueAt + 12 + 10, "string length 50");
}

TEST(Malformed, NestedElementErrorNamesThePath) {
    GgufBytes f;
    // [[1, 2], [true, 5]]: the second inner array is of bool and holds a 5.
    f.header(0, 1).key("k", kArray).u32(kArray).u64(2);
    f.u32(kU8).u64(2).u8(1).u8(2);
    f.u32(kBool).u64(2).u8(1);
    const uint64_t bad_at = f.size();
    f.u8(5);
    expect_rejected(f, "metadata 'k'[1][1]", bad_at, "bool value 5");
}

TEST(Malformed, ArraysNestedTooDeep) {
    GgufBytes f;
    f.header(0, 1).key("k", kArray);
    // Seven arrays that each hold one array are fine (levels 1..8 with the innermost); an eighth is not.
    uint64_t last_type_at = 0;
    for (int level = 0; level < 8; ++level) {
        last_type_at = f.size();
        f.u32(kArray).u64(1);
    }
    f.u32(kU8).u64(0);
    expect_rejected(f, "metadata 'k'" + std::string("[0]") + "[0][0][0][0][0][0]", last_type_at,
                    "arrays nested deeper than 8 levels");
}

TEST(Malformed, DuplicateKey) {
    GgufBytes f;
    f.header(0, 2).key("a.b", kU32).u32(1);
    const uint64_t second = f.size();
    f.key("a.b", kU32).u32(2);
    expect_rejected(f, "metadata[1].key", second, "duplicate key 'a.b' (first defined at byte 35)");
}

TEST(Malformed, AlignmentOfWrongType) {
    GgufBytes f;
    f.header(0, 1).key("general.alignment", kU64).u64(32);
    expect_rejected(f, "general.alignment", kHeader + 8 + 17, "has type u64, expected u32");
}

TEST(Malformed, AlignmentZero) {
    GgufBytes f;
    f.header(0, 1).key("general.alignment", kU32).u32(0);
    expect_rejected(f, "general.alignment", kHeader + 8 + 17, "alignment 0 is not a power of two");
}

TEST(Malformed, AlignmentNotPowerOfTwo) {
    GgufBytes f;
    f.header(0, 1).key("general.alignment", kU32).u32(48);
    expect_rejected(f, "general.alignment", kHeader + 8 + 17, "alignment 48 is not a power of two");
}

TEST(Malformed, TensorNamePastEnd) {
    GgufBytes f;
    f.header(1, 0).u64(500).raw("abc").zeros(40);
    expect_rejected(f, "tensor[0].name", kHeader, "string length 500");
}

TEST(Malformed, EmptyTensorName) {
    GgufBytes f;
    f.header(1, 0).tensor("", {4}, kF32, 0).pad_to(32).zeros(16);
    expect_rejected(f, "tensor[0].name", kHeader, "empty tensor name");
}

TEST(Malformed, ZeroDimensions) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {}, kF32, 0).zeros(64);
    expect_rejected(f, "tensor 't'.n_dims", kHeader + 9, "n_dims 0 is outside 1..4");
}

TEST(Malformed, FiveDimensions) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {1, 1, 1, 1, 1}, kF32, 0).zeros(64);
    expect_rejected(f, "tensor 't'.n_dims", kHeader + 9, "n_dims 5 is outside 1..4");
}

TEST(Malformed, DimensionZero) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {4, 0}, kF32, 0).zeros(64);
    expect_rejected(f, "tensor 't'.ne[1]", kHeader + 9 + 4 + 8, "dimension 0 is not positive");
}

TEST(Malformed, DimensionNegative) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {static_cast<uint64_t>(-3)}, kF32, 0).zeros(64);
    expect_rejected(f, "tensor 't'.ne[0]", kHeader + 9 + 4, "dimension -3 is not positive");
}

TEST(Malformed, ElementCountOverflowsInt64) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {uint64_t{1} << 31, uint64_t{1} << 31, 4}, kI8, 0).zeros(64);
    expect_rejected(f, "tensor 't'.ne[2]", kHeader + 9 + 4 + 16, "element count overflows int64");
}

TEST(Malformed, ByteSizeOverflowsInOneDimension) {
    GgufBytes f;
    // 2^62 f32 elements fit int64, but their 2^64 bytes do not fit u64.
    f.header(1, 0).tensor("t", {uint64_t{1} << 62}, kF32, 0).zeros(64);
    expect_rejected(f, "tensor 't'.ne[0]", kHeader + 9 + 4, "byte size overflows uint64");
}

TEST(Malformed, ByteSizeOverflowsAcrossDimensions) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {uint64_t{1} << 40, uint64_t{1} << 22}, kF32, 0).zeros(64);
    expect_rejected(f, "tensor 't'.ne[1]", kHeader + 9 + 4 + 8, "byte size overflows uint64");
}

TEST(Malformed, RemovedElementType) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {32}, 4, 0).zeros(64);  // q4_2, removed upstream
    expect_rejected(f, "tensor 't'.type", kHeader + 9 + 4 + 8, "unknown element type id 4");
}

TEST(Malformed, UnknownElementType) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {32}, 1000, 0).zeros(64);
    expect_rejected(f, "tensor 't'.type", kHeader + 9 + 4 + 8, "unknown element type id 1000");
}

TEST(Malformed, RowNotMultipleOfBlockSize) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {33, 2}, kQ8_0, 0).zeros(128);
    expect_rejected(f, "tensor 't'.ne[0]", kHeader + 9 + 4, "not a multiple of the q8_0 block size 32");
}

TEST(Malformed, TruncatedTensorInfo) {
    GgufBytes f;
    const std::string name(40, 'n');
    f.header(1, 0).str(name).u32(2).u64(4).zeros(7);  // the second dimension is cut short
    expect_rejected(f, "tensor '" + name + "'.ne[1]", kHeader + 48 + 4 + 8, "needs 8 bytes but only 7 remain");
}

TEST(Malformed, MisalignedOffset) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {4}, kF32, 4).pad_to(32).zeros(64);
    expect_rejected(f, "tensor 't'.offset", kHeader + 9 + 4 + 8 + 4, "not a multiple of the alignment 32");
}

TEST(Malformed, MisalignedOffsetWithCustomAlignment) {
    GgufBytes f;
    f.header(1, 1).key("general.alignment", kU32).u32(64);
    const uint64_t offset_at = f.size() + 9 + 4 + 8 + 4;
    f.tensor("t", {4}, kF32, 32).pad_to(64).zeros(128);
    expect_rejected(f, "tensor 't'.offset", offset_at, "data offset 32 is not a multiple of the alignment 64");
}

TEST(Malformed, DataPastEndOfFile) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {16}, kF32, 0).pad_to(32).zeros(60);  // 64 bytes needed
    expect_rejected(f, "tensor 't'.offset", kHeader + 9 + 4 + 8 + 4, "runs past the end of the data section (60 bytes");
}

TEST(Malformed, OffsetPastEndOfFile) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {4}, kF16, uint64_t{1} << 63).pad_to(32).zeros(64);
    expect_rejected(f, "tensor 't'.offset", kHeader + 9 + 4 + 8 + 4, "runs past the end of the data section");
}

TEST(Malformed, NoDataSection) {
    GgufBytes f;
    f.header(1, 0).tensor("t", {1}, kF32, 0);  // file ends right after the infos
    expect_rejected(f, "tensor 't'.offset", kHeader + 9 + 4 + 8 + 4, "(0 bytes from byte 64)");
}

TEST(Malformed, OverlappingTensors) {
    GgufBytes f;
    f.header(2, 0).tensor("a", {16}, kF32, 0);
    const uint64_t b_offset_at = f.size() + 9 + 4 + 8 + 4;
    f.tensor("b", {8}, kF32, 32).pad_to(32).zeros(128);
    expect_rejected(f, "tensor 'b'.offset", b_offset_at, "overlaps tensor 'a' [0, 64)");
}

TEST(Malformed, OverlapFoundWhateverTheInfoOrder) {
    GgufBytes f;
    f.header(2, 0).tensor("late", {8}, kF32, 64);
    f.tensor("early", {24}, kF32, 0).pad_to(32).zeros(128);
    expect_rejected(f, "tensor 'late'.offset", kHeader + 12 + 4 + 8 + 4, "overlaps tensor 'early' [0, 96)");
}

TEST(Malformed, DuplicateTensorName) {
    GgufBytes f;
    f.header(2, 0).tensor("w", {8}, kF32, 0);
    const uint64_t second = f.size();
    f.tensor("w", {8}, kF32, 32).pad_to(32).zeros(64);
    expect_rejected(f, "tensor[1].name", second, "duplicate tensor name 'w' (first is tensor 0)");
}

TEST(Malformed, UnprintableKeyIsEscapedInTheMessage) {
    GgufBytes f;
    f.header(0, 1).key(std::string("a\nb\x01", 4), kU32).u8(0);
    expect_rejected(f, "metadata 'a\\x0ab\\x01'", kValueAt + 3, "truncated");
}

// The accepting side of the same checks: well-formed edge cases parse.
TEST(WellFormed, EdgeCasesAreAccepted) {
    GgufBytes f;
    f.header(2, 3, 2);  // version 2 shares v3's layout
    f.key("general.alignment", kU32).u32(16);
    f.key("nest", kArray).u32(kArray).u64(1).u32(kI32).u64(2).u32(static_cast<uint32_t>(-5)).u32(7);
    f.key("empty", kArray).u32(kString).u64(0);
    f.tensor("b", {2}, kF32, 16).tensor("a", {3, 1, 1, 1}, kF16, 0).pad_to(16);
    const uint64_t data_at = f.size();
    f.zeros(24);
    const Reader r = Reader::from_memory(f.b.data(), f.b.size(), "ok.gguf");
    EXPECT_EQ(r.version(), 2u);
    EXPECT_EQ(r.alignment(), 16u);
    EXPECT_EQ(r.data_offset(), data_at);
    ASSERT_EQ(r.tensors().size(), 2u);
    EXPECT_EQ(r.tensors()[0].n_bytes, 8u);
    EXPECT_EQ(r.tensors()[1].n_bytes, 6u);
    EXPECT_EQ(r.tensors()[1].ne.size(), 4u);
    const auto * nest = r.find("nest");
    ASSERT_NE(nest, nullptr);
    ASSERT_EQ(nest->array.size(), 1u);
    ASSERT_EQ(nest->array[0].array.size(), 2u);
    EXPECT_EQ(nest->array[0].array[0].i, -5);
    EXPECT_EQ(r.find("empty")->array.size(), 0u);
}

TEST(WellFormed, EightLevelsOfArraysAreAccepted) {
    GgufBytes f;
    f.header(0, 1).key("k", kArray);
    for (int level = 0; level < 7; ++level) f.u32(kArray).u64(1);
    f.u32(kU8).u64(1).u8(9);
    const Reader r = Reader::from_memory(f.b.data(), f.b.size());
    const auto * v = r.find("k");
    for (int level = 0; level < 7; ++level) v = &v->array.at(0);
    EXPECT_TRUE(v->array.is_packed());  // numbers stay packed, at any depth
    EXPECT_EQ(v->array[0].u, 9u);
}

TEST(WellFormed, HeaderOnlyFile) {
    GgufBytes f;
    f.header(0, 0);
    const Reader r = Reader::from_memory(f.b.data(), f.b.size());
    EXPECT_TRUE(r.metadata().empty());
    EXPECT_TRUE(r.tensors().empty());
    EXPECT_EQ(r.alignment(), 32u);
}

TEST(OpenErrors, MissingFileDirectoryAndEmptyFile) {
    try {
        Reader::open("/nonexistent/dir/x.gguf");
        ADD_FAILURE() << "opened a missing file";
    } catch (const FileError & e) {
        EXPECT_EQ(e.field(), "file");
        EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
    }
    try {
        Reader::open("/tmp");
        ADD_FAILURE() << "opened a directory";
    } catch (const FileError & e) {
        EXPECT_EQ(e.field(), "file");
        EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
    try {
        Reader::open("/dev/null");
        ADD_FAILURE() << "opened a device";
    } catch (const FileError & e) {
        EXPECT_EQ(e.field(), "file");
    }
    const std::string empty = testing::TempDir() + "offgrid_empty_" + std::to_string(::getpid()) + ".gguf";
    { std::ofstream touch(empty); }
    try {
        Reader::open(empty);
        ADD_FAILURE() << "opened an empty file";
    } catch (const FileError & e) {
        EXPECT_EQ(e.file(), empty);
        EXPECT_EQ(e.field(), "header.magic");
        EXPECT_EQ(e.offset(), 0u);
    }
    std::remove(empty.c_str());
}
