// The Reader on the real files in ../shared: the four golden models and the Qwen vocabulary file.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/shared_dir.h"
#include "gguf/reader.h"

using offgrid::gguf::Reader;
using offgrid::gguf::ValueType;
using offgrid::tensor::ElemType;

namespace {

std::vector<std::string> golden_models() {
    std::vector<std::string> out;
    for (const auto & e : std::filesystem::directory_iterator(offgrid::test::shared_dir() + "/golden/models")) {
        if (e.path().extension() == ".gguf") out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string vocab_path() { return offgrid::test::shared_dir() + "/data/ggml-vocab-qwen35.gguf"; }

}  // namespace

TEST(GoldenFiles, ModelsOpenWithKnownHyperParameters) {
    OFFGRID_REQUIRE_SHARED();
    const auto models = golden_models();
    ASSERT_EQ(models.size(), 4u);
    for (const auto & path : models) {
        SCOPED_TRACE(path);
        const Reader r = Reader::open(path);
        EXPECT_EQ(r.version(), 3u);
        EXPECT_EQ(r.alignment(), 32u);
        EXPECT_EQ(r.data_offset() % 32, 0u);
        EXPECT_EQ(r.get_string("general.architecture"), "qwen4exp");
        EXPECT_EQ(r.get_u32("qwen4exp.embedding_length"), 64u);
        EXPECT_EQ(r.get_u32("qwen4exp.block_count"), 4u);
        EXPECT_EQ(r.get_u32("qwen4exp.vocab_size"), 128u);
        EXPECT_EQ(r.get_u32("qwen4exp.attention.head_count"), 4u);
        EXPECT_EQ(r.get_u32("qwen4exp.attention.head_count_kv"), 2u);
        EXPECT_EQ(r.get_u32("qwen4exp.ssm.conv_kernel"), 4u);
        EXPECT_EQ(r.get_u32("qwen4exp.hyper_connection.count"), 4u);
        EXPECT_FLOAT_EQ(r.get_f32("qwen4exp.attention.layer_norm_rms_epsilon"), 1e-6f);
        EXPECT_FLOAT_EQ(r.get_f32("qwen4exp.rope.freq_base"), 10000.0f);
        EXPECT_FALSE(r.get_u32_opt("qwen4exp.no_such_key").has_value());

        const auto * sections = r.find("qwen4exp.rope.dimension_sections");
        ASSERT_NE(sections, nullptr);
        ASSERT_EQ(sections->type, ValueType::ARRAY);
        ASSERT_EQ(sections->array.size(), 4u);
        EXPECT_EQ(sections->array[0].is_integer() ? sections->array[0].u + sections->array[0].i : -1, 2u);

        const auto * tokens = r.find("tokenizer.ggml.tokens");
        ASSERT_NE(tokens, nullptr);
        ASSERT_EQ(tokens->elem_type, ValueType::STRING);
        ASSERT_EQ(tokens->array.size(), 128u);
        EXPECT_EQ(tokens->array[0].s, "tok_0");
        EXPECT_EQ(tokens->array[127].s, "tok_127");

        const auto * embd = r.find_tensor("token_embd.weight");
        ASSERT_NE(embd, nullptr);
        EXPECT_EQ(embd->type, ElemType::F32);
        EXPECT_EQ(embd->ne, (std::vector<int64_t>{64, 128}));
        EXPECT_EQ(embd->n_elements(), 64 * 128);
        EXPECT_EQ(embd->n_bytes, 64u * 128u * 4u);
        EXPECT_EQ(embd->data, r.bytes().data() + r.data_offset() + embd->offset);
        EXPECT_EQ(r.find_tensor("no.such.tensor"), nullptr);

        // Every tensor lies inside the file, and the last one ends where the file ends (32-byte padded).
        uint64_t end = 0;
        for (const auto & t : r.tensors()) {
            EXPECT_EQ(t.data, r.bytes().data() + r.data_offset() + t.offset);
            end = std::max(end, r.data_offset() + t.offset + t.n_bytes);
        }
        EXPECT_EQ((end + 31) / 32 * 32, r.bytes().size());
    }
}

TEST(GoldenFiles, TinyR1HasKnownLayout) {
    OFFGRID_REQUIRE_SHARED();
    const Reader r = Reader::open(offgrid::test::shared_dir() + "/golden/models/tiny-r1.gguf");
    EXPECT_EQ(r.metadata().size(), 43u);
    EXPECT_EQ(r.tensors().size(), 184u);
    EXPECT_EQ(r.metadata().front().key, "general.architecture");
    EXPECT_EQ(r.tensors()[1].name, "output_hc_norm.weight");
    EXPECT_EQ(r.tensors()[1].offset, 32768u);
    const auto * mult = r.find("qwen4exp.ple.layer_multipliers");
    ASSERT_NE(mult, nullptr);
    ASSERT_EQ(mult->elem_type, ValueType::U64);
    ASSERT_EQ(mult->array.size(), 3u);
    EXPECT_EQ(mult->array[1].u, 1000003u);
    EXPECT_EQ(mult->array[2].u, 998244353u);
}

TEST(GoldenFiles, VocabularyOpensFast) {
    OFFGRID_REQUIRE_SHARED();
    const auto start = std::chrono::steady_clock::now();
    const Reader r = Reader::open(vocab_path());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("open %s: %.1f ms\n", vocab_path().c_str(), ms);
    EXPECT_LT(ms, 1000.0);

    EXPECT_EQ(r.tensors().size(), 0u);
    EXPECT_EQ(r.metadata().size(), 20u);
    EXPECT_EQ(r.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(r.get_string("tokenizer.ggml.pre"), "qwen35");
    EXPECT_EQ(r.get_u32("tokenizer.ggml.eos_token_id"), 151643u);
    EXPECT_EQ(r.get_u32("tokenizer.ggml.bos_token_id"), 151643u);
    const auto * tokens = r.find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->elem_type, ValueType::STRING);
    ASSERT_EQ(tokens->array.size(), 151936u);
    EXPECT_EQ(tokens->array[0].s, "!");
    EXPECT_EQ(tokens->array[1].s, "\"");
    const auto * types = r.find("tokenizer.ggml.token_type");
    ASSERT_NE(types, nullptr);
    EXPECT_EQ(types->elem_type, ValueType::I32);
    EXPECT_EQ(types->array.size(), 151936u);
    const auto * merges = r.find("tokenizer.ggml.merges");
    ASSERT_NE(merges, nullptr);
    ASSERT_EQ(merges->array.size(), 151387u);
    EXPECT_EQ(merges->array[0].s, "\xc4\xa0 \xc4\xa0");  // "Ġ Ġ"
    EXPECT_NE(r.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);
}

TEST(GoldenFiles, TypedGettersNameTheKey) {
    OFFGRID_REQUIRE_SHARED();
    const Reader r = Reader::open(vocab_path());
    try {
        r.get_u32("tokenizer.ggml.model");
        FAIL() << "a string read as u32";
    } catch (const offgrid::FileError & e) {
        EXPECT_EQ(e.field(), "tokenizer.ggml.model");
        EXPECT_EQ(e.offset(), r.value_offset("tokenizer.ggml.model"));
        EXPECT_NE(std::string(e.what()).find("has type string"), std::string::npos) << e.what();
    }
    try {
        r.get_string("general.nothing");
        FAIL() << "a missing key";
    } catch (const offgrid::FileError & e) {
        EXPECT_EQ(e.field(), "general.nothing");
        EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
    }
    EXPECT_THROW(r.get_f32("general.name"), offgrid::FileError);
    EXPECT_THROW(r.get_bool("general.file_type"), offgrid::FileError);
}
