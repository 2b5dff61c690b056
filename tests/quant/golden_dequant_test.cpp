// Bit-exactness of tensor::dequantize_row against ggml's own to_float: every tensor of every model in
// ../shared/golden/quant/models, dequantised to f32 and hashed with FNV-1a 64, equals the line of
// dequant/<model>.fnv (name, type, n_elements, hash), in file order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/shared_dir.h"
#include "gguf/reader.h"
#include "tensor/types.h"

namespace {

namespace fs = std::filesystem;
using offgrid::gguf::Reader;
using offgrid::tensor::traits;

std::string quant_dir() { return offgrid::test::shared_dir() + "/golden/quant"; }

uint64_t fnv1a64(const void * data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
    const auto * p = static_cast<const uint8_t *>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

struct Line {
    std::string name, type;
    int64_t n_elements = 0;
    std::string hash;
};

std::vector<Line> read_fnv(const std::string & path) {
    std::ifstream in(path);
    std::vector<Line> out;
    Line l;
    while (in >> l.name >> l.type >> l.n_elements >> l.hash) out.push_back(l);
    return out;
}

std::vector<std::string> quant_models() {
    std::vector<std::string> out;
    const fs::path dir = quant_dir() + "/models";
    if (!fs::exists(dir)) return out;
    for (const auto & e : fs::directory_iterator(dir)) {
        if (e.path().extension() == ".gguf") out.push_back(e.path().stem().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST(FnvHash, KnownVectors) {
    // The published FNV-1a 64 test vectors.
    EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ull);
    EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ull);
}

TEST(GoldenDequant, EveryTensorHashesLikeGgml) {
    OFFGRID_REQUIRE_SHARED();
    const auto models = quant_models();
    if (models.empty()) GTEST_SKIP() << quant_dir() << "/models is absent: quantised golden set not available";
    size_t n_checked = 0;
    for (const std::string & model : models) {
        SCOPED_TRACE(model);
        const Reader r = Reader::open(quant_dir() + "/models/" + model + ".gguf");
        const std::vector<Line> want = read_fnv(quant_dir() + "/dequant/" + model + ".fnv");
        ASSERT_EQ(want.size(), r.tensors().size());
        std::vector<float> buf;
        for (size_t i = 0; i < want.size(); ++i) {
            const auto & t = r.tensors()[i];
            SCOPED_TRACE(t.name);
            ASSERT_EQ(t.name, want[i].name);
            EXPECT_EQ(std::string(traits(t.type).name), want[i].type);
            ASSERT_EQ(t.n_elements(), want[i].n_elements);
            buf.resize(static_cast<size_t>(t.n_elements()));
            offgrid::tensor::dequantize_row(t.type, t.data, buf.data(), buf.size());
            char hex[17];
            std::snprintf(hex, sizeof hex, "%016" PRIx64, fnv1a64(buf.data(), buf.size() * sizeof(float)));
            EXPECT_EQ(hex, want[i].hash);
            ++n_checked;
        }
    }
    std::printf("[ hashes ] %zu tensors of %zu models equal ggml's dequantisation\n", n_checked, models.size());
}
