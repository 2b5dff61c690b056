// Input files read in pieces: the tokens of the pieces equal the tokens of the whole text, however small the
// blocks; reading stops soon after the limit; token-id files and messages never echo control bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "common/error.h"
#include "runtime/byte_vocab.h"
#include "runtime/prompt_file.h"

namespace offgrid::runtime {
namespace {

namespace fs = std::filesystem;

std::string mixed_text() {
    // Newlines before letters, digits and punctuation, runs of spaces and newlines, contractions, non-ASCII
    // letters and spaces (U+3000, U+00A0), combining marks, invalid UTF-8.
    std::string t(byte_vocab_sample_text());
    t += "\nline two\n\n  indented\n12345 numbers\n(paren) it's we'll\n\xe3\x80\x80wide\n\xc2\xa0nbsp e\xcc\x81t\xc3\xa9";
    t += "\r\nwindows\r\n\r\n!!! ... \n\xff\xfe broken\nend  double  spaces a b c\n";
    std::string all;
    for (int i = 0; i < 5; ++i) all += t;
    return all;
}

fs::path temp_file(const std::string & name, const std::string & data) {
    const fs::path p = fs::temp_directory_path() / ("offgrid_prompt_file_" + std::to_string(::getpid()) + "_" + name);
    std::ofstream(p, std::ios::binary) << data;
    return p;
}

TEST(PromptFile, PiecesGiveTheTokensOfTheWholeText) {
    const Tokenizer tok = byte_vocab_tokenizer();
    const std::string text = mixed_text();
    const std::vector<TokenId> whole = tok.tokenize(text, false);
    for (size_t block : {1u, 2u, 3u, 7u, 16u, 64u, 1000u, 1u << 20}) {
        const BoundedTokens b = tokenize_text(tok, text, SIZE_MAX, block);
        EXPECT_FALSE(b.over);
        EXPECT_EQ(b.tokens, whole) << "block " << block;
    }
    const fs::path f = temp_file("whole.txt", text);
    EXPECT_EQ(tokenize_file(tok, f.string(), SIZE_MAX, "-f", 5).tokens, whole);
    fs::remove(f);
}

TEST(PromptFile, StopsSoonAfterTheLimit) {
    const Tokenizer tok = byte_vocab_tokenizer();
    std::string text;
    for (int i = 0; i < 20000; ++i) text += "some words on a line\n";
    const size_t n = tok.tokenize(text, false).size();
    const BoundedTokens fits = tokenize_text(tok, text, n, 4096);
    EXPECT_FALSE(fits.over);
    EXPECT_EQ(fits.tokens.size(), n);
    const BoundedTokens over = tokenize_text(tok, text, 100, 4096);
    EXPECT_TRUE(over.over);
    EXPECT_GT(over.tokens.size(), 100u);
    EXPECT_LT(over.tokens.size(), 100u + 4096u);  // at most one block beyond the limit
    // Without any cut position the bytes alone prove it: a single 1 MB word is refused without tokenising it.
    const BoundedTokens word = tokenize_text(tok, std::string(1u << 20, 'x'), 100, 4096);
    EXPECT_TRUE(word.over);
    EXPECT_TRUE(word.tokens.empty());
}

TEST(PromptFile, TokenIdsAndTheirErrors) {
    const fs::path ok = temp_file("ids.txt", " 1 2\n3\t4  \n");
    const BoundedTokens ids = read_token_ids(ok.string(), 10, SIZE_MAX, "-f");
    EXPECT_EQ(ids.tokens, (std::vector<TokenId>{1, 2, 3, 4}));
    EXPECT_TRUE(read_token_ids(ok.string(), 10, 2, "-f").over);
    const fs::path bad = temp_file("bad.txt", "1 2 \x1b]0;pwned\x07 4");
    try {
        read_token_ids(bad.string(), 10, SIZE_MAX, "-f");
        FAIL() << "no error";
    } catch (const Error & e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("token 2: expected a token id, got '\\x1b]0;pwned\\x07'"), std::string::npos) << msg;
        for (const char c : msg) EXPECT_GE(static_cast<unsigned char>(c), 0x20u) << msg;
    }
    const fs::path big = temp_file("big.txt", "1 99");
    EXPECT_THROW(read_token_ids(big.string(), 10, SIZE_MAX, "-f"), Error);
    fs::remove(ok);
    fs::remove(bad);
    fs::remove(big);
}

TEST(PromptFile, PrintableEscapesControlBytes) {
    EXPECT_EQ(printable("plain text"), "plain text");
    EXPECT_EQ(printable("a\x1b[2Jb\n\\"), "a\\x1b[2Jb\\x0a\\x5c");
    EXPECT_EQ(printable(std::string(100, 'y'), 4), "yyyy...");
}

}  // namespace
}  // namespace offgrid::runtime
