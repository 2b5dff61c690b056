// Reader::open_table and map_tensors: the header and tensor table read without mapping the file (a header larger
// than the first read, so the prefix grows), no tensor data until mapped, and mapped windows holding exactly the
// file's bytes; only the wanted tensors' pages are mapped.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

using offgrid::gguf::Reader;
using offgrid::gguf::Writer;
using offgrid::tensor::ElemType;

namespace {

struct TempFile {
    std::string path;
    explicit TempFile(const std::vector<uint8_t> & bytes) {
        static int n = 0;
        path = (std::filesystem::temp_directory_path() /
                ("offgrid-table-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".gguf")).string();
        std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    ~TempFile() { std::filesystem::remove(path); }
};

// A file whose metadata passes the first read of open_table (1 MiB) and whose tensors span several pages each.
std::vector<uint8_t> big_header_file() {
    Writer w;
    w.set_string("general.architecture", "none");
    std::vector<std::string> words;
    for (int i = 0; i < 40000; ++i) words.push_back("word-number-" + std::to_string(i) + "-of-a-long-list");
    w.set_strings("tokenizer.ggml.tokens", words);
    for (int k = 0; k < 6; ++k) {
        std::vector<uint8_t> data(3 * 4096 + 64 * k);
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + k * 13);
        w.add_tensor("t" + std::to_string(k), {static_cast<int64_t>(data.size() / 4)}, ElemType::F32, data);
    }
    return w.to_bytes();
}

}  // namespace

TEST(TableReader, ReadsTheTableWithoutData) {
    const std::vector<uint8_t> bytes = big_header_file();
    const TempFile file(bytes);
    const Reader whole = Reader::open(file.path);
    ASSERT_GT(whole.data_offset(), 1u << 20) << "the header must be larger than open_table's first read";
    const Reader table = Reader::open_table(file.path);
    EXPECT_EQ(table.data_offset(), whole.data_offset());
    EXPECT_EQ(table.file_size(), bytes.size());
    EXPECT_EQ(table.mapped_bytes(), 0u);
    EXPECT_EQ(table.n_windows(), 0u);
    EXPECT_TRUE(table.bytes().empty());
    ASSERT_EQ(table.metadata().size(), whole.metadata().size());
    EXPECT_EQ(table.find("tokenizer.ggml.tokens")->array.size(), 40000u);
    ASSERT_EQ(table.tensors().size(), whole.tensors().size());
    for (size_t k = 0; k < table.tensors().size(); ++k) {
        EXPECT_EQ(table.tensors()[k].name, whole.tensors()[k].name);
        EXPECT_EQ(table.tensors()[k].offset, whole.tensors()[k].offset);
        EXPECT_EQ(table.tensors()[k].n_bytes, whole.tensors()[k].n_bytes);
        EXPECT_EQ(table.tensors()[k].data, nullptr);
    }
}

// After map_tensors({false, true, true, false, true, false}): two windows, t1, t2 and t4 hold the file's bytes,
// t0, t3 and t5 stay empty.
void expect_tensors_1_2_4_held(const Reader & table, const std::vector<uint8_t> & bytes) {
    EXPECT_EQ(table.n_windows(), 2u);
    const auto & t = table.tensors();
    for (size_t k : {0, 3, 5}) EXPECT_EQ(t[k].data, nullptr) << t[k].name;
    for (size_t k : {1, 2, 4}) {
        ASSERT_NE(t[k].data, nullptr) << t[k].name;
        EXPECT_EQ(std::memcmp(t[k].data, bytes.data() + table.data_offset() + t[k].offset, t[k].n_bytes), 0) << t[k].name;
    }
}

TEST(TableReader, MapsOnlyTheWantedTensorsInWindows) {
    const std::vector<uint8_t> bytes = big_header_file();
    const TempFile file(bytes);
    const Reader whole = Reader::open(file.path);
    Reader table = Reader::open_table(file.path);
    // t1, t2 are neighbours (one window), t4 alone (another); t0, t3, t5 stay unmapped.
    table.map_tensors({false, true, true, false, true, false});
    expect_tensors_1_2_4_held(table, bytes);
    const auto & t = table.tensors();
    for (size_t k : {1, 2, 4}) {
        EXPECT_EQ(std::memcmp(t[k].data, whole.tensors()[k].data, t[k].n_bytes), 0) << t[k].name;
    }
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
    const uint64_t wanted = t[1].n_bytes + t[2].n_bytes + t[4].n_bytes;
    EXPECT_GE(table.mapped_bytes(), wanted);
    EXPECT_LE(table.mapped_bytes(), wanted + 2 * page + 64) << "a window reaches at most a page before its first tensor";
    EXPECT_LT(table.mapped_bytes(), bytes.size() - table.data_offset());
    // Mapping more later adds windows and leaves the mapped ones in place.
    const uint8_t * t1 = t[1].data;
    table.map_tensors({true, true, false, false, false, false});
    EXPECT_EQ(t[1].data, t1);
    ASSERT_NE(t[0].data, nullptr);
    EXPECT_EQ(std::memcmp(t[0].data, whole.tensors()[0].data, t[0].n_bytes), 0);
    EXPECT_EQ(table.n_windows(), 3u);
}

TEST(TableReader, ReadModeHoldsCopiesOfTheWantedTensors) {
    const std::vector<uint8_t> bytes = big_header_file();
    const TempFile file(bytes);
    Reader table = Reader::open_table(file.path);
    table.map_tensors({false, true, true, false, true, false}, offgrid::gguf::LoadMode::Read);
    expect_tensors_1_2_4_held(table, bytes);
    const auto & t = table.tensors();
    // Copies: the file may change under them.
    {
        std::vector<uint8_t> changed = bytes;
        for (size_t i = table.data_offset(); i < changed.size(); ++i) changed[i] ^= 0xff;
        std::FILE * f = std::fopen(file.path.c_str(), "r+b");
        ASSERT_NE(f, nullptr);
        ASSERT_EQ(std::fwrite(changed.data(), 1, changed.size(), f), changed.size());
        std::fclose(f);
    }
    EXPECT_EQ(std::memcmp(t[1].data, bytes.data() + table.data_offset() + t[1].offset, t[1].n_bytes), 0);
}

TEST(TableReader, RefusesWhatItCannotDo) {
    const std::vector<uint8_t> bytes = big_header_file();
    const TempFile file(bytes);
    Reader whole = Reader::open(file.path);
    EXPECT_THROW(whole.map_tensors(std::vector<bool>(whole.tensors().size(), true)), offgrid::Error);
    Reader table = Reader::open_table(file.path);
    EXPECT_THROW(table.map_tensors({true}), offgrid::Error);
    // A cut file: the table's data bounds are checked against the file's size, as open does.
    const std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 100);
    const TempFile cut_file(cut);
    EXPECT_THROW(Reader::open_table(cut_file.path), offgrid::FileError);
    EXPECT_THROW(Reader::open(cut_file.path), offgrid::FileError);
}
