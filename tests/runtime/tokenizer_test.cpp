// The BPE tokenizer on a small hand-built vocabulary: merge order, special tokens, detokenisation, errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/tokenizer.h"
#include "runtime/unicode.h"

namespace offgrid::runtime {
namespace {

using Ids = std::vector<TokenId>;

std::string byte_level(const std::string & raw) {
    std::string out;
    for (const char c : raw) unicode::append_utf8(out, unicode::byte_to_codepoint(static_cast<uint8_t>(c)));
    return out;
}

// Token b (0..255) is the byte b; then the tokens below, in order, from id 256.
TokenizerSpec small_spec() {
    TokenizerSpec spec;
    for (int b = 0; b < 256; ++b) spec.tokens.push_back(byte_level(std::string(1, static_cast<char>(b))));
    spec.token_types.assign(256, 1);
    const std::vector<std::pair<std::string, int>> extra = {
        {"he", 1},            // 256
        {"ll", 1},            // 257
        {"hell", 1},          // 258
        {"hello", 1},         // 259
        {byte_level(" w"), 1},  // 260
        {"ab", 1},            // 261
        {"bc", 1},            // 262
        {"aa", 1},            // 263
        {"<|end|>", 3},       // 264 control
        {"<u>", 4},           // 265 user-defined
        {"<u>x", 4},          // 266 user-defined, longer
        {"[unused]", 5},      // 267
    };
    for (const auto & [text, type] : extra) {
        spec.tokens.push_back(text);
        spec.token_types.push_back(type);
    }
    spec.merges = {"h e", "l l", "he ll", "hell o", byte_level(" ") + " w", "a a", "a b", "b c"};
    spec.eos = 264;
    return spec;
}

template <typename F>
void expect_error(F && f, const std::string & fragment) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

TEST(Tokenizer, MergesInRankOrder) {
    const Tokenizer tok(small_spec());
    EXPECT_EQ(tok.n_vocab(), 268u);
    EXPECT_EQ(tok.n_merges(), 8u);
    EXPECT_EQ(tok.tokenize("hello"), (Ids{259}));
    EXPECT_EQ(tok.tokenize("hell"), (Ids{258}));
    EXPECT_EQ(tok.tokenize("helo"), (Ids{256, 'l', 'o'}));
    EXPECT_EQ(tok.tokenize("hello world"), (Ids{259, 260, 'o', 'r', 'l', 'd'}));
    EXPECT_EQ(tok.tokenize("abc"), (Ids{261, 'c'}));  // "a b" ranks before "b c"
    EXPECT_EQ(tok.tokenize("aaa"), (Ids{263, 'a'}));  // equal ranks: leftmost first
    EXPECT_EQ(tok.tokenize("aaaa"), (Ids{263, 263}));
    EXPECT_EQ(tok.tokenize(""), Ids{});
}

TEST(Tokenizer, LowerRankWins) {
    TokenizerSpec spec = small_spec();
    spec.merges = {"b c", "a b"};
    const Tokenizer tok(spec);
    EXPECT_EQ(tok.tokenize("abc"), (Ids{'a', 262}));
    EXPECT_EQ(tok.tokenize("ab"), (Ids{261}));
}

TEST(Tokenizer, MergesStayInsideWords) {
    const Tokenizer tok(small_spec());
    // "h" and " ello" are different words, so "h e" cannot merge across them.
    EXPECT_EQ(tok.tokenize("h ello"), (Ids{'h', ' ', 'e', 257, 'o'}));
}

TEST(Tokenizer, ControlTokensOnlyWithParseSpecial) {
    const Tokenizer tok(small_spec());
    EXPECT_EQ(tok.tokenize("a<|end|>b", true), (Ids{'a', 264, 'b'}));
    EXPECT_EQ(tok.tokenize("a<|end|>b", false), (Ids{'a', '<', '|', 'e', 'n', 'd', '|', '>', 'b'}));
    EXPECT_EQ(tok.tokenize("<|end|><|end|>", true), (Ids{264, 264}));
}

TEST(Tokenizer, UserDefinedTokensAlwaysLongestFirst) {
    const Tokenizer tok(small_spec());
    EXPECT_EQ(tok.tokenize("<u><u>"), (Ids{265, 265}));
    EXPECT_EQ(tok.tokenize("<u>xy"), (Ids{266, 'y'}));
    EXPECT_EQ(tok.tokenize("y<u>"), (Ids{'y', 265}));
    EXPECT_EQ(tok.tokenize("hello<u>hello", false), (Ids{259, 265, 259}));
}

TEST(Tokenizer, Detokenize) {
    const Tokenizer tok(small_spec());
    EXPECT_EQ(tok.detokenize(Ids{'a', 264, 'b'}), "a<|end|>b");
    EXPECT_EQ(tok.detokenize(Ids{'a', 264, 'b'}, false), "ab");
    EXPECT_EQ(tok.detokenize(Ids{259, 260, 265, 267}), "hello w<u>");
    EXPECT_EQ(tok.token_to_piece(' '), " ");
    EXPECT_EQ(tok.token_to_piece(0xFF), "\xFF");
    EXPECT_EQ(tok.token_text(' '), "\xC4\xA0");  // Ġ
    expect_error([&] { tok.detokenize(Ids{268}); }, "token id 268 is out of range");
    expect_error([&] { tok.token_text(-1); }, "token id -1");
}

TEST(Tokenizer, RoundTripsAnyBytes) {
    const Tokenizer tok(small_spec());
    std::string all;
    for (int b = 255; b >= 0; --b) all.push_back(static_cast<char>(b));
    for (const std::string & text : {all, std::string("hello <u>x\n\n  \xC3\xA9\xE2\x82 end"),
                                     std::string("\xF0\x9F\xA6\x99 aaa'll 123")}) {
        EXPECT_EQ(tok.detokenize(tok.tokenize(text)), text);
        EXPECT_EQ(tok.detokenize(tok.tokenize(text, true)), text);
    }
}

TEST(Tokenizer, Lookups) {
    const Tokenizer tok(small_spec());
    EXPECT_EQ(tok.find_token("hello"), 259);
    EXPECT_EQ(tok.find_token("nope"), std::nullopt);
    EXPECT_EQ(tok.token_type(264), TokenType::Control);
    EXPECT_EQ(tok.token_type(265), TokenType::UserDefined);
    EXPECT_EQ(tok.token_type(0), TokenType::Normal);
    EXPECT_EQ(tok.eos(), 264);
    EXPECT_EQ(tok.bos(), std::nullopt);
    EXPECT_EQ(tok.pre_tokenizer(), PreTokenizer::Qwen2);
    const Tokenizer copy = tok;  // copies share the tables
    EXPECT_EQ(copy.tokenize("hello"), (Ids{259}));
}

TEST(Tokenizer, EndOfGenerationAndBos) {
    TokenizerSpec spec = small_spec();
    spec.tokens.push_back("<|im_end|>");  // 268, control: ends a turn
    spec.token_types.push_back(3);
    spec.tokens.push_back("</s>");  // 269, but a normal token: not special
    spec.token_types.push_back(1);
    spec.eos = 'x';  // an odd eos still counts
    const Tokenizer tok(spec);
    EXPECT_EQ(tok.end_of_generation_tokens(), (Ids{'x', 264, 268}));  // eos, <|end|>, <|im_end|>
    EXPECT_TRUE(tok.is_end_of_generation(268));
    EXPECT_TRUE(tok.is_end_of_generation('x'));
    EXPECT_TRUE(tok.is_end_of_generation(264));
    EXPECT_FALSE(tok.is_end_of_generation(265));  // user-defined, but not an end text
    EXPECT_FALSE(tok.is_end_of_generation(269));
    EXPECT_FALSE(tok.add_bos());
    spec.add_bos = true;
    EXPECT_FALSE(Tokenizer(spec).add_bos());  // no bos token
    spec.bos = 'b';
    EXPECT_TRUE(Tokenizer(spec).add_bos());
}

TEST(Tokenizer, RejectsBadSpecs) {
    auto with = [](auto edit) {
        TokenizerSpec s = small_spec();
        edit(s);
        return s;
    };
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.model = "llama"; })); }, "tokenizer.ggml.model");
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.pre = "gpt4o"; })); }, "tokenizer.ggml.pre");
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.tokens.clear(); s.token_types.clear(); })); },
                 "tokenizer.ggml.tokens");
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.token_types.pop_back(); })); },
                 "tokenizer.ggml.token_type");
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.token_types[7] = 9; })); },
                 "tokenizer.ggml.token_type[7]");
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.merges.push_back("ab"); })); },
                 "tokenizer.ggml.merges[8]");
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.merges.push_back("h q"); })); },
                 "tokenizer.ggml.merges[8] 'h q'");
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.merges.push_back("h "); })); },
                 "tokenizer.ggml.merges[8]");
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.eos = 268; })); }, "tokenizer.ggml.eos_token_id");
    expect_error([&] { Tokenizer(with([](TokenizerSpec & s) { s.bos = -2; })); }, "tokenizer.ggml.bos_token_id");
}

TEST(Tokenizer, MissingByteTokenIsAnError) {
    TokenizerSpec spec;
    spec.tokens = {"a", "b"};
    const Tokenizer tok(spec);
    EXPECT_EQ(tok.tokenize("ab"), (Ids{0, 1}));
    expect_error([&] { tok.tokenize("abz"); }, "byte 0x7a has no token");
}

TEST(Tokenizer, Qwen35KeepsMarksInWords) {
    // "a" + combining acute (CC 81): one word under qwen35, two under qwen2, so only qwen35 can merge "a" + CC.
    TokenizerSpec spec = small_spec();
    spec.tokens.push_back(byte_level("a\xCC"));  // 268
    spec.token_types.push_back(1);
    spec.merges.push_back("a " + byte_level("\xCC"));
    const Tokenizer tok2(spec);
    spec.pre = "qwen35";
    const Tokenizer tok35(spec);
    EXPECT_EQ(tok35.pre_tokenizer(), PreTokenizer::Qwen35);
    EXPECT_EQ(tok35.tokenize("a\xCC\x81"), (Ids{268, 0x81}));
    EXPECT_EQ(tok2.tokenize("a\xCC\x81"), (Ids{'a', 0xCC, 0x81}));
}

}  // namespace
}  // namespace offgrid::runtime
