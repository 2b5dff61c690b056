#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace offgrid {
namespace {

TEST(Crc32c, KnownValue) {
    const char * s = "123456789";
    EXPECT_EQ(crc32c(s, std::strlen(s)), 0xE3069283u);
    EXPECT_EQ(crc32c_portable(s, std::strlen(s)), 0xE3069283u);
    EXPECT_EQ(crc32c(s, 0), 0u);
}

// The fast path (the SSE4.2 instruction where the CPU has it) equals the table for every length and alignment,
// and a running checksum equals the checksum of the whole.
TEST(Crc32c, FastPathEqualsTableAndChains) {
    std::vector<uint8_t> buf(4099);
    uint32_t x = 12345;
    for (auto & b : buf) {
        x = x * 1103515245u + 12345u;
        b = static_cast<uint8_t>(x >> 24);
    }
    for (size_t off = 0; off < 8; ++off) {
        for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(63), size_t(4091)}) {
            EXPECT_EQ(crc32c(buf.data() + off, n), crc32c_portable(buf.data() + off, n)) << off << " " << n;
        }
    }
    const uint32_t whole = crc32c(buf.data(), buf.size());
    EXPECT_EQ(crc32c(buf.data() + 1000, buf.size() - 1000, crc32c(buf.data(), 1000)), whole);
    buf[2000] ^= 0x10;
    EXPECT_NE(crc32c(buf.data(), buf.size()), whole);
}

}  // namespace
}  // namespace offgrid
