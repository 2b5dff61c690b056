// The embedded byte-level vocabulary. The expected merges come from an independent Python re-implementation
// of the same training rule run over the same sample (ASCII classes suffice: the sample is plain ASCII).
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/byte_vocab.h"
#include "runtime/unicode.h"

namespace offgrid::runtime {
namespace {

const std::string kG = "\xC4\xA0";  // Ġ, the byte-level space

TEST(ByteVocab, LearnedMerges) {
    const TokenizerSpec & spec = byte_vocab_spec();
    EXPECT_EQ(spec.model, "gpt2");
    EXPECT_EQ(spec.pre, "qwen2");
    ASSERT_EQ(spec.merges.size(), 245u);  // the sample runs out of pairs seen twice before the cap of 384
    ASSERT_EQ(spec.tokens.size(), 502u);
    ASSERT_EQ(spec.token_types.size(), spec.tokens.size());
    const std::vector<std::string> first = {kG + " t", "h e", kG + " a", kG + "t he", kG + " i", kG + " o", "e r",
                                            "e s"};
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(spec.merges[i], first[i]) << i;
    EXPECT_EQ(spec.merges.back(), kG + "keep s");
    EXPECT_EQ(spec.tokens[256], kG + "t");
    EXPECT_EQ(spec.tokens[257], "he");
    EXPECT_EQ(spec.tokens[300], "ti");
    EXPECT_EQ(spec.tokens[500], kG + "keeps");
}

TEST(ByteVocab, LayoutAndEos) {
    const TokenizerSpec & spec = byte_vocab_spec();
    for (int b = 0; b < 256; ++b) {
        std::string text;
        unicode::append_utf8(text, unicode::byte_to_codepoint(static_cast<uint8_t>(b)));
        EXPECT_EQ(spec.tokens[b], text) << b;
    }
    EXPECT_EQ(spec.eos, 501);
    EXPECT_EQ(spec.tokens[501], "<|endoftext|>");
    EXPECT_EQ(spec.token_types[501], static_cast<int32_t>(TokenType::Control));
    std::set<std::string> unique(spec.tokens.begin(), spec.tokens.end());
    EXPECT_EQ(unique.size(), spec.tokens.size());
    for (size_t i = 0; i + 1 < spec.tokens.size(); ++i) EXPECT_EQ(spec.token_types[i], 1) << i;
}

TEST(ByteVocab, Deterministic) {
    const TokenizerSpec again = train_byte_vocab(byte_vocab_sample_text(), kByteVocabMaxMerges);
    EXPECT_EQ(again.tokens, byte_vocab_spec().tokens);
    EXPECT_EQ(again.merges, byte_vocab_spec().merges);
    const TokenizerSpec few = train_byte_vocab(byte_vocab_sample_text(), 3);
    EXPECT_EQ(few.merges, (std::vector<std::string>(byte_vocab_spec().merges.begin(),
                                                    byte_vocab_spec().merges.begin() + 3)));
    EXPECT_EQ(few.tokens.size(), 256u + 3u + 1u);
}

TEST(ByteVocab, TrainerTieBreakAndRepeatedPairs) {
    // "aaaa" twice: pair (a,a) counts 3 per word, so 6; after merging, (aa,aa) counts 2.
    const TokenizerSpec spec = train_byte_vocab("aaaa aaaa", 10);
    ASSERT_GE(spec.merges.size(), 2u);
    EXPECT_EQ(spec.merges[0], "a a");
    EXPECT_EQ(spec.merges[1], "aa aa");
    EXPECT_EQ(spec.tokens[256], "aa");
    EXPECT_EQ(spec.tokens[257], "aaaa");
    // Equal counts: the pair with the smaller ids wins ("a b" before "c d").
    const TokenizerSpec tie = train_byte_vocab("cd\nab\ncd\nab", 1);
    ASSERT_EQ(tie.merges.size(), 1u);
    EXPECT_EQ(tie.merges[0], "a b");
    EXPECT_TRUE(train_byte_vocab("", 10).merges.empty());
}

TEST(ByteVocab, RoundTripsAndCompresses) {
    const Tokenizer tok = byte_vocab_tokenizer();
    const std::string sample(byte_vocab_sample_text());
    const auto ids = tok.tokenize(sample);
    EXPECT_EQ(tok.detokenize(ids), sample);
    EXPECT_LT(ids.size() * 2, sample.size()) << ids.size() << " tokens for " << sample.size() << " bytes";
    EXPECT_EQ(tok.tokenize("the", false), (std::vector<TokenId>{tok.find_token("the").value()}));

    std::mt19937 rng(7);
    for (int round = 0; round < 20; ++round) {
        std::string text;
        const int n = static_cast<int>(rng() % 200);
        for (int i = 0; i < n; ++i) text.push_back(static_cast<char>(rng() & 0xFF));
        EXPECT_EQ(tok.detokenize(tok.tokenize(text)), text);
    }
    const std::string mixed = "Grüße aus dem Wald! 北の森。 tab\tnew\r\nline 3.14159 <|endoftext|>";
    EXPECT_EQ(tok.detokenize(tok.tokenize(mixed)), mixed);
    const auto with_eos = tok.tokenize("end<|endoftext|>", true);
    ASSERT_FALSE(with_eos.empty());
    EXPECT_EQ(with_eos.back(), tok.eos().value());
    EXPECT_EQ(tok.detokenize(with_eos), "end<|endoftext|>");
    EXPECT_EQ(tok.detokenize(with_eos, false), "end");
}

}  // namespace
}  // namespace offgrid::runtime
