#include "common/data_hash.h"

#include "common/crc32c.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif
#include <cstring>

namespace offgrid {

namespace {

constexpr size_t kBlock = 24;

}  // namespace

LaneCrc data_hash_portable(const void * data, size_t n) {
    const auto * p = static_cast<const uint8_t *>(data);
    LaneCrc c{0, 0, 0};
    const size_t blocks = n / kBlock;
    for (size_t b = 0; b < blocks; ++b, p += kBlock) {
        for (int k = 0; k < 3; ++k) c[k] = crc32c_portable(p + 8 * k, 8, c[k]);
    }
    c[0] = crc32c_portable(p, n - blocks * kBlock, c[0]);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace {

// Inverted running values, as crc32c() keeps them, so each lane equals crc32c_portable of its bytes.
__attribute__((target("sse4.2"))) LaneCrc data_hash_sse42(const void * data, size_t n) {
    const auto * p = static_cast<const uint8_t *>(data);
    uint64_t c0 = 0xFFFFFFFFu, c1 = 0xFFFFFFFFu, c2 = 0xFFFFFFFFu;
    const size_t blocks = n / kBlock;
    for (size_t b = 0; b < blocks; ++b, p += kBlock) {
        uint64_t v0, v1, v2;
        std::memcpy(&v0, p, 8);
        std::memcpy(&v1, p + 8, 8);
        std::memcpy(&v2, p + 16, 8);
        c0 = _mm_crc32_u64(c0, v0);
        c1 = _mm_crc32_u64(c1, v1);
        c2 = _mm_crc32_u64(c2, v2);
    }
    LaneCrc c{~static_cast<uint32_t>(c0), ~static_cast<uint32_t>(c1), ~static_cast<uint32_t>(c2)};
    c[0] = crc32c(p, n - blocks * kBlock, c[0]);
    return c;
}

const bool kHasSse42 = __builtin_cpu_supports("sse4.2");

}  // namespace
#endif

LaneCrc data_hash(const void * data, size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (kHasSse42) return data_hash_sse42(data, n);
#endif
    return data_hash_portable(data, n);
}

}  // namespace offgrid
