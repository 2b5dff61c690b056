// `offgrid gen-model`: deterministic bytes, the spec's GGUF conventions, overrides, loadable and numerically sane.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cli_helpers.h"
#include "gguf/reader.h"
#include "model/qwen4exp/gen_model.h"
#include "model/qwen4exp/model.h"
#include "offgrid/context.h"
#include "runtime/byte_vocab.h"
#include "runtime/tokenizer.h"

namespace offgrid::test {
namespace {

using gguf::ValueType;
using tensor::ElemType;

std::vector<float> tensor_floats(const gguf::TensorInfo & t) {
    EXPECT_EQ(t.type, ElemType::F32) << t.name;
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    std::memcpy(v.data(), t.data, v.size() * sizeof(float));
    return v;
}

TEST(GenModel, SameArgumentsGiveSameBytes) {
    TempDir dir;
    for (const std::string args : {"", "--preset small --type q8_0 --seed 7 --n-layer 5"}) {
        const CmdResult a = run_offgrid("gen-model -o " + q(dir.file("a.gguf")) + " " + args);
        ASSERT_EQ(a.status, 0) << a.err;
        const CmdResult b = run_offgrid("gen-model " + args + " -o " + q(dir.file("b.gguf")));
        ASSERT_EQ(b.status, 0) << b.err;
        const std::string fa = slurp(dir.file("a.gguf")), fb = slurp(dir.file("b.gguf"));
        EXPECT_GT(fa.size(), 100000u);
        EXPECT_TRUE(fa == fb) << "gen-model " << args << " is not deterministic";
    }
    ASSERT_EQ(run_offgrid("gen-model --seed 2 -o " + q(dir.file("c.gguf"))).status, 0);
    ASSERT_EQ(run_offgrid("gen-model -o " + q(dir.file("a.gguf"))).status, 0);
    EXPECT_EQ(slurp(dir.file("a.gguf")).size(), slurp(dir.file("c.gguf")).size());
    EXPECT_FALSE(slurp(dir.file("a.gguf")) == slurp(dir.file("c.gguf"))) << "the seed does not change the weights";
    // Nothing but the two outputs is left behind (no temporary files).
    size_t n_files = 0;
    for (const auto & e : fs::directory_iterator(dir.path())) n_files += e.is_regular_file();
    EXPECT_EQ(n_files, 3u);
}

TEST(GenModel, FollowsTheGgufConventionsOfTheSpec) {
    TempDir dir;
    const std::string path = dir.file("m.gguf");
    ASSERT_EQ(run_offgrid("gen-model --type f16 -o " + q(path)).status, 0);
    const gguf::Reader r = gguf::Reader::open(path);
    EXPECT_EQ(r.get_string("general.architecture"), "qwen4exp");
    const std::string a = "qwen4exp.";
    for (const char * key : {"ple.layer_multipliers", "ple.head_offsets", "ple.head_vocab_sizes"}) {
        const gguf::Value * v = r.find(a + key);
        ASSERT_NE(v, nullptr) << key;
        EXPECT_EQ(v->type, ValueType::ARRAY);
        EXPECT_EQ(v->elem_type, ValueType::U64) << key << " must be a u64 array";
    }
    for (const char * key : {"context_length", "embedding_length", "block_count", "ssm.conv_kernel", "ssm.inner_size",
                             "ssm.state_size", "ssm.time_step_rank", "ssm.group_count", "hyper_connection.count",
                             "attention.indexer.top_k", "ple.eos_token_id"}) {
        const gguf::Value * v = r.find(a + key);
        ASSERT_NE(v, nullptr) << key;
        EXPECT_EQ(v->type, ValueType::U32) << key;
    }
    EXPECT_EQ(r.find(a + "attention.layer_norm_rms_epsilon")->type, ValueType::F32);
    const gguf::Value * sections = r.find(a + "rope.dimension_sections");
    ASSERT_NE(sections, nullptr);
    EXPECT_EQ(sections->elem_type, ValueType::I32);
    EXPECT_EQ(sections->array.size(), 4u);
    // Tiny: layers 1 and 3 are full attention with r = 4; 0 and 2 are Gated DeltaNet.
    const gguf::Value * ratios = r.find(a + "attention.compress_ratios");
    const gguf::Value * recurrent = r.find(a + "attention.recurrent_layers");
    ASSERT_NE(ratios, nullptr);
    ASSERT_NE(recurrent, nullptr);
    EXPECT_EQ(recurrent->elem_type, ValueType::BOOL);
    ASSERT_EQ(ratios->array.size(), 4u);
    for (int il = 0; il < 4; ++il) {
        EXPECT_EQ(ratios->array[il].u, il % 2 == 1 ? 4u : 0u);
        EXPECT_EQ(recurrent->array[il].u, il % 2 == 1 ? 0u : 1u);
    }
    EXPECT_EQ(r.get_u32(a + "attention.indexer.top_k"), 64u);
    // The embedded vocabulary is attached, and the PLE EOS is its end-of-text token.
    const runtime::Tokenizer tok = runtime::Tokenizer::from_gguf(r);
    EXPECT_EQ(tok.n_vocab(), runtime::byte_vocab_spec().tokens.size());
    EXPECT_EQ(r.get_u32(a + "ple.eos_token_id"), static_cast<uint32_t>(*tok.eos()));
    EXPECT_EQ(tok.token_text(*tok.eos()), "<|endoftext|>");
    const std::string text = "Off the grid: 12 volts, \xc3\xa9t\xc3\xa9 \xe2\x9c\x93\n";
    EXPECT_EQ(tok.detokenize(tok.tokenize(text)), text);
    const gguf::TensorInfo * embd = r.find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->ne[1], static_cast<int64_t>(tok.n_vocab()));

    // Kernels, norms and small vectors stay F32; large matrices take the chosen type.
    for (const char * name : {"blk.0.ssm_conv1d.weight", "blk.0.ple_conv1d.weight", "blk.0.ssm_a", "blk.0.ssm_dt.bias",
                              "blk.0.ssm_norm.weight", "blk.1.attn_q_norm.weight", "blk.1.indexer.k_norm.weight",
                              "blk.0.hc_attn_norm.weight", "blk.1.ffn_gate_inp.weight", "output_hc_norm.weight"}) {
        const gguf::TensorInfo * t = r.find_tensor(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_EQ(t->type, ElemType::F32) << name;
    }
    for (const char * name : {"blk.1.attn_q.weight", "blk.0.attn_qkv.weight", "blk.2.ffn_up_exps.weight", "output.weight"}) {
        EXPECT_EQ(r.find_tensor(name)->type, ElemType::F16) << name;
    }
    // Shapes of the spec: attn_q {E, 2 D H}, experts {E, n_ff, n_expert}, ssm_conv1d {d_conv, conv_dim}.
    EXPECT_EQ(r.find_tensor("blk.1.attn_q.weight")->ne, (std::vector<int64_t>{64, 2 * 16 * 4}));
    EXPECT_EQ(r.find_tensor("blk.2.ffn_down_exps.weight")->ne, (std::vector<int64_t>{64, 64, 4}));
    EXPECT_EQ(r.find_tensor("blk.0.ssm_conv1d.weight")->ne, (std::vector<int64_t>{4, 2 * 16 * 2 + 16 * 4}));
    EXPECT_EQ(r.find_tensor("blk.0.ssm_a")->ne, (std::vector<int64_t>{4}));
    // ssm_a = -exp(A_log) < 0; folded gammas sit around 1 (1 + small w), as does the plain ssm_norm gamma.
    for (const float x : tensor_floats(*r.find_tensor("blk.2.ssm_a"))) EXPECT_LT(x, 0.0f);
    for (const char * name : {"blk.1.attn_k_norm.weight", "blk.3.indexer.q_norm.weight", "blk.0.ple_norm_key.weight",
                              "blk.2.ssm_norm.weight"}) {
        const auto v = tensor_floats(*r.find_tensor(name));
        double mean = 0;
        for (const float x : v) mean += x;
        mean /= static_cast<double>(v.size());
        EXPECT_NEAR(mean, 1.0, 0.1) << name;
    }
    // Our loader takes it, including hash multipliers at or above 2^63 (the u64 range).
    const model::qwen4exp::Model m = model::qwen4exp::Model::load(path);
    const gguf::Value * mult = r.find(a + "ple.layer_multipliers");
    ASSERT_EQ(m.hparams().ple_multipliers.size(), mult->array.size());
    bool high = false;
    for (size_t i = 0; i < mult->array.size(); ++i) {
        EXPECT_EQ(m.hparams().ple_multipliers[i], mult->array[i].u);
        EXPECT_EQ(mult->array[i].u % 2, 1u);  // odd, so the multiply is a bijection
        high = high || mult->array[i].u >= (1ull << 63);
    }
    EXPECT_TRUE(high) << "seed 1 draws a multiplier >= 2^63; the loader must accept it";
    EXPECT_EQ(m.hparams().kpool, 4u);
    EXPECT_EQ(m.hparams().idx_top_k, 64u);
    EXPECT_TRUE(m.hparams().has_ple);
    EXPECT_EQ(m.hparams().n_attn_layers(), 2u);
}

TEST(GenModel, OverridesAndQ8) {
    TempDir dir;
    const std::string path = dir.file("m.gguf");
    const CmdResult r = run_offgrid("gen-model -o " + q(path) +
                                    " --type q8_0 --n-embd 96 --n-layer 6 --attn-interval 3 --n-ctx 1000"
                                    " --qsa-ratio 8 --top-k 128 --idx-heads 3 --idx-dim 24 --n-head 6 --n-head-kv 3"
                                    " --head-dim 8 --n-rot 4 --n-expert 5 --n-expert-used 3 --ple-ngram 4");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("wrote"), std::string::npos);
    const model::qwen4exp::Model m = model::qwen4exp::Model::load(path);
    const auto & hp = m.hparams();
    EXPECT_EQ(hp.n_embd, 96u);
    EXPECT_EQ(hp.n_layer, 6u);
    EXPECT_EQ(hp.n_ctx_train, 1000u);
    EXPECT_EQ(hp.kpool, 8u);
    EXPECT_EQ(hp.idx_top_k, 128u);
    EXPECT_EQ(hp.idx_heads, 3u);
    EXPECT_EQ(hp.idx_dim, 24u);
    EXPECT_EQ(hp.n_head, 6u);
    EXPECT_EQ(hp.n_head_kv, 3u);
    EXPECT_EQ(hp.head_dim, 8u);
    EXPECT_EQ(hp.n_rot, 4u);
    EXPECT_EQ(hp.n_expert, 5u);
    EXPECT_EQ(hp.n_expert_used, 3u);
    EXPECT_EQ(hp.ple_ngram, 4u);
    EXPECT_EQ(hp.n_attn_layers(), 2u);  // layers 2 and 5
    EXPECT_FALSE(hp.is_recurrent[2]);
    EXPECT_FALSE(hp.is_recurrent[5]);
    const gguf::Reader & rd = m.reader();
    EXPECT_EQ(rd.find_tensor("blk.2.attn_q.weight")->type, ElemType::Q8_0);     // 96 columns: q8_0 blocks fit
    EXPECT_EQ(rd.find_tensor("blk.0.hc_attn_up.weight")->type, ElemType::F32);  // 8 columns: no q8_0 block fits
    EXPECT_EQ(rd.find_tensor("blk.0.ssm_conv1d.weight")->type, ElemType::F32);

    const CmdResult nople = run_offgrid("gen-model --no-ple --type bf16 -o " + q(path));
    ASSERT_EQ(nople.status, 0) << nople.err;
    const model::qwen4exp::Model m2 = model::qwen4exp::Model::load(path);
    EXPECT_FALSE(m2.hparams().has_ple);
    EXPECT_EQ(m2.reader().find_tensor("per_layer_token_embd.weight"), nullptr);
    EXPECT_EQ(m2.reader().find_tensor("blk.1.attn_v.weight")->type, ElemType::BF16);
}

TEST(GenModel, RejectsSettingsThatGiveNoValidModel) {
    TempDir dir;
    const std::string out = " -o " + q(dir.file("m.gguf"));
    expect_one_line_error(run_offgrid("gen-model --qsa-ratio 4 --top-k 30" + out), "top_k");
    expect_one_line_error(run_offgrid("gen-model --n-head 4 --n-head-kv 3" + out), "n_head_kv");
    expect_one_line_error(run_offgrid("gen-model --attn-interval 1" + out), "Gated DeltaNet");
    expect_one_line_error(run_offgrid("gen-model --n-embd 66" + out), "PLE head count");
    expect_one_line_error(run_offgrid("gen-model --hc 1" + out), "--hc");
    expect_one_line_error(run_offgrid("gen-model --type q4_k" + out), "q4_k");
    expect_one_line_error(run_offgrid("gen-model --preset huge" + out), "huge");
    expect_one_line_error(run_offgrid("gen-model"), "-o FILE");
    expect_one_line_error(run_offgrid("gen-model -o " + q(dir.file("no/such/dir/m.gguf"))), "no/such/dir");
    EXPECT_FALSE(fs::exists(dir.file("m.gguf")));
}

// Thousands of tokens through the tiny and small presets keep the logits finite (the weight scale is sane).
TEST(GenModel, FiniteLogitsOverThousandsOfTokens) {
    TempDir dir;
    for (const std::string preset : {"tiny", "small"}) {
        const std::string path = dir.file(preset + ".gguf");
        ASSERT_EQ(run_offgrid("gen-model --preset " + preset + " -o " + q(path)).status, 0);
        auto model = Model::load(path);
        ContextParams cp;
        cp.n_ctx = 4096;
        cp.n_threads = 2;
        Context ctx(model, cp);
        const runtime::Tokenizer tok = runtime::Tokenizer::from_gguf(model->impl().reader());
        std::vector<int32_t> tokens;
        while (tokens.size() < (preset == "tiny" ? 3000u : 1200u)) {
            tok.tokenize(runtime::byte_vocab_sample_text(), false, tokens);
        }
        size_t checked = 0;
        for (size_t i = 0; i < tokens.size(); i += 512) {
            std::vector<BatchToken> batch;
            for (size_t j = i; j < std::min(tokens.size(), i + 512); ++j) batch.push_back({tokens[j], -1, {0}, true});
            ASSERT_TRUE(ctx.decode(batch).ok());
            for (int32_t o = 0; o < ctx.n_outputs(); ++o) {
                const float * l = ctx.logits(o);
                float lo = l[0], hi = l[0];
                for (int32_t v = 0; v < model->n_vocab(); ++v) {
                    ASSERT_TRUE(std::isfinite(l[v])) << preset << " token " << i + o;
                    lo = std::min(lo, l[v]);
                    hi = std::max(hi, l[v]);
                }
                ASSERT_LT(hi - lo, 1000.0f) << preset << " token " << i + o;  // not blowing up
                ASSERT_GT(hi - lo, 0.01f) << preset << " token " << i + o;   // not collapsed
                ++checked;
            }
        }
        EXPECT_EQ(checked, tokens.size());
    }
}

// --n-vocab widens the embedding and the head past the byte vocabulary (the extra ids are unused tokens), and the
// scale preset is the real model's per-layer shape (only its settings are checked: the file is 13 GB).
TEST(GenModel, VocabularyOverrideAndScalePreset) {
    TempDir dir;
    const std::string path = dir.file("v.gguf");
    ASSERT_EQ(run_offgrid("gen-model --n-vocab 1000 -o " + q(path)).status, 0);
    const gguf::Reader r = gguf::Reader::open(path);
    EXPECT_EQ(r.find_tensor("token_embd.weight")->ne[1], 1000);
    EXPECT_EQ(r.find_tensor("output.weight")->ne[1], 1000);
    EXPECT_EQ(r.find("tokenizer.ggml.tokens")->array.size(), 1000u);
    const auto model = Model::load(path);
    // The figure `offgrid bench` divides by the time per token: every tensor but the gathered embedding tables,
    // the expert stacks for the experts a token uses.
    uint64_t expected = 0;
    const uint32_t n_expert = r.get_u32("qwen4exp.expert_count"), n_used = r.get_u32("qwen4exp.expert_used_count");
    for (const auto & t : r.tensors()) {
        if (t.name == "token_embd.weight" || t.name == "per_layer_token_embd.weight") continue;
        expected += t.name.find("_exps.") != std::string::npos ? t.n_bytes / n_expert * n_used : t.n_bytes;
    }
    EXPECT_EQ(model->weight_bytes_per_token(), expected);
    EXPECT_LT(expected, r.bytes().size());

    const auto c = offgrid::model::qwen4exp::gen_preset("scale");
    EXPECT_EQ(c.n_vocab, 248320u);
    EXPECT_EQ(c.n_embd, 2560u);
    EXPECT_EQ(c.hc_lr, 320u);
    EXPECT_EQ(c.n_layer, 24u);
    EXPECT_EQ(c.n_head * c.head_dim, 24u * 256u);
    EXPECT_EQ(c.n_expert, 32u);
    EXPECT_EQ(c.n_expert_used, 10u);
    EXPECT_NO_THROW(offgrid::model::qwen4exp::validate(c));
}

}  // namespace
}  // namespace offgrid::test
