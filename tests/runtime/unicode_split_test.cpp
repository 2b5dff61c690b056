// The qwen2 / qwen35 pre-tokenizers on hand-worked examples of each alternative of their regular expressions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/unicode_split.h"

namespace offgrid::runtime {
namespace {

using Words = std::vector<std::string>;

Words split(const std::string & text, PreTokenizer pre = PreTokenizer::Qwen35) {
    std::vector<std::string_view> views;
    split_words(text, pre, views);
    return Words(views.begin(), views.end());
}

TEST(PreTokenizerNames, RoundTrip) {
    EXPECT_EQ(pre_tokenizer_from_name("qwen2"), PreTokenizer::Qwen2);
    EXPECT_EQ(pre_tokenizer_from_name("qwen35"), PreTokenizer::Qwen35);
    EXPECT_EQ(pre_tokenizer_from_name("llama3"), std::nullopt);
    EXPECT_EQ(pre_tokenizer_from_name(""), std::nullopt);
    EXPECT_EQ(pre_tokenizer_name(PreTokenizer::Qwen2), "qwen2");
    EXPECT_EQ(pre_tokenizer_name(PreTokenizer::Qwen35), "qwen35");
}

TEST(Split, Empty) { EXPECT_EQ(split(""), Words{}); }

TEST(Split, WordsTakeOneLeadingNonLetter) {
    EXPECT_EQ(split("Hello world"), (Words{"Hello", " world"}));
    EXPECT_EQ(split("(hello)"), (Words{"(hello", ")"}));
    EXPECT_EQ(split("\thi"), (Words{"\thi"}));
    EXPECT_EQ(split("\nhi"), (Words{"\n", "hi"}));  // a line break never leads a word
    EXPECT_EQ(split("我想在apple工作"), (Words{"我想在apple工作"}));
}

TEST(Split, ContractionsAreCaseInsensitive) {
    EXPECT_EQ(split("I'm"), (Words{"I", "'m"}));
    EXPECT_EQ(split("DON'T"), (Words{"DON", "'T"}));
    EXPECT_EQ(split("it'LL we've they'Re"), (Words{"it", "'LL", " we", "'ve", " they", "'Re"}));
    EXPECT_EQ(split("y'all"), (Words{"y", "'all"}));  // not a contraction: the quote leads the word
    EXPECT_EQ(split("'"), (Words{"'"}));
}

TEST(Split, DigitsOneByOne) {
    EXPECT_EQ(split("abc123"), (Words{"abc", "1", "2", "3"}));
    EXPECT_EQ(split("3.14"), (Words{"3", ".", "1", "4"}));
    EXPECT_EQ(split("½x"), (Words{"½", "x"}));
}

TEST(Split, PunctuationRunsTakeOneSpaceAndTrailingLineBreaks) {
    EXPECT_EQ(split("x !!!\n\ny"), (Words{"x", " !!!\n\n", "y"}));
    EXPECT_EQ(split("$$ 5"), (Words{"$$", " ", "5"}));
    EXPECT_EQ(split("end. "), (Words{"end", ".", " "}));
    EXPECT_EQ(split("a  (b"), (Words{"a", " ", " (", "b"}));
    EXPECT_EQ(split("🦙.cpp"), (Words{"🦙.", "cpp"}));
}

TEST(Split, Whitespace) {
    EXPECT_EQ(split(" "), (Words{" "}));
    EXPECT_EQ(split("   "), (Words{"   "}));
    EXPECT_EQ(split("  Hello"), (Words{" ", " Hello"}));
    EXPECT_EQ(split("a  "), (Words{"a", "  "}));
    EXPECT_EQ(split("hi\n\n there"), (Words{"hi", "\n\n", " there"}));
    EXPECT_EQ(split("\t\n"), (Words{"\t\n"}));
    EXPECT_EQ(split(" \t x"), (Words{" \t", " x"}));
    EXPECT_EQ(split("a \n \n b"), (Words{"a", " \n \n", " b"}));
    EXPECT_EQ(split("a\u3000\u3000b"), (Words{"a", "\u3000", "\u3000b"}));
}

TEST(Split, CombiningMarksDifferBetweenQwen2AndQwen35) {
    const std::string decomposed = "e\u0301t";  // e + combining acute + t
    EXPECT_EQ(split(decomposed, PreTokenizer::Qwen35), (Words{decomposed}));
    EXPECT_EQ(split(decomposed, PreTokenizer::Qwen2), (Words{"e", "\u0301t"}));
    EXPECT_EQ(split("!\u0301", PreTokenizer::Qwen2), (Words{"!\u0301"}));
    EXPECT_EQ(split("!\u0301", PreTokenizer::Qwen35), (Words{"!\u0301"}));  // ! leads the mark run
    EXPECT_EQ(split("1\u0301", PreTokenizer::Qwen2), (Words{"1", "\u0301"}));
}

TEST(Split, MalformedBytesStayRawAndSplitLikeReplacementChar) {
    EXPECT_EQ(split("a\xFF" "b"), (Words{"a", "\xFF" "b"}));
    EXPECT_EQ(split("\x80\x81 !"), (Words{"\x80\x81", " !"}));
    EXPECT_EQ(split("x\xE2\x82"), (Words{"x", "\xE2\x82"}));
}

TEST(Split, WordsCoverTheText) {
    const std::string text = "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～\n\n\t  x \xC3 end  ";
    for (const auto pre : {PreTokenizer::Qwen2, PreTokenizer::Qwen35}) {
        std::string joined;
        for (const auto & w : split(text, pre)) {
            EXPECT_FALSE(w.empty());
            joined += w;
        }
        EXPECT_EQ(joined, text);
    }
}

}  // namespace
}  // namespace offgrid::runtime
