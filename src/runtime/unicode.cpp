// Category look-up over the generated runs and lenient UTF-8 decoding.
#include "runtime/unicode.h"

#include <algorithm>
#include <array>
#include <memory>

namespace offgrid::runtime::unicode {

namespace {

uint16_t search_runs(uint32_t cp) {
    const CategoryRun * end = kCategoryRuns + kCategoryRunCount;
    const CategoryRun * it = std::upper_bound(kCategoryRuns, end, cp,
                                              [](uint32_t v, const CategoryRun & r) { return v < r.first; });
    return it == kCategoryRuns ? uint16_t{kUnassigned} : (it - 1)->bits;
}

// The Basic Multilingual Plane covers nearly all text, so it gets a flat table built once from the runs.
const std::array<uint16_t, 0x10000> & bmp_table() {
    static const std::unique_ptr<std::array<uint16_t, 0x10000>> table = [] {
        auto t = std::make_unique<std::array<uint16_t, 0x10000>>();
        for (size_t r = 0; r < kCategoryRunCount && kCategoryRuns[r].first < 0x10000; ++r) {
            const uint32_t last = r + 1 < kCategoryRunCount ? std::min<uint32_t>(kCategoryRuns[r + 1].first, 0x10000)
                                                            : 0x10000;
            std::fill(t->begin() + kCategoryRuns[r].first, t->begin() + last, kCategoryRuns[r].bits);
        }
        return t;
    }();
    return *table;
}

}  // namespace

uint16_t category_bits(uint32_t cp) {
    if (cp < 0x10000) return bmp_table()[cp];
    if (cp > kMaxCodePoint) return kUnassigned;
    return search_runs(cp);
}

Decoded decode_utf8(std::string_view text, size_t pos) {
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
    const uint8_t b0 = byte(pos);
    const Decoded invalid{kReplacementChar, 1, false};
    if (b0 < 0x80) return {b0, 1, true};

    uint32_t len = 0;
    uint32_t cp = 0;
    if ((b0 & 0xE0) == 0xC0) {
        len = 2;
        cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
        len = 3;
        cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
        len = 4;
        cp = b0 & 0x07;
    } else {
        return invalid;
    }
    if (pos + len > text.size()) return invalid;
    for (uint32_t k = 1; k < len; ++k) {
        const uint8_t b = byte(pos + k);
        if ((b & 0xC0) != 0x80) return invalid;
        cp = (cp << 6) | (b & 0x3F);
    }
    // Overlong forms and values past U+10FFFF are not UTF-8; keep their bytes raw as well.
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > kMaxCodePoint) return invalid;
    return {cp, len, true};
}

namespace {

bool byte_is_printable(uint32_t b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

struct ByteMap {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 512> from_cp{};  // every mapped code point is below U+0200
};

const ByteMap & byte_map() {
    static const ByteMap map = [] {
        ByteMap m;
        m.from_cp.fill(-1);
        uint32_t next = 0x100;
        for (uint32_t b = 0; b < 256; ++b) {
            m.to_cp[b] = byte_is_printable(b) ? b : next++;
            m.from_cp[m.to_cp[b]] = static_cast<int16_t>(b);
        }
        return m;
    }();
    return map;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) { return byte_map().to_cp[byte]; }

int codepoint_to_byte(uint32_t cp) { return cp < 512 ? byte_map().from_cp[cp] : -1; }

size_t complete_utf8_prefix(std::string_view bytes) {
    // Only the last three bytes can belong to an unfinished sequence: find its lead byte, if any.
    const size_t n = bytes.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto b = static_cast<uint8_t>(bytes[n - back]);
        if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
        const size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

void append_utf8(std::string & out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

}  // namespace offgrid::runtime::unicode
