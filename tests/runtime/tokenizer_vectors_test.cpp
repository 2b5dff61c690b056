// The ecosystem's tokenizer test vectors for the Qwen vocabulary (shared/data/ggml-vocab-qwen35.gguf.inp/.out):
// the .inp file holds the texts, each followed by "\n__ggml_vocab_test__\n"; line i of the .out file holds the
// token ids of text i, separated by spaces. They were produced by llama.cpp's test-tokenizer-0 (no BOS, special
// tokens not parsed).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/shared_dir.h"
#include "gguf/reader.h"
#include "runtime/tokenizer.h"

namespace offgrid::runtime {
namespace {

std::string vocab_path() { return test::shared_dir() + "/data/ggml-vocab-qwen35.gguf"; }

std::string read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in) << path;
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Vector {
    std::string text;
    std::vector<TokenId> ids;
};

std::vector<Vector> read_vectors() {
    const std::string inp = read_all(vocab_path() + ".inp");
    const std::string out = read_all(vocab_path() + ".out");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<Vector> vectors;
    for (size_t pos = 0; pos < inp.size();) {
        const size_t end = inp.find(sep, pos);
        vectors.push_back({inp.substr(pos, end == std::string::npos ? std::string::npos : end - pos), {}});
        if (end == std::string::npos) break;
        pos = end + sep.size();
    }
    std::istringstream lines(out);
    size_t i = 0;
    for (std::string line; std::getline(lines, line); ++i) {
        if (i >= vectors.size()) {
            ADD_FAILURE() << "more .out lines than .inp texts";
            break;
        }
        std::istringstream fields(line);
        for (TokenId id; fields >> id;) vectors[i].ids.push_back(id);
    }
    EXPECT_EQ(i, vectors.size()) << "the .inp and .out files disagree on the number of vectors";
    return vectors;
}

TEST(TokenizerVectors, Qwen35ExactAndRoundTrip) {
    OFFGRID_REQUIRE_SHARED();
    const auto t0 = std::chrono::steady_clock::now();
    const gguf::Reader reader = gguf::Reader::open(vocab_path());
    const Tokenizer tok = Tokenizer::from_gguf(reader);
    const auto t1 = std::chrono::steady_clock::now();
    EXPECT_EQ(tok.n_vocab(), 151936u);
    EXPECT_EQ(tok.n_merges(), 151387u);
    EXPECT_EQ(tok.pre_tokenizer(), PreTokenizer::Qwen35);
    EXPECT_EQ(tok.eos(), 151643);
    EXPECT_EQ(tok.token_type(151644), TokenType::Control);
    EXPECT_EQ(tok.end_of_generation_tokens(), (std::vector<TokenId>{151643, 151645}));  // <|endoftext|>, <|im_end|>
    EXPECT_FALSE(tok.add_bos());

    const std::vector<Vector> vectors = read_vectors();
    ASSERT_EQ(vectors.size(), 50u);
    const auto t2 = std::chrono::steady_clock::now();
    size_t exact = 0;
    for (const Vector & v : vectors) {
        const std::vector<TokenId> got = tok.tokenize(v.text);
        EXPECT_EQ(got, v.ids) << "text: '" << v.text << "'";
        EXPECT_EQ(tok.detokenize(got), v.text);
        exact += got == v.ids;
    }
    const auto t3 = std::chrono::steady_clock::now();
    const double load_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    const double tok_ms = std::chrono::duration<double, std::milli>(t3 - t2).count();
    std::printf("qwen35 vectors: %zu/%zu exact; load %.1f ms, tokenise all %.2f ms\n", exact, vectors.size(),
                load_ms, tok_ms);
    EXPECT_LT(tok_ms, 1000.0);
}

TEST(TokenizerVectors, SpecialTokensOfTheQwenVocabulary) {
    OFFGRID_REQUIRE_SHARED();
    const Tokenizer tok = Tokenizer::from_gguf(gguf::Reader::open(vocab_path()));
    // Control tokens are cut out only with parse_special; user-defined ones ([PAD...]) always.
    const std::string chat = "<|im_start|>user\nHello<|im_end|>";
    const std::vector<TokenId> parsed = tok.tokenize(chat, true);
    EXPECT_EQ(parsed, (std::vector<TokenId>{151644, 872, 198, 9707, 151645}));
    EXPECT_EQ(tok.detokenize(parsed), chat);
    EXPECT_EQ(tok.detokenize(parsed, false), "user\nHello");
    const std::vector<TokenId> plain = tok.tokenize(chat, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 151644), 0);
    EXPECT_EQ(tok.detokenize(plain), chat);
    EXPECT_EQ(tok.tokenize("a[PAD151646]b", false), (std::vector<TokenId>{64, 151646, 65}));
}

TEST(TokenizerVectors, RandomTextRoundTrips) {
    OFFGRID_REQUIRE_SHARED();
    const Tokenizer tok = Tokenizer::from_gguf(gguf::Reader::open(vocab_path()));
    // Pieces that exercise every branch of the pre-tokenizer, plus malformed UTF-8 and special-token text.
    const std::vector<std::string> pieces = {
        "a", "Z", "word", " ", "  ", "\t", "\n", "\r\n", "'s", "'LL", "'", "7", "42", "!", "...", "(", "\xC3\xA9",
        "e\xCC\x81", "\xCC\x81", "\xE6\x88\x91", "\xF0\x9F\xA6\x99", "\xE3\x80\x80", "\xC2\xA0", "\x80",
        "\xFF", "\xE2\x82", "<|im_start|>", "[PAD151650]", "\xEF\xBD\x9E", "\xE1\x9E\x80"};
    std::mt19937 rng(42);
    for (int round = 0; round < 300; ++round) {
        std::string text;
        const int n = static_cast<int>(rng() % 24);
        for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
        for (const bool special : {false, true}) {
            const std::vector<TokenId> ids = tok.tokenize(text, special);
            ASSERT_EQ(tok.detokenize(ids), text) << "special " << special;
            for (const TokenId id : ids) ASSERT_LT(static_cast<size_t>(id), tok.n_vocab());
        }
    }
}

TEST(TokenizerVectors, GgufErrors) {
    OFFGRID_REQUIRE_SHARED();
    // The golden models carry a placeholder tokenizer ("test"), which is not supported.
    const gguf::Reader golden = gguf::Reader::open(test::shared_dir() + "/golden/models/tiny-r1.gguf");
    try {
        Tokenizer::from_gguf(golden);
        ADD_FAILURE() << "no error";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("tiny-r1.gguf"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace offgrid::runtime
