// Bad input never crashes: random byte corruptions of a valid model's metadata and tensor table either load
// (and then run a short forward) or fail with offgrid::Error.
#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "gguf/reader.h"
#include "model/qwen4exp/model.h"
#include "test_memory.h"
#include "tiny_model.h"

namespace offgrid::model::qwen4exp {
namespace {

TEST(Corrupt, RandomHeaderBytesLoadOrThrow) {
    const auto good = test::tiny_model({}).build();
    const uint64_t data_offset = gguf::Reader::from_memory(good.data(), good.size(), "tiny").data_offset();
    std::mt19937 rng(77);
    int loaded = 0, refused = 0;
    for (int trial = 0; trial < 300; ++trial) {
        auto bytes = good;
        const int n_flips = 1 + static_cast<int>(rng() % 3);
        for (int f = 0; f < n_flips; ++f) {
            const size_t at = 24 + rng() % (data_offset - 24);  // past the fixed header
            bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
        }
        try {
            const Model m = Model::from_reader(gguf::Reader::from_memory(bytes.data(), bytes.size(), "corrupt"));
            test::TestMemory mem(m, 16, m.hparams().kpool);
            mem.decode({1, 2, 3, 4, 5}, std::vector<bool>(5, true));
            ++loaded;
        } catch (const Error &) {
            ++refused;
        }
    }
    std::printf("[corrupt] %d loaded and ran, %d refused\n", loaded, refused);
    EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace offgrid::model::qwen4exp
