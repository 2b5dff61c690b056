// Model::fingerprint: what makes two models "the same" for state and prefix-cache files. Every hyperparameter,
// the tokenizer and every weight byte count; descriptive metadata (general.name) does not.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include <unistd.h>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "offgrid/context.h"

namespace offgrid {
namespace {

namespace fs = std::filesystem;

const fs::path & dir() {
    static const fs::path d = [] {
        fs::path p = fs::temp_directory_path() / ("offgrid_fingerprint_" + std::to_string(::getpid()));
        fs::remove_all(p);
        fs::create_directories(p);
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(fs::temp_directory_path() / ("offgrid_fingerprint_" + std::to_string(::getpid())), ec);
        });
        return p;
    }();
    return d;
}

fs::path gen(const std::string & name, const std::string & flags) {
    const fs::path out = dir() / name;
    const std::string cmd = std::string(OFFGRID_BINARY) + " gen-model --preset tiny " + flags + " -o '" + out.string() + "' > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return out;
}

std::vector<uint8_t> bytes_of(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

uint64_t fingerprint(const fs::path & p) { return Model::load(p.string())->fingerprint(); }

// The concatenated tensor bytes of a file (to show that two files differ in metadata only).
std::vector<uint8_t> tensor_bytes(const fs::path & p) {
    const auto r = gguf::Reader::open(p.string(), gguf::LoadMode::Read);
    std::vector<uint8_t> all;
    for (const auto & t : r.tensors()) all.insert(all.end(), t.data, t.data + t.n_bytes);
    return all;
}

TEST(Fingerprint, EveryHyperparameterCounts) {
    const fs::path base = gen("base.gguf", "");
    const uint64_t fp = fingerprint(base);
    EXPECT_EQ(fingerprint(base), fp);
    EXPECT_EQ(Model::load(base.string(), WeightLoad::Map)->fingerprint(), fp);  // however the weights are loaded
    const std::vector<uint8_t> weights = tensor_bytes(base);
    for (const char * flags : {"--rms-eps 0.0001", "--rope-base 20000", "--n-expert-used 1"}) {
        const fs::path other = gen("other.gguf", flags);
        EXPECT_EQ(tensor_bytes(other), weights) << flags << ": the weights should be the same";
        EXPECT_NE(fingerprint(other), fp) << flags;
    }
}

TEST(Fingerprint, MetadataThatDescribesDoesNotCountTheTokenizerDoes) {
    const fs::path base = gen("meta.gguf", "");
    const uint64_t fp = fingerprint(base);
    auto rewrite = [&](const std::string & name, const std::function<void(gguf::Writer &)> & edit) {
        const auto r = gguf::Reader::open(base.string(), gguf::LoadMode::Read);
        gguf::Writer w = gguf::Writer::from_reader(r);
        edit(w);
        const fs::path out = dir() / name;
        w.write_file(out.string());
        return out;
    };
    EXPECT_EQ(fingerprint(rewrite("named.gguf", [](gguf::Writer & w) { w.set_string("general.name", "another name"); })), fp);
    EXPECT_NE(fingerprint(rewrite("bos.gguf", [](gguf::Writer & w) { w.set_bool("tokenizer.ggml.add_bos_token", true); })), fp);
}

// One flipped bit in the middle of any tensor changes it (the first and last bytes of a tensor are not enough).
TEST(Fingerprint, OneWeightByteAnywhereCounts) {
    const fs::path base = gen("weights.gguf", "");
    const uint64_t fp = fingerprint(base);
    std::vector<uint8_t> file = bytes_of(base);
    const auto r = gguf::Reader::from_memory(file.data(), file.size(), "weights.gguf");
    std::vector<size_t> offsets;
    for (const auto & t : r.tensors()) offsets.push_back(static_cast<size_t>(t.data - file.data()) + t.n_bytes / 2);
    offsets.push_back(static_cast<size_t>(r.tensors().back().data - file.data()) + r.tensors().back().n_bytes - 1);
    ASSERT_GT(offsets.size(), 10u);
    int checked = 0;
    for (size_t i = 0; i < offsets.size(); i += offsets.size() / 7) {
        std::vector<uint8_t> edited = file;
        edited[offsets[i]] ^= 0x01;
        const fs::path out = dir() / "edited.gguf";
        std::ofstream(out, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char *>(edited.data()),
                                                                     static_cast<std::streamsize>(edited.size()));
        EXPECT_NE(fingerprint(out), fp) << "byte " << offsets[i];
        ++checked;
    }
    EXPECT_GE(checked, 7);
}

}  // namespace
}  // namespace offgrid
