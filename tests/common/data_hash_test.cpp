#include "common/data_hash.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/crc32c.h"

namespace offgrid {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::vector<uint8_t> buf(n);
    for (auto & b : buf) {
        seed = seed * 1103515245u + 12345u;
        b = static_cast<uint8_t>(seed >> 24);
    }
    return buf;
}

// The fast path equals the table version for every length around the block size and every alignment.
TEST(DataHash, FastPathEqualsPortable) {
    const auto buf = random_bytes(5000, 7);
    for (size_t off = 0; off < 8; ++off) {
        for (size_t n : {0, 1, 7, 8, 23, 24, 25, 47, 48, 49, 100, 4096, 4991}) {
            EXPECT_EQ(data_hash(buf.data() + off, n), data_hash_portable(buf.data() + off, n)) << off << " " << n;
        }
    }
}

// Lane k is the CRC-32C of bytes 8k..8k+7 of each 24-byte block; the tail belongs to lane 0.
TEST(DataHash, LanesAreCrcsOfTheirBytes) {
    const auto buf = random_bytes(24 * 5 + 11, 3);
    std::vector<uint8_t> lane[3];
    for (size_t b = 0; b < 5; ++b) {
        for (int k = 0; k < 3; ++k) lane[k].insert(lane[k].end(), buf.begin() + 24 * b + 8 * k, buf.begin() + 24 * b + 8 * k + 8);
    }
    lane[0].insert(lane[0].end(), buf.begin() + 120, buf.end());
    const LaneCrc h = data_hash(buf.data(), buf.size());
    for (int k = 0; k < 3; ++k) EXPECT_EQ(h[k], crc32c_portable(lane[k].data(), lane[k].size())) << k;
}

// Any one changed byte, anywhere, changes the hash.
TEST(DataHash, EveryByteCounts) {
    auto buf = random_bytes(24 * 40 + 5, 11);
    const LaneCrc h = data_hash(buf.data(), buf.size());
    for (size_t i = 0; i < buf.size(); ++i) {
        buf[i] ^= 0x01;
        EXPECT_NE(data_hash(buf.data(), buf.size()), h) << i;
        buf[i] ^= 0x01;
    }
}

}  // namespace
}  // namespace offgrid
