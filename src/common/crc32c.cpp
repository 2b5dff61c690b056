#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace offgrid {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
        t[i] = c;
    }
    return t;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c_portable(const void * data, size_t n, uint32_t crc) {
    const auto * p = static_cast<const uint8_t *>(data);
    uint32_t c = ~crc;
    for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace {

// The SSE4.2 instruction, compiled for it whatever the build's baseline; called only where the CPU has it.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const void * data, size_t n, uint32_t crc) {
    const auto * p = static_cast<const uint8_t *>(data);
    uint64_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    uint32_t c32 = static_cast<uint32_t>(c);
    for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
    return ~c32;
}

const bool kHasSse42 = __builtin_cpu_supports("sse4.2");

}  // namespace
#endif

uint32_t crc32c(const void * data, size_t n, uint32_t crc) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (kHasSse42) return crc32c_sse42(data, n, crc);
#endif
    return crc32c_portable(data, n, crc);
}

}  // namespace offgrid
