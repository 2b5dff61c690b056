// Unicode category tables, the GPT-2 byte mapping and lenient UTF-8 decoding.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "runtime/unicode.h"

namespace offgrid::runtime::unicode {
namespace {

TEST(UnicodeCategories, KnownCodePoints) {
    EXPECT_EQ(category_bits('A'), kLetter);
    EXPECT_EQ(category_bits(0x00E9), kLetter);          // é
    EXPECT_EQ(category_bits(0x6211), kLetter);          // 我
    EXPECT_EQ(category_bits('7'), kNumber);
    EXPECT_EQ(category_bits(0x00BD), kNumber);          // ½ (No)
    EXPECT_EQ(category_bits(0x2167), kNumber);          // Ⅷ (Nl)
    EXPECT_EQ(category_bits(0x0301), kMark);            // combining acute (Mn)
    EXPECT_EQ(category_bits(0x17B6), kMark);            // Khmer vowel sign aa (Mc)
    EXPECT_EQ(category_bits('!'), kPunctuation);
    EXPECT_EQ(category_bits(0xFF5E), kSymbol);          // ～ fullwidth tilde (Sm)
    EXPECT_EQ(category_bits('$'), kSymbol);
    EXPECT_EQ(category_bits(0x1F999), kSymbol);         // 🦙
    EXPECT_EQ(category_bits(' '), kSeparator | kWhitespace);
    EXPECT_EQ(category_bits(0x3000), kSeparator | kWhitespace);
    EXPECT_EQ(category_bits(0x00A0), kSeparator | kWhitespace);
    EXPECT_EQ(category_bits('\n'), kOther | kWhitespace);
    EXPECT_EQ(category_bits(0x0085), kOther | kWhitespace);
    EXPECT_EQ(category_bits(0x001C), kOther);           // not White_Space, although Python's isspace says so
    EXPECT_EQ(category_bits(0x200B), kOther);           // zero width space is Cf, not White_Space
    EXPECT_EQ(category_bits(0xE000), kOther);           // private use
    EXPECT_EQ(category_bits(0x0378), kUnassigned);
    EXPECT_EQ(category_bits(0x10FFFF), kUnassigned);
    EXPECT_EQ(category_bits(0x110000), kUnassigned);
    EXPECT_EQ(category_bits(0xFFFFFFFF), kUnassigned);
    EXPECT_EQ(category_bits(0x20000), kLetter);         // CJK extension B, beyond the flat BMP table
}

TEST(UnicodeCategories, RunsAreSortedAndStartAtZero) {
    ASSERT_GT(kCategoryRunCount, 1000u);
    EXPECT_EQ(kCategoryRuns[0].first, 0u);
    for (size_t i = 1; i < kCategoryRunCount; ++i) {
        ASSERT_LT(kCategoryRuns[i - 1].first, kCategoryRuns[i].first) << i;
        ASSERT_NE(kCategoryRuns[i - 1].bits, kCategoryRuns[i].bits) << i;
    }
    EXPECT_STREQ(kUnicodeVersion, "14.0.0");
}

TEST(ByteLevelMap, Gpt2Mapping) {
    EXPECT_EQ(byte_to_codepoint('A'), uint32_t('A'));
    EXPECT_EQ(byte_to_codepoint('!'), uint32_t('!'));
    EXPECT_EQ(byte_to_codepoint(0x00), 0x0100u);
    EXPECT_EQ(byte_to_codepoint('\n'), 0x010Au);  // Ċ
    EXPECT_EQ(byte_to_codepoint(' '), 0x0120u);   // Ġ
    EXPECT_EQ(byte_to_codepoint(0x7F), 0x0121u);
    EXPECT_EQ(byte_to_codepoint(0xA0), 0x0142u);
    EXPECT_EQ(byte_to_codepoint(0xAD), 0x0143u);  // Ń
    EXPECT_EQ(byte_to_codepoint(0xAE), 0x00AEu);
    EXPECT_EQ(byte_to_codepoint(0xFF), 0x00FFu);
    std::set<uint32_t> seen;
    for (int b = 0; b < 256; ++b) {
        const uint32_t cp = byte_to_codepoint(static_cast<uint8_t>(b));
        EXPECT_TRUE(seen.insert(cp).second);
        EXPECT_EQ(codepoint_to_byte(cp), b);
    }
    EXPECT_EQ(codepoint_to_byte(' '), -1);    // a raw space is not byte-level text
    EXPECT_EQ(codepoint_to_byte(0x0144), -1);
    EXPECT_EQ(codepoint_to_byte(0x1F999), -1);
}

TEST(Utf8, DecodesWellFormedSequences) {
    const std::string s = "a\xC3\xA9\xE6\x88\x91\xF0\x9F\xA6\x99";  // a é 我 🦙
    Decoded d = decode_utf8(s, 0);
    EXPECT_EQ(d.cp, uint32_t('a'));
    EXPECT_EQ(d.len, 1u);
    d = decode_utf8(s, 1);
    EXPECT_EQ(d.cp, 0xE9u);
    EXPECT_EQ(d.len, 2u);
    d = decode_utf8(s, 3);
    EXPECT_EQ(d.cp, 0x6211u);
    EXPECT_EQ(d.len, 3u);
    d = decode_utf8(s, 6);
    EXPECT_EQ(d.cp, 0x1F999u);
    EXPECT_EQ(d.len, 4u);
    EXPECT_TRUE(d.valid);
}

TEST(Utf8, MalformedBytesDecodeOneAtATime) {
    for (const std::string & s : {std::string("\x80"), std::string("\xE2\x82"), std::string("\xC0\x80"),
                                std::string("\xF4\x90\x80\x80"), std::string("\xFF"), std::string("\xC3(")}) {
        const Decoded d = decode_utf8(s, 0);
        EXPECT_FALSE(d.valid);
        EXPECT_EQ(d.len, 1u);
        EXPECT_EQ(d.cp, kReplacementChar);
    }
}

TEST(Utf8, CompletePrefixHoldsBackUnfinishedSequences) {
    EXPECT_EQ(complete_utf8_prefix(""), 0u);
    EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
    EXPECT_EQ(complete_utf8_prefix("a\xC3"), 1u);                  // é cut after its lead byte
    EXPECT_EQ(complete_utf8_prefix("a\xC3\xA9"), 3u);
    EXPECT_EQ(complete_utf8_prefix("a\xF0\x9F\xA6"), 1u);          // 🦙 missing its last byte
    EXPECT_EQ(complete_utf8_prefix("a\xF0\x9F\xA6\x99"), 5u);
    EXPECT_EQ(complete_utf8_prefix("a\xE6\x88"), 1u);
    EXPECT_EQ(complete_utf8_prefix("a\x80\x80\x80\x80"), 5u);      // stray continuation bytes never complete
    EXPECT_EQ(complete_utf8_prefix("a\xFF"), 2u);
}

TEST(Utf8, AppendEncodes) {
    std::string out;
    append_utf8(out, 'x');
    append_utf8(out, 0xE9);
    append_utf8(out, 0x6211);
    append_utf8(out, 0x1F999);
    EXPECT_EQ(out, "x\xC3\xA9\xE6\x88\x91\xF0\x9F\xA6\x99");
}

}  // namespace
}  // namespace offgrid::runtime::unicode
