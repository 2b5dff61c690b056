// Writing a tokenizer spec as GGUF key/values and reading it back; type errors in the metadata.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "runtime/byte_vocab.h"
#include "runtime/tokenizer.h"

namespace offgrid::runtime {
namespace {

using gguf::KeyValue;
using gguf::Value;
using gguf::ValueType;

const Value * find(const std::vector<KeyValue> & kv, const std::string & key) {
    for (const auto & e : kv) {
        if (e.key == key) return &e.value;
    }
    return nullptr;
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

TEST(TokenizerMetadata, ByteVocabRoundTrip) {
    const TokenizerSpec & spec = byte_vocab_spec();
    const std::vector<KeyValue> kv = tokenizer_metadata(spec);
    ASSERT_NE(find(kv, "tokenizer.ggml.model"), nullptr);
    EXPECT_EQ(find(kv, "tokenizer.ggml.model")->s, "gpt2");
    EXPECT_EQ(find(kv, "tokenizer.ggml.pre")->s, "qwen2");
    const Value * tokens = find(kv, "tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->type, ValueType::ARRAY);
    EXPECT_EQ(tokens->elem_type, ValueType::STRING);
    EXPECT_EQ(tokens->array.size(), spec.tokens.size());
    const Value * types = find(kv, "tokenizer.ggml.token_type");
    ASSERT_NE(types, nullptr);
    EXPECT_EQ(types->elem_type, ValueType::I32);
    EXPECT_EQ(types->array.back().i, 3);  // <|endoftext|> is a control token
    EXPECT_EQ(find(kv, "tokenizer.ggml.eos_token_id")->type, ValueType::U32);
    EXPECT_EQ(find(kv, "tokenizer.ggml.eos_token_id")->u, 501u);
    EXPECT_EQ(find(kv, "tokenizer.ggml.bos_token_id"), nullptr);

    const TokenizerSpec back = spec_from_metadata(kv);
    EXPECT_EQ(back.model, spec.model);
    EXPECT_EQ(back.pre, spec.pre);
    EXPECT_EQ(back.tokens, spec.tokens);
    EXPECT_EQ(back.token_types, spec.token_types);
    EXPECT_EQ(back.merges, spec.merges);
    EXPECT_EQ(back.eos, spec.eos);
    EXPECT_EQ(back.bos, std::nullopt);
    EXPECT_EQ(back.add_bos, std::nullopt);
    const Tokenizer tok(back);
    EXPECT_EQ(tok.detokenize(tok.tokenize("round trip")), "round trip");

    TokenizerSpec with_bos = spec;
    with_bos.bos = 501;
    with_bos.add_bos = true;
    const std::vector<KeyValue> kv2 = tokenizer_metadata(with_bos);
    ASSERT_NE(find(kv2, "tokenizer.ggml.add_bos_token"), nullptr);
    EXPECT_EQ(find(kv2, "tokenizer.ggml.add_bos_token")->type, ValueType::BOOL);
    EXPECT_EQ(spec_from_metadata(kv2).add_bos, true);
    EXPECT_EQ(spec_from_metadata(kv2).bos, 501);
}

TEST(TokenizerMetadata, ThroughAGgufFile) {
    gguf::Writer writer;
    writer.set_string("general.architecture", "qwen4exp");
    for (auto & kv : tokenizer_metadata(byte_vocab_spec())) writer.set(kv.key, kv.value);
    const std::vector<uint8_t> bytes = writer.to_bytes();
    const gguf::Reader reader = gguf::Reader::from_memory(bytes.data(), bytes.size(), "byte_vocab.gguf");
    const Tokenizer tok = Tokenizer::from_gguf(reader);
    EXPECT_EQ(tok.n_vocab(), 502u);
    EXPECT_EQ(tok.n_merges(), 245u);
    EXPECT_EQ(tok.eos(), 501);
    EXPECT_EQ(tok.token_type(501), TokenType::Control);
    const Tokenizer direct = byte_vocab_tokenizer();
    const std::string text(byte_vocab_sample_text());
    EXPECT_EQ(tok.tokenize(text), direct.tokenize(text));
    EXPECT_EQ(tok.detokenize(tok.tokenize(text)), text);
}

TEST(TokenizerMetadata, TypeErrorsNameTheKey) {
    const std::vector<KeyValue> good = tokenizer_metadata(byte_vocab_spec());
    const auto edited = [&](const std::string & key, auto edit) {
        std::vector<KeyValue> kv = good;
        for (auto & e : kv) {
            if (e.key == key) edit(e.value);
        }
        return kv;
    };
    expect_error([&] { spec_from_metadata({}, "empty.gguf"); }, "empty.gguf: no tokenizer in the file");
    expect_error([&] {
        spec_from_metadata(edited("tokenizer.ggml.model", [](Value & v) { v.type = ValueType::U32; }), "m.gguf");
    }, "m.gguf: tokenizer.ggml.model: expected a string");
    expect_error([&] {
        spec_from_metadata(edited("tokenizer.ggml.tokens", [](Value & v) { v.elem_type = ValueType::U32; }));
    }, "tokenizer.ggml.tokens: expected an array of strings");
    expect_error([&] {
        spec_from_metadata(edited("tokenizer.ggml.token_type", [](Value & v) { v.elem_type = ValueType::F32; }));
    }, "tokenizer.ggml.token_type: expected an array of integers");
    expect_error([&] {
        spec_from_metadata(edited("tokenizer.ggml.merges", [](Value & v) { v.type = ValueType::STRING; }));
    }, "tokenizer.ggml.merges: expected an array of strings");
    expect_error([&] {
        spec_from_metadata(edited("tokenizer.ggml.eos_token_id", [](Value & v) { v.type = ValueType::F32; }));
    }, "tokenizer.ggml.eos_token_id: expected an integer");
    expect_error([&] {
        spec_from_metadata(edited("tokenizer.ggml.eos_token_id", [](Value & v) { v.u = 1ull << 40; }));
    }, "tokenizer.ggml.eos_token_id: token id");
    expect_error([&] {
        std::vector<KeyValue> kv = good;
        gguf::Value v;
        v.type = ValueType::U32;
        kv.push_back({"tokenizer.ggml.add_bos_token", v});
        spec_from_metadata(kv);
    }, "tokenizer.ggml.add_bos_token: expected a bool");
    std::vector<KeyValue> no_tokens = good;
    std::erase_if(no_tokens, [](const KeyValue & e) { return e.key == "tokenizer.ggml.tokens"; });
    expect_error([&] { spec_from_metadata(no_tokens); }, "tokenizer.ggml.tokens: missing");
    // No pre-tokenizer key: read as "default", which the tokenizer does not support.
    std::vector<KeyValue> no_pre = good;
    std::erase_if(no_pre, [](const KeyValue & e) { return e.key == "tokenizer.ggml.pre"; });
    EXPECT_EQ(spec_from_metadata(no_pre).pre, "default");
    expect_error([&] { Tokenizer{spec_from_metadata(no_pre)}; }, "unsupported pre-tokenizer 'default'");

    TokenizerSpec bad = byte_vocab_spec();
    bad.token_types.pop_back();
    expect_error([&] { tokenizer_metadata(bad); }, "tokenizer.ggml.token_type");
}

}  // namespace
}  // namespace offgrid::runtime
