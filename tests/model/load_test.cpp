// Load-time checks (spec section 7): every defect gives an offgrid::Error that names the key or tensor.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/error.h"
#include "gguf/reader.h"
#include "model/qwen4exp/model.h"
#include "tiny_model.h"

namespace offgrid::model::qwen4exp {
namespace {

using test::GgufBuilder;

// Loads the builder's file and returns the error message ("" when it loads).
std::string load_error(const GgufBuilder & g) {
    const auto bytes = g.build();
    try {
        Model::from_reader(gguf::Reader::from_memory(bytes.data(), bytes.size(), "tiny"));
    } catch (const Error & e) {
        return e.what();
    }
    return "";
}

struct Defect {
    const char * what;
    std::function<void(GgufBuilder &)> apply;
    const char * must_mention;
};

TEST(Load, TinyModelLoadsWithDerivedValues) {
    const auto bytes = test::tiny_model({}).build();
    const Model m = Model::from_reader(gguf::Reader::from_memory(bytes.data(), bytes.size(), "tiny"));
    const Hparams & hp = m.hparams();
    EXPECT_EQ(hp.n_vocab, 64u);
    EXPECT_EQ(hp.n_layer, 4u);
    EXPECT_EQ(hp.kpool, 4u);
    EXPECT_TRUE(hp.is_recurrent[0]);
    EXPECT_FALSE(hp.is_recurrent[1]);
    EXPECT_EQ(hp.ple_heads(), 4u);
    EXPECT_EQ(m.attn_index(3), 1);
    EXPECT_EQ(m.recr_index(2), 1);
    const auto s = m.cache_shape(tensor::ElemType::F32, tensor::ElemType::F16);
    EXPECT_EQ(s.n_attn_layers, 2u);
    EXPECT_EQ(s.k_width, 16u);
    EXPECT_EQ(s.v_width, 16u);
    EXPECT_EQ(s.idx_width, 16u);
    EXPECT_EQ(s.n_recr_layers, 2u);
    EXPECT_EQ(s.conv_floats, 3u * (2 * 16 + 32));
    EXPECT_EQ(s.ssm_floats, 8u * 8 * 4);
    EXPECT_EQ(s.row_floats, 2u * 3 * 3 * 32);
    EXPECT_THROW(m.cache_shape(tensor::ElemType::Q8_0, tensor::ElemType::F16), Error);
}

TEST(Load, EveryDefectIsRefusedWithItsName) {
    const std::string a = "qwen4exp.";
    const std::vector<Defect> defects = {
        {"wrong architecture", [](GgufBuilder & g) { g.set_string("general.architecture", "llama"); }, "general.architecture"},
        {"missing hc count", [&](GgufBuilder & g) { g.remove(a + "hyper_connection.count"); }, "hyper_connection.count"},
        {"hc count 1", [&](GgufBuilder & g) { g.set_u32(a + "hyper_connection.count", 1); }, "hyper_connection.count"},
        {"mistyped eps", [&](GgufBuilder & g) { g.set_string(a + "attention.layer_norm_rms_epsilon", "x"); }, "layer_norm_rms_epsilon"},
        {"ssm state 0", [&](GgufBuilder & g) { g.set_u32(a + "ssm.state_size", 0); }, "ssm.state_size"},
        {"inner size", [&](GgufBuilder & g) { g.set_u32(a + "ssm.inner_size", 31); }, "ssm.inner_size"},
        {"indexer top_k 0", [&](GgufBuilder & g) { g.set_u32(a + "attention.indexer.top_k", 0); }, "indexer.top_k"},
        {"top_k not a pool multiple", [&](GgufBuilder & g) { g.set_u32(a + "attention.indexer.top_k", 18); }, "indexer.top_k"},
        {"ratios differ", [&](GgufBuilder & g) {
             g.set_array(a + "attention.compress_ratios", GgufBuilder::T::U32, std::vector<uint32_t>{0, 4, 0, 2});
         }, "compress_ratios"},
        {"ratios length", [&](GgufBuilder & g) {
             g.set_array(a + "attention.compress_ratios", GgufBuilder::T::U32, std::vector<uint32_t>{0, 4});
         }, "compress_ratios"},
        {"interval 0", [&](GgufBuilder & g) { g.set_u32(a + "full_attention_interval", 0); }, "full_attention_interval"},
        {"no experts", [&](GgufBuilder & g) { g.set_u32(a + "expert_count", 0); }, "expert_count"},
        {"too many used", [&](GgufBuilder & g) { g.set_u32(a + "expert_used_count", 5); }, "expert_used_count"},
        {"missing sections", [&](GgufBuilder & g) { g.remove(a + "rope.dimension_sections"); }, "rope.dimension_sections"},
        {"n_rot odd", [&](GgufBuilder & g) { g.set_u32(a + "rope.dimension_count", 7); }, "rope.dimension_count"},
        {"yarn", [&](GgufBuilder & g) { g.set_string(a + "rope.scaling.type", "yarn"); }, "rope.scaling.type"},
        {"two PLE layers", [&](GgufBuilder & g) {
             g.set_array(a + "ple.layers", GgufBuilder::T::U32, std::vector<uint32_t>{0, 2});
         }, "ple.layers"},
        {"PLE on attention", [&](GgufBuilder & g) {
             g.set_array(a + "ple.layers", GgufBuilder::T::U32, std::vector<uint32_t>{1});
         }, "ple.layers"},
        {"PLE layer out of range", [&](GgufBuilder & g) {
             g.set_array(a + "ple.layers", GgufBuilder::T::U32, std::vector<uint32_t>{9});
         }, "ple.layers"},
        {"ngram 9", [&](GgufBuilder & g) { g.set_u32(a + "ple.ngram_size", 9); }, "ple.ngram_size"},
        {"short multipliers", [&](GgufBuilder & g) {
             g.set_array(a + "ple.layer_multipliers", GgufBuilder::T::U64, std::vector<uint64_t>{1, 2});
         }, "ple.layer_multipliers"},
        {"short vocab sizes", [&](GgufBuilder & g) {
             g.set_array(a + "ple.head_vocab_sizes", GgufBuilder::T::U64, std::vector<uint64_t>{64, 64, 64});
         }, "ple.head_vocab_sizes"},
        {"zero vocab size", [&](GgufBuilder & g) {
             g.set_array(a + "ple.head_vocab_sizes", GgufBuilder::T::U64, std::vector<uint64_t>{64, 0, 64, 64});
         }, "ple.head_vocab_sizes"},
        {"offset overflow", [&](GgufBuilder & g) {
             g.set_array(a + "ple.head_offsets", GgufBuilder::T::U64, std::vector<uint64_t>{0, 64, 131, 0x7fffffffull});
         }, "ple.head_offsets"},
        {"PLE table too short", [&](GgufBuilder & g) {
             g.set_array(a + "ple.head_offsets", GgufBuilder::T::U64, std::vector<uint64_t>{0, 64, 131, 250});
         }, "per_layer_token_embd.weight"},
        {"PLE dim", [&](GgufBuilder & g) { g.set_u32(a + "embedding_length_per_layer_input", 4); }, "embedding_length_per_layer_input"},
        {"missing tensor", [](GgufBuilder & g) { g.remove_tensor("blk.2.ssm_out.weight"); }, "blk.2.ssm_out.weight"},
        {"wrong shape", [](GgufBuilder & g) {
             g.add_tensor("blk.1.attn_k.weight", {32, 17}, std::vector<float>(32 * 17));
         }, "blk.1.attn_k.weight"},
        {"unsupported type", [](GgufBuilder & g) {
             g.add_raw("blk.3.attn_v.weight", {32, 16}, tensor::ElemType::MXFP4, std::vector<uint8_t>(16 * 17));
         }, "blk.3.attn_v.weight"},
        {"fused qkv on attention", [](GgufBuilder & g) {
             g.add_tensor("blk.1.attn_qkv.weight", {32, 96}, std::vector<float>(32 * 96));
         }, "blk.1.attn_qkv.weight"},
        {"missing expert tensors", [](GgufBuilder & g) { g.remove_tensor("blk.0.ffn_gate_up_exps.weight"); }, "blk.0.ffn_gate_exps.weight"},
        {"bad scale size", [](GgufBuilder & g) {
             g.add_tensor("blk.0.ffn_down_exps.scale", {3}, std::vector<float>(3, 1.0f));
         }, "blk.0.ffn_down_exps.scale"},
        {"missing token_embd", [](GgufBuilder & g) { g.remove_tensor("token_embd.weight"); }, "token_embd.weight"},
    };
    for (const Defect & d : defects) {
        GgufBuilder g = test::tiny_model({});
        d.apply(g);
        const std::string msg = load_error(g);
        EXPECT_NE(msg, "") << d.what << ": loaded anyway";
        EXPECT_NE(msg.find(d.must_mention), std::string::npos) << d.what << ": message \"" << msg << "\"";
    }
}

TEST(Load, ScalarSectionsRepeatAndRecurrentLayersKey) {
    GgufBuilder g = test::tiny_model({});
    g.set_u32("qwen4exp.rope.dimension_sections", 2);
    g.set_array("qwen4exp.attention.recurrent_layers", GgufBuilder::T::BOOL, std::vector<uint8_t>{1, 0, 1, 0});
    g.remove("qwen4exp.full_attention_interval");
    const auto bytes = g.build();
    const Model m = Model::from_reader(gguf::Reader::from_memory(bytes.data(), bytes.size(), "tiny"));
    EXPECT_EQ(m.hparams().rope_sections, (std::array<int, 4>{2, 2, 2, 2}));
    EXPECT_TRUE(m.hparams().is_recurrent[2]);
    EXPECT_FALSE(m.hparams().is_recurrent[3]);
}

}  // namespace
}  // namespace offgrid::model::qwen4exp
